"""What every stage entry point shares: load and validate params before anything else, seed, write metrics.

A stage module is ``def main(params) -> None`` plus ``if __name__ == "__main__": run_stage(main)``.
Invalid params end the process with exit code 2 and one line naming the key, before any output is touched; so do
refused inputs (a raw data file's bad line, an empty benchmark params ask for, an unreachable MLflow server). Under
`dvc repro`, which removes a stage's outputs before its command runs, the outputs of the last run are then put back
(:mod:`dsmath.runtime.restore`).
"""

from __future__ import annotations

import json
import os
import random
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from dsmath.config import Params, ParamsError, load_params
from dsmath.core.errors import StageError


def seed_everything(seed: int) -> None:
    """Seed Python, NumPy and torch (if importable) from params."""
    random.seed(seed)
    os.environ.setdefault("PYTHONHASHSEED", str(seed))
    try:
        import numpy as np

        np.random.seed(seed % 2**32)
    except ImportError:
        pass
    if "torch" in sys.modules or _importable("torch"):
        import torch

        torch.manual_seed(seed)


def _importable(name: str) -> bool:
    from importlib.util import find_spec

    return find_spec(name) is not None


def write_metrics(params: Params, stage: str, metrics: dict[str, Any]) -> Path:
    """Write `metrics/<name>.json`; '@' and '/' make sub-paths (`eval/rl` -> metrics/eval/rl.json)."""
    rel = stage.replace("@", "/") + ".json"
    path = Path(params.common.paths.metrics) / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(metrics, indent=2, sort_keys=True) + "\n")
    return path


def _restore_after_dvc() -> None:
    """Under `dvc repro` (DVC_STAGE set), DVC has removed the stage's outputs before this command ran: put back those
    of the last good run (dvc.lock) so that a refused params file costs nothing."""
    stage = os.environ.get("DVC_STAGE")
    if not stage:
        return
    from dsmath.runtime.restore import restore_stage_outputs

    restored, lost = restore_stage_outputs(stage, os.environ.get("DVC_ROOT", "."))
    if restored:
        print(f"{stage}: outputs of the last run restored ({', '.join(restored)})", file=sys.stderr)
    if lost:
        print(f"{stage}: outputs DVC removed that no cache or commit holds: {', '.join(lost)}", file=sys.stderr)


def run_stage(main: Callable[..., None], argv: list[str] | None = None, *, multiprocess: bool = False,
              threads: Callable[[Params], int] | None = None) -> None:
    """Validate params (exit 2 with a one-line message if invalid), seed, then run `main(params, *args)`.

    argv: ``[--params FILE] [ARG ...]``; FILE defaults to $DSMATH_PARAMS or ./params.yaml; ARGs (e.g. the model name
    of a `foreach` stage such as `evaluate@sft`) are passed on to `main`.
    multiprocess: the stage runs under a launcher (its ranks split the work, rank 0 writes); with
    ``common.processes`` > 1 and no launcher around it, the process re-runs itself under ``torch.distributed.run``
    over that many local workers and exits with the launcher's code.
    threads: the stage's own torch thread count from params (e.g. ``rl.threads``); 0 or None: common.num_threads.
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    relaunch = list(argv)
    path = None
    if "--params" in argv:
        i = argv.index("--params")
        path = argv[i + 1]
        del argv[i : i + 2]
    try:
        params = load_params(path)
    except ParamsError as err:
        print(f"error: invalid params: {err}", file=sys.stderr)
        _restore_after_dvc()
        raise SystemExit(2) from None
    n_threads = (threads(params) if threads else 0) or params.common.num_threads
    if multiprocess and params.common.processes > 1 and "WORLD_SIZE" not in os.environ:  # no launcher around it
        from dsmath.runtime import distributed

        raise SystemExit(distributed.launch(params.common.processes, n_threads, relaunch))
    if n_threads:
        import torch

        torch.set_num_threads(n_threads)
    seed_everything(params.common.seed)
    try:
        main(params, *argv)
    except StageError as err:  # bad data, no tracking server, divergence: one line naming the cause
        print(f"error: {err}", file=sys.stderr)
        _restore_after_dvc()
        raise SystemExit(err.exit_code) from None

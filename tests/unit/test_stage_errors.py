"""A stage that fails for a named cause prints one line and exits non-zero: 2 for a refused input, 1 for a failed
run; never a traceback, never exit 0."""

from __future__ import annotations

from pathlib import Path

import pytest

from dsmath.core.errors import RefusedInput, StageError
from dsmath.data.io import DataError
from dsmath.runtime.stage import run_stage
from dsmath.runtime.tracking import TrackingUnavailable
from dsmath.train.checkpoint import CorruptCheckpointError
from dsmath.train.loop import DivergenceError

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(("error", "code"), [
    (DataError("data/raw/gsm8k/test.jsonl:17: not valid JSON"), 2),
    (TrackingUnavailable("MLflow tracking server http://127.0.0.1:9 is not reachable"), 2),
    (DivergenceError("sft: training diverged at step 3"), 1),
    (CorruptCheckpointError("checkpoints/sft/step-000050 failed to load"), 1),
])
def test_a_stage_error_is_one_line_and_its_exit_code(error, code, capsys, monkeypatch):
    monkeypatch.delenv("DVC_STAGE", raising=False)

    def main(params):
        raise error

    with pytest.raises(SystemExit) as ended:
        run_stage(main, ["--params", str(ROOT / "params.yaml")])
    assert ended.value.code == code
    assert capsys.readouterr().err.strip().splitlines() == [f"error: {error}"]
    assert isinstance(error, StageError) and isinstance(error, RefusedInput) == (code == 2)


def test_other_errors_still_raise(monkeypatch):
    monkeypatch.delenv("DVC_STAGE", raising=False)

    def main(params):
        raise KeyError("a bug")

    with pytest.raises(KeyError):
        run_stage(main, ["--params", str(ROOT / "params.yaml")])


def test_a_stage_takes_its_own_thread_count_else_common_num_threads(monkeypatch):
    """run_stage(threads=...) (rl.threads, evaluate.threads) sets torch's threads; 0: common.num_threads."""
    import torch

    seen = []
    monkeypatch.setattr(torch, "set_num_threads", seen.append)
    argv = ["--params", str(ROOT / "params.yaml")]
    run_stage(lambda params: None, argv)
    run_stage(lambda params: None, argv, threads=lambda params: 1)
    run_stage(lambda params: None, argv, threads=lambda params: params.rl.threads)  # 0 in params.yaml
    assert seen == [2, 1, 2]

"""Run a stage with its decoding engine swapped for a variant of `bench_decode_attention.py` (#34): how much of a
decoding speed-up reaches a real stage (RL's generation phase, the evaluate stage), on a built chain.

    DSMATH_ENGINE=fused32 DSMATH_ENGINE_TIMES=/tmp/times.json \\
        .venv/bin/python benchmarks/with_engine.py stages.rl 1234

``DSMATH_ENGINE``: a name of `bench_decode_attention.VARIANTS` (``fp32`` is the engine as it is). Every call of
`dsmath.generation.rollout.sample` then builds that engine. ``DSMATH_ATTENTION32=1``: the stage runs inside
`dsmath.modeling.attention.float32_attention` (training forwards under bf16 autocast attend in float32).
``DSMATH_ENGINE_TIMES``: a JSON file that receives, at exit, the seconds spent in the RL trainer's
`reference_logprobs` per call (the reference model's forward over the batch, and under bf16 the rescoring of pi_old
by the training forward before it; a float32 run with a bf16 rollout would need that rescoring too, at the cost of
one more such forward: see `dsmath.rl.trainer`). Used by `bench_decode_stages.py`.
"""

from __future__ import annotations

import atexit
import json
import os
import runpy
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_decode_attention import VARIANTS, engine_maker, load_kernel  # noqa: E402

import dsmath.generation.rollout as rollout  # noqa: E402


def install(name: str) -> None:
    """Make `rollout.sample` decode with variant `name` (the fused ones: the kernel compiled or loaded first)."""
    if name not in VARIANTS:
        raise SystemExit(f"DSMATH_ENGINE={name!r}: one of {', '.join(VARIANTS)}")
    make = engine_maker(name, load_kernel() if name.startswith("fused") else None)
    rollout.make_engine = lambda model, batch, max_len, _engine="auto", _dtype=None: make(model, batch, max_len)


def time_reference_forward(path: str) -> None:
    """Record the seconds of each `RLTrainer.reference_logprobs` call into `path` at exit."""
    from dsmath.rl import trainer

    seconds: list[float] = []
    real = trainer.RLTrainer.reference_logprobs

    def timed(self, ro):
        start = time.perf_counter()
        out = real(self, ro)
        seconds.append(time.perf_counter() - start)
        return out

    trainer.RLTrainer.reference_logprobs = timed
    atexit.register(lambda: Path(path).write_text(json.dumps({"reference_logprobs_s": seconds}) + "\n"))


def main() -> None:
    install(os.environ.get("DSMATH_ENGINE", "fp32"))
    if os.environ.get("DSMATH_ENGINE_TIMES"):
        time_reference_forward(os.environ["DSMATH_ENGINE_TIMES"])
    module, *args = sys.argv[1:]
    sys.argv = [module, *args]
    from dsmath.modeling.attention import float32_attention

    with float32_attention(os.environ.get("DSMATH_ATTENTION32") == "1"):
        runpy.run_module(module, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()

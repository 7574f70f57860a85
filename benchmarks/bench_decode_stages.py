"""The fused decoding attention of `bench_decode_attention.py` inside the real stages (#34): the RL stage's phases and
the evaluate stage, per decoding engine, side by side on a built chain.

Runs `python -m stages.rl 1234` and `python -m stages.evaluate sft` of the default profile, shortened as in
`bench_precision.py` (its `STAGES` overrides: 6 RL steps, 256 synthetic test problems), through `with_engine.py`,
which swaps the engine every `rollout.sample` builds. Variants take turns, `--repeats` times, in a scratch workspace
per run (the chain's data and models linked, never written). Read back:

- RL: per step (MLflow's step metrics, the first step dropped as warm-up) the generate, score and train seconds, and
  the seconds of the reference model's forward (`with_engine.py`). A rollout decoded with a bf16 cache (``fused16``)
  is in another precision than training, so its pi_old must be rescored by the training forward, one more forward
  of the policy over the batch: `step_rescored_s` adds the reference forward's time, the same model over the same
  tokens, to that variant's step. ``fp32`` and ``fused32`` need none (the fused float32 attention agrees with the
  engine to ~1e-6 in the logits).
- evaluate: the stage's wall time and its problems/s (greedy CoT, sampled CoT, greedy tool).
- base, pretrain, sft (training: the engine matters only to SFT's probe): the wall time and the stage's metrics of
  `bench_precision.py` (training tokens/s; SFT's probe problems/s).

An arm is ``engine[:precision][+attention32]``: the engine variant, the stage's `common.dtype` (default float32;
``bfloat16`` trains RL's step under bf16 autocast and rescores pi_old itself) and, with ``+attention32``, the stage
inside `dsmath.modeling.attention.float32_attention`. ``fp32`` is the control.

    .venv/bin/python benchmarks/bench_decode_stages.py --chain /path/to/built/project \\
        --out benchmarks/results/decode_stages.json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from statistics import median

import torch
from bench_decode_attention import matmul_gflops
from bench_precision import STAGES, workspace

from dsmath.runtime import precision
from dsmath.runtime.provenance import cpu_name

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
PHASES = ("rl/time_generate_s", "rl/time_score_s", "rl/time_train_s", "rl/time_step_s")
RESCORE = {"fused16", "fused16c", "bf16w"}  # rollouts in another precision than training: pi_old is rescored


def parse_arm(arm: str) -> tuple[str, str, bool]:
    """'fused16:bfloat16+attention32' -> ('fused16', 'bfloat16', True)."""
    head, *levers = arm.split("+")
    engine, _, dtype = head.partition(":")
    if levers not in ([], ["attention32"]) or dtype not in ("", "float32", "bfloat16"):
        raise SystemExit(f"bad arm {arm!r}: engine[:float32|bfloat16][+attention32]")
    return engine, dtype or "float32", bool(levers)


def run(ws: Path, stage: str, arm: str) -> dict:
    """One shortened stage run of `arm`; its figures."""
    engine, dtype, attention32 = parse_arm(arm)
    arg = STAGES[stage][0]
    times = ws / "engine_times.json"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT / "src"), str(ROOT)]),
               MLFLOW_TRACKING_URI=f"sqlite:///{ws}/mlflow.db", PREFECT_SERVER_ANALYTICS_ENABLED="false",
               DSMATH_ENGINE=engine, DSMATH_ENGINE_TIMES=str(times), DSMATH_ATTENTION32=str(int(attention32)))
    env.pop("DSMATH_PARENT_RUN_ID", None)
    start = time.perf_counter()
    cmd = [sys.executable, str(HERE / "with_engine.py"), f"stages.{stage}", *([arg] if arg else [])]
    subprocess.run(cmd, cwd=ws, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    out: dict = {"wall_s": time.perf_counter() - start}
    if stage != "rl":
        rel = f"eval/{arg}.json" if stage == "evaluate" else f"{stage}.json"
        metrics = json.loads((ws / "metrics" / rel).read_text())
        return out | {k: metrics[k] for k, _ in STAGES[stage][2]}
    history = step_history(ws)
    ref = json.loads(times.read_text())["reference_logprobs_s"][1:]
    out |= {k.removeprefix("rl/"): median(v[1:]) for k, v in history.items()}
    out["reference_forward_s"] = median(ref)
    # under bf16 the trainer rescores pi_old itself (inside its train phase); else a bf16 rollout would need it added
    added = engine in RESCORE and dtype == "float32"
    out["step_rescored_s"] = out["time_step_s"] + (out["reference_forward_s"] if added else 0.0)
    return out


def step_history(ws: Path) -> dict[str, list[float]]:
    """The RL run's per-step phase times from its MLflow store (in step order)."""
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{ws}/mlflow.db")
    runs = [r for e in client.search_experiments() for r in client.search_runs([e.experiment_id])
            if PHASES[0] in r.data.metrics]
    if len(runs) != 1:
        raise RuntimeError(f"{ws}: expected one RL run with {PHASES[0]}, found {len(runs)}")
    run_id = runs[0].info.run_id
    return {k: [m.value for m in sorted(client.get_metric_history(run_id, k), key=lambda m: m.step)]
            for k in PHASES}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--chain", required=True, help="a project whose models/ (tokenizer ... sft) and data/ are built")
    ap.add_argument("--params", default=str(ROOT / "params.yaml"))
    ap.add_argument("--arms", nargs="+", default=["fp32", "fused32", "fused16"],
                    help="engine[:precision][+attention32]; fp32 is the control")
    ap.add_argument("--stages", nargs="+", default=["rl", "evaluate"], choices=list(STAGES))
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--tmp", default="/tmp/bench_decode_stages")
    ap.add_argument("--out")
    args = ap.parse_args()
    chain, tmp = Path(args.chain).resolve(), Path(args.tmp)
    torch.set_num_threads(2)
    def gflops() -> dict[str, float]:
        return {d: matmul_gflops(precision.DTYPES[d]) for d in ("float32", "bfloat16")}

    result = {"cpu": cpu_name(), "cpu_bf16_flags": sorted(precision.cpu_flags() & precision.NATIVE_BF16_FLAGS),
              "matmul_gflops_start": gflops(), "repeats": args.repeats,
              "overrides": {s: STAGES[s][1] for s in args.stages}, "runs": {}}
    print(json.dumps({k: result[k] for k in ("cpu", "cpu_bf16_flags", "matmul_gflops_start")}))
    runs = result["runs"]
    for r in range(args.repeats):
        for stage in args.stages:
            order = args.arms if r % 2 == 0 else args.arms[::-1]
            for arm in order:
                # a workspace of its own per run: MLflow keeps its database connection per tracking URI
                name = arm.replace(":", "-").replace("+", "-")
                ws = workspace(chain, tmp / f"{name}-{r}", stage, parse_arm(arm)[1], Path(args.params))
                figures = run(ws, stage, arm)
                runs.setdefault(stage, {}).setdefault(arm, []).append(figures)
                print(f"repeat {r} {stage:8s} {arm:8s} " + " ".join(f"{k}={v:.4g}" for k, v in figures.items()),
                      flush=True)
    result["matmul_gflops_end"] = gflops()
    table: dict = {}
    for stage, by_engine in runs.items():
        keys = list(next(iter(by_engine.values()))[0])
        base = {k: median(x[k] for x in by_engine["fp32"]) for k in keys} if "fp32" in by_engine else None
        for engine, xs in by_engine.items():
            row = {k: median(x[k] for x in xs) for k in keys}
            if base:  # > 1: faster than the engine as it is (rates divided, seconds inverted)
                row["vs_fp32"] = {k: (row[k] / base[k] if (stage != "rl" and k != "wall_s") else
                                      base[k] / row[k]) for k in keys if row[k]}
            table.setdefault(stage, {})[engine] = row
            print(f"{stage:8s} {engine:8s} " + " ".join(
                f"{k}={row[k]:.4g} (x{row.get('vs_fp32', {}).get(k, float('nan')):.2f})" for k in keys))
    result["table"] = table
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()

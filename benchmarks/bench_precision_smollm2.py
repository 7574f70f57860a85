"""SmolLM2-135M's whole chain in float32 and in bfloat16, stage by stage side by side on one machine (#34).

The chain is `smollm2_grpo.sh`'s (``benchmarks/profiles/smollm2_grpo.yaml``: tokenizer, base, pretrain, 40 CoT SFT
steps, 12 GRPO steps, greedy CoT evaluation of the SFT and the GRPO model on 100 GSM8K / 100 SVAMP / 100 synthetic test
and 50 validation problems). Each precision is its own chain under ``runs/smollm2-grpo-<dtype>-<seed>/``: the
bfloat16 chain's GRPO starts from its own bf16-trained SFT model, as a run under ``dtype: auto`` would where every stage
is on the bf16 list. The two precisions run one after the other, stage by stage, the first of each pair alternating
between stages so that a drift of the machine lands on both; nothing else runs beside them.

Prints and writes the stage table (seconds per stage in each precision, the ratio, each run's peak RSS), the whole
chain's ratio, the ratio of a chain that takes bf16 only in the stages where it was faster, the two chains' RL and
evaluation figures, and bf16 - fp32 greedy accuracy of the SFT and the GRPO model paired by test problem (one seed a
call, `--seed`: a smoke-scale check of learning, not a parity claim), with the CPU, its bf16 kind and its matmul
GFLOP/s in both precisions.

    .venv/bin/python benchmarks/bench_precision_smollm2.py --out benchmarks/results/precision_smollm2.json

The data are the default corpus stage's (run ``python -m stages.corpus`` first, or ``bash benchmarks/smollm2_grpo.sh``).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path
from statistics import mean, stdev

import torch
import yaml

from dsmath.runtime import precision
from dsmath.runtime.provenance import cpu_name
from dsmath.train.flops import matmul_flops_per_s

ROOT = Path(__file__).resolve().parents[1]
PROFILE = ROOT / "benchmarks" / "profiles" / "smollm2_grpo.yaml"
DTYPES = ("float32", "bfloat16")
STAGES = ("tokenizer", "base", "pretrain", "sft", "rl", "evaluate sft", "evaluate rl")
EVAL_KEYS = ("gsm8k_test/cot/greedy", "svamp/cot/greedy", "synthetic/cot/greedy", "val/synthetic/cot/greedy")
RL_KEYS = ("steps", "s_per_step", "reward_mean_last10", "kl_last10")


def overlay(dtype: str, seed: int, out: Path) -> Path:
    """An overlay on the SmolLM2 GRPO profile: `dtype` in every stage, `seed` for the data order, SFT and RL, outputs
    under `out`."""
    paths = {k: str(out / k) for k in ("metrics", "models", "checkpoints", "eval", "reports", "plots")}
    path = out / "params.yaml"
    out.mkdir(parents=True, exist_ok=True)
    common = {"seed": seed, "rl_seeds": [seed], "dtype": dtype, "paths": paths}
    path.write_text(yaml.safe_dump({"extends": str(PROFILE), "common": common}, sort_keys=False))
    return path


def run_stage(stage: list[str], params: Path, out: Path) -> dict:
    """Run one stage in its own process; its wall seconds and peak RSS (GB)."""
    env = dict(os.environ, MLFLOW_TRACKING_URI=f"sqlite:///{out}/mlflow.db", PREFECT_SERVER_ANALYTICS_ENABLED="false",
               MLFLOW_ENABLE_ASYNC_LOGGING="false")
    env.pop("DSMATH_PARENT_RUN_ID", None)
    name = "-".join(stage)
    with open(out / f"{name}.log", "w") as log:
        t0 = time.perf_counter()
        proc = subprocess.Popen([sys.executable, "-m", f"stages.{stage[0]}", "--params", str(params), *stage[1:]],
                                cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
        _, status, usage = os.wait4(proc.pid, 0)
        seconds = time.perf_counter() - t0
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{name} failed in {out}: see {out / f'{name}.log'}")
    return {"seconds": seconds, "peak_rss_gb": usage.ru_maxrss / 2**20}


def learning(out: Path, seed: int) -> dict:
    metrics = out / "metrics"
    rl = json.loads((metrics / "rl" / f"seed-{seed}.json").read_text())
    evals = {m: json.loads((metrics / "eval" / f"{m}.json").read_text()) for m in ("sft", "rl")}
    return {"rl": {k: rl.get(k) for k in RL_KEYS},
            "eval": {m: {k: 100 * e[k] for k in EVAL_KEYS} for m, e in evals.items()},
            "bf16": {m: e.get("bf16") for m, e in evals.items()}}


def correct(out: Path, model: str, seed: int) -> dict[tuple, float]:
    """{(dataset, problem id): 1.0 / 0.0}: the greedy CoT verdicts of `model`'s evaluation on the test problems (the
    RL model's are under its seed)."""
    folder = out / "eval" / ("sft" if model == "sft" else f"rl/seed-{seed}")
    rows = (json.loads(line) for line in (folder / "predictions.jsonl").read_text().splitlines())
    return {(r["dataset"], r["id"]): float(r["greedy_correct"]) for r in rows
            if r["mode"] == "cot"}


def paired(outs: dict[str, Path], seed: int) -> dict:
    """bf16 - fp32 greedy accuracy per model over the test problems both chains answered, in points, with its SE
    paired by problem."""
    out = {}
    for model in ("sft", "rl"):
        a, b = correct(outs["bfloat16"], model, seed), correct(outs["float32"], model, seed)
        d = [100 * (a[k] - b[k]) for k in sorted(set(a) & set(b))]
        out[model] = {"problems": len(d), "diff": round(mean(d), 2), "se": round(stdev(d) / math.sqrt(len(d)), 2)}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=Path, default=ROOT / "runs",
                    help="the chains go under <runs>/smollm2-grpo-<dtype>-<seed>")
    ap.add_argument("--seed", type=int, default=1234, help="common.seed and the one RL seed of both chains")
    ap.add_argument("--out", type=Path, help="write the result JSON here")
    args = ap.parse_args()
    machine = {"cpu": cpu_name(), "bf16_kind": precision.bf16_kind(precision.cpu_flags()),
               "threads": torch.get_num_threads(),
               "matmul_gflops": {d: round(matmul_flops_per_s(dtype=precision.DTYPES[d]) / 1e9) for d in DTYPES}}
    print(json.dumps(machine), flush=True)
    outs = {d: args.runs / f"smollm2-grpo-{d}-{args.seed}" for d in DTYPES}
    params = {d: overlay(d, args.seed, outs[d]) for d in DTYPES}
    rows = []
    for i, stage in enumerate(STAGES):
        row = {"stage": stage}
        argv = stage.split() + ([str(args.seed)] if stage == "rl" else [])
        for d in DTYPES if i % 2 == 0 else DTYPES[::-1]:
            r = run_stage(argv, params[d], outs[d])
            row[f"{d}_s"], row[f"{d}_rss_gb"] = round(r["seconds"], 1), round(r["peak_rss_gb"], 2)
        row["ratio"] = round(row["bfloat16_s"] / row["float32_s"], 3)
        rows.append(row)
        print(json.dumps(row), flush=True)
    wall = {d: sum(r[f"{d}_s"] for r in rows) for d in DTYPES}
    best = sum(min(r["float32_s"], r["bfloat16_s"]) for r in rows)
    result = {"machine": machine, "profile": str(PROFILE.relative_to(ROOT)), "seed": args.seed, "stages": rows,
              "wall_s": wall, "wall_ratio": round(wall["bfloat16"] / wall["float32"], 3),
              "bf16_where_faster_ratio": round(best / wall["float32"], 3),
              "bf16_where_faster": [r["stage"] for r in rows if r["bfloat16_s"] < r["float32_s"]],
              "learning": {d: learning(outs[d], args.seed) for d in DTYPES}, "bf16_minus_fp32": paired(outs, args.seed)}
    print(json.dumps({k: result[k] for k in ("wall_s", "wall_ratio", "bf16_where_faster_ratio")}))
    for d in DTYPES:
        print(d, json.dumps(result["learning"][d]))
    print("bf16 - fp32 greedy CoT, paired by problem (points):", json.dumps(result["bf16_minus_fp32"]))
    if args.out:
        args.out.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()

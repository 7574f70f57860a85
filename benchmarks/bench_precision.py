"""Each torch stage in float32 and in bfloat16 on this machine, side by side: which stages bf16 makes faster.

Runs the real stage commands (`python -m stages.<stage>`) of the default profile, shortened (a few training steps,
a few RL steps, a slice of the evaluation), in a scratch workspace made from a project whose chain is built (its
`data/` and `models/` are linked, never written). The two precisions alternate, `--repeats` times, so that a change
in the machine's load hits both alike. Per stage it reads the stage's own speed metric (tokens/s of training time,
s/step of RL, problems/s of evaluation) and prints the bf16 / fp32 ratio (> 1: bf16 faster), with the CPU's name,
its bf16 flags and the fp32 and bf16 matmul rates. The stages where bf16 is faster are what `common.auto_bf16` lists
for this kind of CPU (amx, avx512_bf16, arm_bf16).

    .venv/bin/python benchmarks/bench_precision.py --chain /path/to/built/project \
        --out benchmarks/results/precision.json
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from statistics import median

import torch
import yaml

from dsmath.runtime import precision
from dsmath.runtime.provenance import cpu_name
from dsmath.train.flops import matmul_flops_per_s

ROOT = Path(__file__).resolve().parents[1]
DTYPES = ("float32", "bfloat16")

# stage -> (argument, params overrides that shorten it, [(metric, higher is better)])
STAGES = {
    "base": ("", {"base.train.max_steps": 20, "base.train.checkpoint_every": 0, "base.train.log_every": 20},
             [("tokens_per_s", True)]),
    "pretrain": ("", {"pretrain.train.max_steps": 20, "pretrain.train.checkpoint_every": 0,
                      "pretrain.train.log_every": 20, "pretrain.heldout_docs": 20},
                 [("tokens_per_s", True)]),
    "sft": ("", {"sft.train.max_steps": 20, "sft.train.checkpoint_every": 0, "sft.train.log_every": 20,
                 "sft.probe.n_problems": 128, "sft.probe.modes": ["cot"], "sft.val_examples": 64},
            [("tokens_per_s", True), ("cot/greedy_problems_per_s", True), ("cot/sampled_problems_per_s", True)]),
    "rl": ("1234", {"rl.steps": 6, "rl.eval_every": 1000, "rl.checkpoint_every": 1000, "rl.samples_every": 1000,
                    "rl.warmup_steps": 1},
           [("s_per_step", False)]),
    "evaluate": ("sft", {"evaluate.datasets.synthetic": 256, "evaluate.datasets.gsm8k_test": 0,
                         "evaluate.datasets.svamp": 0, "evaluate.datasets.math500": 0, "evaluate.val_problems": 64},
                 [("synthetic/cot/greedy_problems_per_s", True), ("synthetic/cot/sampled_problems_per_s", True),
                  ("synthetic/tool/greedy_problems_per_s", True)]),
}


def _set(raw: dict, dotted: str, value) -> None:
    node = raw
    *parents, leaf = dotted.split(".")
    for p in parents:
        node = node[p]
    node[leaf] = value


def workspace(chain: Path, tmp: Path, stage: str, dtype: str, base_params: Path) -> Path:
    """A scratch project for one stage run: the chain's data and models linked in, its own outputs and MLflow store."""
    ws = tmp / f"{stage}-{dtype}"
    shutil.rmtree(ws, ignore_errors=True)
    (ws / "models").mkdir(parents=True)
    (ws / "data").symlink_to(chain / "data")
    for model in ("tokenizer", "base", "pretrain", "sft"):
        if (chain / "models" / model).exists() and model != stage:  # a training stage writes its own
            (ws / "models" / model).symlink_to(chain / "models" / model)
    raw = yaml.safe_load(base_params.read_text())
    for dotted, value in STAGES[stage][1].items():
        _set(raw, dotted, value)
    _set(raw, "common.dtype", dtype)
    (ws / "params.yaml").write_text(yaml.safe_dump(raw, sort_keys=False))
    return ws


def run_stage(ws: Path, stage: str) -> dict:
    arg = STAGES[stage][0]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT / "src"), str(ROOT)]),
               MLFLOW_TRACKING_URI=f"sqlite:///{ws}/mlflow.db", PREFECT_SERVER_ANALYTICS_ENABLED="false")
    env.pop("DSMATH_PARENT_RUN_ID", None)
    cmd = [sys.executable, "-m", f"stages.{stage}", *([arg] if arg else [])]
    t0 = time.perf_counter()
    subprocess.run(cmd, cwd=ws, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    wall = time.perf_counter() - t0
    rel = {"rl": "rl/seed-1234.json", "evaluate": f"eval/{arg}.json"}.get(stage, f"{stage}.json")
    metrics = json.loads((ws / "metrics" / rel).read_text())
    return {"wall_s": wall, "bf16": metrics.get("bf16"), **{k: metrics[k] for k, _ in STAGES[stage][2]}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--chain", required=True, help="a project whose models/ (tokenizer ... sft) and data/ are built")
    ap.add_argument("--params", default=str(ROOT / "params.yaml"))
    ap.add_argument("--stages", nargs="+", default=list(STAGES))
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--tmp", default="/tmp/bench_precision")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    chain, tmp = Path(args.chain).resolve(), Path(args.tmp)
    torch.set_num_threads(2)
    machine = {"cpu": cpu_name(), "cpu_bf16_flags": sorted(precision.cpu_flags() & precision.NATIVE_BF16_FLAGS),
               "cpu_bf16_kind": precision.bf16_kind(precision.cpu_flags()),
               "cores": os.cpu_count(),
               "matmul_gflops_before": {d: matmul_flops_per_s(2048, dtype=precision.DTYPES[d]) / 1e9 for d in DTYPES}}
    print(json.dumps(machine))
    runs: dict[str, dict[str, list[dict]]] = {s: {d: [] for d in DTYPES} for s in args.stages}
    for r in range(args.repeats):
        for stage in args.stages:
            for dtype in (DTYPES if r % 2 == 0 else DTYPES[::-1]):  # alternate which goes first
                ws = workspace(chain, tmp, stage, dtype, Path(args.params))
                result = run_stage(ws, stage)
                runs[stage][dtype].append(result)
                print(f"repeat {r} {stage:9s} {dtype:9s} " + " ".join(
                    f"{k}={v:.4g}" for k, v in result.items() if isinstance(v, float)), flush=True)
    machine["matmul_gflops_after"] = {d: matmul_flops_per_s(2048, dtype=precision.DTYPES[d]) / 1e9 for d in DTYPES}
    table = {}
    for stage in args.stages:
        table[stage] = {}
        for metric, higher in STAGES[stage][2]:
            fp32 = median(x[metric] for x in runs[stage]["float32"])
            bf16 = median(x[metric] for x in runs[stage]["bfloat16"])
            table[stage][metric] = {"float32": fp32, "bfloat16": bf16,
                                    "speedup": bf16 / fp32 if higher else fp32 / bf16}
    print(f"\n{'stage':9s} {'metric':40s} {'fp32':>10s} {'bf16':>10s} {'bf16 speed-up':>14s}")
    for stage, metrics in table.items():
        for metric, row in metrics.items():
            print(f"{stage:9s} {metric:40s} {row['float32']:10.4g} {row['bfloat16']:10.4g} {row['speedup']:13.2f}x")
    print(json.dumps(machine))
    if args.out:
        out = {"machine": machine, "load_avg_1m_at_end": os.getloadavg()[0], "repeats": args.repeats,
               "overrides": {s: STAGES[s][1] for s in args.stages}, "table": table, "runs": runs}
        Path(args.out).write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    main()

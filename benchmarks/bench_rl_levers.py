"""Does GRPO learn as much with #34's speed levers? The RL stage from one SFT model, float32 against the levers.

`bench_decode_stages.py` measured the RL step 1.46x faster with three levers together: rollouts decoded by the fused
kernel over a bf16 KV cache with bf16 weights (`bench_decode_attention.py`'s ``fused16``), the step trained under
bf16 autocast (`common.dtype: bfloat16`, which also rescores pi_old by the training forward) and the training
attention in float32 (`dsmath.modeling.attention.float32_attention`). This runs the real RL stage at the full default
budget from one built chain's SFT model, once per (arm, seed), the arms of a seed side by side (`--jobs` at a time,
`--threads` each), through `with_engine.py`; then both the SFT model and each RL model on `--val-problems`
validation problems by the evaluate stage in float32 with the engine as it is. The gain to judge by is RL model
minus SFT model there; arms are compared by the per-seed paired difference of their gains (mean, SE over seeds).
Nothing is chosen from these figures. Arms as in `bench_decode_stages.py`: ``engine[:precision][+attention32]``.

    .venv/bin/python benchmarks/bench_rl_levers.py --chain /path/to/built/project --seeds 1234 1235 1236 \\
        --out benchmarks/results/rl_levers.json
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from statistics import mean, stdev

import yaml
from bench_decode_stages import parse_arm
from bench_precision_sft import RL_METRICS, edited_params, snapshot, stage_env, val_greedy

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent


def workspace(chain: Path, tmp: Path, arm: str, seed: int, params: Path, threads: int) -> Path:
    """A scratch project for one RL run: the chain's data and models through SFT linked in (never written)."""
    ws = tmp / f"{arm.replace(':', '-').replace('+', '-')}-{seed}"
    shutil.rmtree(ws, ignore_errors=True)
    (ws / "models").mkdir(parents=True)
    (ws / "data").symlink_to(chain / "data")
    for model in ("tokenizer", "base", "pretrain", "sft"):
        (ws / "models" / model).symlink_to(chain / "models" / model)
    raw = yaml.safe_load(params.read_text())
    raw["common"].update(dtype=parse_arm(arm)[1], seed=seed, rl_seeds=[seed], num_threads=threads, processes=1)
    (ws / "params.yaml").write_text(yaml.safe_dump(raw, sort_keys=False))
    return ws


def run_rl(ws: Path, code: Path, arm: str, seed: int, threads: int) -> dict:
    """The RL stage at `seed` with `arm`'s engine, precision and lever; its summary, prefixed `rl/`."""
    engine, _, attention32 = parse_arm(arm)
    env = stage_env(ws, code, threads) | {"DSMATH_ENGINE": engine, "DSMATH_ATTENTION32": str(int(attention32))}
    start = time.perf_counter()
    with open(ws / "rl.log", "w") as log:
        subprocess.run([sys.executable, str(HERE / "with_engine.py"), "stages.rl", str(seed)], cwd=ws, env=env,
                       check=True, stdout=log, stderr=subprocess.STDOUT)
    metrics = json.loads((ws / "metrics" / "rl" / f"seed-{seed}.json").read_text())
    return {f"rl/{k}": metrics.get(k) for k in RL_METRICS} | {"rl/bf16": metrics.get("bf16"),
                                                             "rl/wall_s": time.perf_counter() - start}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--chain", required=True, help="a project whose models/ (tokenizer ... sft) and data/ are built")
    ap.add_argument("--params", default=str(ROOT / "params.yaml"))
    ap.add_argument("--arms", nargs="+", default=["fp32", "fused16:bfloat16+attention32"],
                    help="the first is the control")
    ap.add_argument("--seeds", nargs="+", type=int, default=[1234, 1235, 1236])
    ap.add_argument("--val-problems", type=int, default=500)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--tmp", default="/tmp/bench_rl_levers")
    ap.add_argument("--out")
    args = ap.parse_args()
    chain, tmp = Path(args.chain).resolve(), Path(args.tmp)
    tmp.mkdir(parents=True, exist_ok=True)
    code = snapshot(tmp)
    import torch
    from bench_decode_attention import matmul_gflops

    from dsmath.runtime import precision
    from dsmath.runtime.provenance import cpu_name

    machine = {"cpu": cpu_name(), "cpu_bf16_kind": precision.bf16_kind(precision.cpu_flags()),
               "matmul_gflops": {d: matmul_gflops(precision.DTYPES[d]) for d in ("float32", "bfloat16")},
               "matmul_threads": torch.get_num_threads()}
    print(json.dumps(machine), flush=True)
    runs: dict[str, dict[int, dict]] = {a: {} for a in args.arms}

    def one(job: tuple[str, int]) -> None:
        arm, seed = job
        ws = workspace(chain, tmp, arm, seed, Path(args.params), args.threads)
        result = run_rl(ws, code, arm, seed, args.threads)
        tag = "-bfloat16" if result["rl/bf16"] else "-float32"
        with edited_params(ws) as raw:  # the evaluations: float32, the engine as it is
            raw["common"]["dtype"] = "float32"
        sft = val_greedy(ws, code, "sft", seed, args.val_problems, args.threads)
        rl = val_greedy(ws, code, "rl", seed, args.val_problems, args.threads, tag)
        result |= {"val_sft": sft, "val_rl": rl, "val_gain": rl - sft}
        runs[arm][seed] = result
        print(f"{arm} seed {seed}: " + " ".join(f"{k}={v:.4g}" for k, v in result.items()
                                                if isinstance(v, float)), flush=True)

    with ThreadPoolExecutor(args.jobs) as pool:
        list(pool.map(one, [(a, s) for s in args.seeds for a in args.arms]))
    control, table = args.arms[0], {}
    for metric in ("val_gain", "val_rl", "rl/val_greedy_acc_end", "rl/reward_mean_last10", "rl/kl_last10",
                   "rl/s_per_step", "rl/wall_s"):
        row = {}
        for arm in args.arms:
            xs = [runs[arm][s][metric] for s in args.seeds if runs[arm][s].get(metric) is not None]
            row[arm] = {"mean": mean(xs), "sd": stdev(xs) if len(xs) > 1 else None}
        for arm in args.arms[1:]:
            d = [runs[arm][s][metric] - runs[control][s][metric] for s in args.seeds]
            row[f"{arm} - {control}"] = {"mean": mean(d), "se": stdev(d) / len(d) ** 0.5 if len(d) > 1 else None}
        table[metric] = row
        print(f"{metric:24s} " + " | ".join(f"{k} {v['mean']:.4g}" + (
            f" ({v.get('sd', v.get('se')):.2g})" if v.get("sd", v.get("se")) is not None else "")
            for k, v in row.items()))
    if args.out:
        Path(args.out).write_text(json.dumps({"machine": machine, "arms": args.arms, "seeds": args.seeds,
                                              "threads": args.threads, "jobs": args.jobs,
                                              "val_problems": args.val_problems, "table": table,
                                              "runs": {a: {str(s): r for s, r in rs.items()}
                                                       for a, rs in runs.items()}}, indent=1) + "\n")


if __name__ == "__main__":
    main()

"""A stage of this repository's code against another commit's, side by side on the same inputs.

Checks out `--old` as a detached git worktree in a temporary folder whose ``data/`` and ``models/`` are links to this
repository's (the chain up to the model the stage reads must exist here), then runs the same stage
(``python -m stages.<stage> [arg]``) from each side, alternating old / new ``--repeats`` times so that background
load and drift hit both alike. Each side runs its own code (``PYTHONPATH=<side>/src``) with its own ``params.yaml``
plus the ``--set`` overrides, every output (metrics, eval, checkpoints, plots, the stage's model, MLflow) redirected
to a fresh temporary folder. The fp32 2048^2 matmul rate is measured before every run.

Reported: each side's wall time and every throughput its metrics record (keys ending in ``_per_s``), as medians,
with new / old ratios, and whether the untimed metrics of the two sides agree.

    .venv/bin/python benchmarks/bench_commits.py --old 6699367 --stage evaluate --arg sft \\
        --set evaluate.datasets.synthetic=256 evaluate.datasets.gsm8k_test=0 --repeats 2
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench_processes import stage_metrics, stage_params, untimed


def run_side(side: Path, data_root: Path, stage: str, arg: str | None, overrides: list[str]) -> dict:
    """One run of the stage from `side`: wall time, matmul rate, the stage's metrics."""
    from dsmath.train.flops import matmul_flops_per_s

    out = Path(tempfile.mkdtemp(prefix="bench_commits_"))
    try:
        params = stage_params(side, data_root, out, stage, overrides)
        env = {k: v for k, v in os.environ.items() if k not in ("MLFLOW_TRACKING_URI", "DSMATH_PARENT_RUN_ID")}
        env["PYTHONPATH"] = str(side / "src")
        peak = matmul_flops_per_s() / 1e9
        cmd = [sys.executable, "-m", f"stages.{stage}", "--params", str(params)] + ([arg] if arg else [])
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, cwd=side, env=env, capture_output=True, text=True)
        wall = time.perf_counter() - t0
        if proc.returncode != 0:
            raise SystemExit(f"{side} failed:\n{proc.stderr[-3000:]}")
        return {"wall_s": wall, "matmul_gflops": peak, "metrics": stage_metrics(out, stage, arg)}
    finally:
        shutil.rmtree(out, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--old", required=True, help="the commit to compare against (any git revision)")
    ap.add_argument("--stage", required=True, help="base | pretrain | sft | rl | evaluate")
    ap.add_argument("--arg", default=None, help="the foreach item: the model of evaluate, the seed of rl")
    ap.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE", help="params overrides, both sides")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--out", default=None, help="write the results as JSON here")
    args = ap.parse_args()

    import torch

    from dsmath.runtime.provenance import cpu_name

    torch.set_num_threads(2)
    root = Path(__file__).resolve().parents[1]
    old_rev = subprocess.run(["git", "rev-parse", args.old], cwd=root, capture_output=True, text=True,
                             check=True).stdout.strip()
    new_rev = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True,
                             check=True).stdout.strip()
    tree = Path(tempfile.mkdtemp(prefix="bench_commits_old_")) / "repo"
    subprocess.run(["git", "worktree", "add", "--detach", str(tree), old_rev], cwd=root, check=True,
                   capture_output=True)
    runs: dict[str, list[dict]] = {"old": [], "new": []}
    try:
        for r in range(args.repeats):
            for name, side in (("old", tree), ("new", root)) if r % 2 == 0 else (("new", root), ("old", tree)):
                run = run_side(side, root, args.stage, args.arg, args.set)
                runs[name].append(run)
                print(f"repeat {r} {name}: {run['wall_s']:.1f} s (matmul {run['matmul_gflops']:.0f} GFLOP/s)",
                      flush=True)
    finally:
        subprocess.run(["git", "worktree", "remove", "--force", str(tree)], cwd=root, capture_output=True)
        shutil.rmtree(tree.parent, ignore_errors=True)

    def median(name: str, key: str) -> float | None:
        values = [run["metrics"].get(key) if key != "wall_s" else run["wall_s"] for run in runs[name]]
        return statistics.median(values) if values and None not in values else None

    keys = ["wall_s"] + sorted(k for k in runs["new"][0]["metrics"] if k.endswith("_per_s"))
    table = {}
    print(f"\n{args.stage} {args.arg or ''} {' '.join(args.set)}\nold {old_rev[:7]}  new {new_rev[:7]}")
    print(f"{'what':<50}{'old':>10}{'new':>10}{'speed-up':>10}")
    for key in keys:
        old, new = median("old", key), median("new", key)
        if old is None or new is None:
            continue
        speedup = old / new if key == "wall_s" else new / old
        table[key] = {"old": old, "new": new, "speedup": speedup}
        print(f"{key:<50}{old:>10.1f}{new:>10.1f}{speedup:>9.2f}x")
    kept = [untimed(run["metrics"]) for name in ("old", "new") for run in runs[name]]
    same = all(k == kept[0] for k in kept)
    print(f"untimed metrics equal on both sides: {same}")
    if args.out:
        Path(args.out).write_text(json.dumps({
            "stage": args.stage, "arg": args.arg, "overrides": args.set, "old": old_rev, "new": new_rev,
            "cpu": cpu_name(), "table": table, "untimed_equal": same, "runs": runs}, indent=1) + "\n")


if __name__ == "__main__":
    main()

"""A stage as one process at 2 threads against 2 processes at 1 thread (``common.processes``), side by side.

Runs a real stage (``python -m stages.<stage> [arg]``) of a repository whose inputs exist (the chain up to the
model the stage reads), once per setting in ``--settings`` (``PROCESSESxTHREADS``, e.g. ``1x2,2x1``), alternating
the settings ``--repeats`` times so that background load and drift hit both alike. Each run reads
``<root>/params.yaml`` with the setting, the ``--set`` overrides, and its outputs (metrics, eval, checkpoints,
plots, models/rl, MLflow) redirected to a fresh temporary folder: the repository's own outputs are not touched. The
stage's wall time is the process's (start-up and the launcher included); the fp32 2048^2 matmul rate is measured
before every run. The table gives each setting's median time, the ratio against the first setting, and whether
the stage's metrics agree (timings left out).

    .venv/bin/python benchmarks/bench_processes.py --root . --stage evaluate --arg sft
    .venv/bin/python benchmarks/bench_processes.py --root . --stage rl --arg 1234 --set rl.steps=30 rl.eval_every=0
    .venv/bin/python benchmarks/bench_processes.py --root . --stage sft --set sft.train.max_steps=80
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

import yaml

TIMING = ("time_", "_per_s", "wall_s", "seconds", "s_per_step", "peak_rss_mb", "mfu", "matmul_gflops", "tokens_per_s")


def set_dotted(tree: dict, dotted: str, value) -> None:
    """tree[a][b][c] = value for dotted 'a.b.c' (the parents must exist: an unknown key is an error)."""
    *parents, leaf = dotted.split(".")
    for p in parents:
        tree = tree[p]
    tree[leaf] = value


def stage_params(side: Path, data_root: Path, out: Path, stage: str, overrides: list[str],
                 updates: dict | None = None) -> Path:
    """`side`'s params.yaml with its inputs read from `data_root`, every output under `out`, the `updates` to its
    common section and the KEY=VALUE overrides; returns the written file's path."""
    raw = yaml.safe_load((side / "params.yaml").read_text())
    paths = raw["common"]["paths"]
    for key, value in paths.items():
        paths[key] = str(data_root / value)
    for key in ("metrics", "eval", "checkpoints", "plots", "reports"):
        paths[key] = str(out / key)
    models = out / "models"  # a private models folder linking to the chain's models (the stage writes its own)
    models.mkdir(parents=True)
    for child in Path(paths["models"]).iterdir():
        if child.name != stage:
            (models / child.name).symlink_to(child)
    paths["models"] = str(models)
    raw["common"]["tracking"] |= {"uri": f"sqlite:///{out}/mlflow.db", "artifacts": str(out / "mlartifacts")}
    raw["common"] |= {"python": sys.executable, **(updates or {})}
    for item in overrides:
        key, value = item.split("=", 1)
        set_dotted(raw, key, yaml.safe_load(value))
    path = out / "params.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


def run_params(root: Path, out: Path, stage: str, processes: int, threads: int, overrides: list[str]) -> Path:
    """root's params.yaml with the setting, the overrides and every output path under `out`; returns its path."""
    return stage_params(root, root, out, stage, overrides, {"processes": processes, "num_threads": threads})


def untimed(metrics: dict) -> dict:
    return {k: v for k, v in metrics.items() if not any(t in k for t in TIMING)}


def stage_metrics(out: Path, stage: str, arg: str | None) -> dict:
    name = {"evaluate": f"eval/{arg}", "rl": f"rl/seed-{arg}"}.get(stage, stage)
    path = out / "metrics" / f"{name}.json"
    return json.loads(path.read_text()) if path.exists() else {}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--root", default=".", help="repository whose chain the stage reads")
    ap.add_argument("--stage", required=True, help="base | pretrain | sft | rl | evaluate")
    ap.add_argument("--arg", default=None, help="the foreach item: the model of evaluate, the seed of rl")
    ap.add_argument("--settings", default="1x2,2x1", help="PROCESSESxTHREADS, comma-separated")
    ap.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE", help="params overrides (YAML values)")
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--out", default=None, help="write the results as JSON here")
    args = ap.parse_args()

    import torch

    from dsmath.train.flops import matmul_flops_per_s

    torch.set_num_threads(2)
    root = Path(args.root).resolve()
    settings = [tuple(int(x) for x in s.split("x")) for s in args.settings.split(",")]
    env = {k: v for k, v in os.environ.items() if k not in ("MLFLOW_TRACKING_URI", "DSMATH_PARENT_RUN_ID")}
    env["PYTHONPATH"] = str(root / "src") + os.pathsep + env.get("PYTHONPATH", "")
    runs = []
    for r in range(args.repeats):
        for processes, threads in settings:
            out = Path(tempfile.mkdtemp(prefix="bench_processes_"))
            try:
                params = run_params(root, out, args.stage, processes, threads, args.set)
                peak = matmul_flops_per_s() / 1e9
                cmd = [sys.executable, "-m", f"stages.{args.stage}", "--params", str(params)]
                t0 = time.perf_counter()
                proc = subprocess.run(cmd + ([args.arg] if args.arg else []), cwd=root, env=env,
                                      capture_output=True, text=True)
                wall = time.perf_counter() - t0
                if proc.returncode != 0:
                    raise SystemExit(f"{processes}x{threads} failed:\n{proc.stderr[-3000:]}")
                metrics = stage_metrics(out, args.stage, args.arg)
            finally:
                shutil.rmtree(out, ignore_errors=True)
            runs.append({"repeat": r, "processes": processes, "threads": threads, "wall_s": wall,
                         "matmul_gflops": peak, "metrics": untimed(metrics)})
            print(f"repeat {r} {processes}x{threads}: {wall:.1f} s (matmul {peak:.0f} GFLOP/s)", flush=True)
    first = f"{settings[0][0]}x{settings[0][1]}"
    med = {f"{p}x{t}": statistics.median(x["wall_s"] for x in runs if (x["processes"], x["threads"]) == (p, t))
           for p, t in settings}
    print(f"\n{args.stage} {args.arg or ''} {' '.join(args.set)}")
    print(f"{'setting':<10}{'median s':>10}{'speed-up':>10}  same metrics as {first}")
    ref = next(x["metrics"] for x in runs if f"{x['processes']}x{x['threads']}" == first)
    for name, sec in med.items():
        same = all(x["metrics"] == ref for x in runs if f"{x['processes']}x{x['threads']}" == name)
        print(f"{name:<10}{sec:>10.1f}{med[first] / sec:>9.2f}x  {same}")
    if args.out:
        Path(args.out).write_text(json.dumps({"stage": args.stage, "arg": args.arg, "overrides": args.set,
                                              "median_s": med, "runs": runs}, indent=1) + "\n")


if __name__ == "__main__":
    main()

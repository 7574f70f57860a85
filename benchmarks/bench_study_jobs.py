"""A study at 1 and at N runs at once on this machine (`python -m dsmath.study run --jobs N`), side by side.

Run from a project whose chain is built (after `make repro`). The study's chains are built first and not timed (the
SFT stage and its evaluation at the study's settings; the chain workspaces are kept); then each setting of `--jobs`
runs the whole study from no records, alternating, `--repeats` times. Prints and writes the wall times, their ratio,
each run's wall time, the machine (CPU, fp32 matmul GFLOP/s before and after) and whether the records of the
settings agree in every deterministic field (RL curve, RL and evaluation metrics but timings, per-problem results).

    .venv/bin/python benchmarks/bench_study_jobs.py --study benchmarks/study-jobs.yaml --jobs 1 2 --split-cores \
        --out benchmarks/results/study_jobs.json
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

import yaml

from dsmath.runtime import provenance
from dsmath.study import runner
from dsmath.study.spec import load_study
from dsmath.train.flops import matmul_flops_per_s

TIMED = ("_s", "_per_s")


def untimed(record: dict) -> dict:
    """The fields of a record that do not depend on timing or on how many runs shared the machine."""
    def strip(m: dict) -> dict:
        return {k: v for k, v in m.items() if not k.endswith(TIMED) and k not in ("s_per_step", "peak_rss_mb")}

    return {"curve": record["curve"], "problems": record["problems"], "rl": strip(record["rl"]),
            "eval": strip(record["eval"]), "sft_eval": strip(record["sft_eval"])}


def _with_threads(study_file: str, jobs: int) -> str:
    """A copy of the study file whose runs get the machine's cores split over `jobs` (rl.threads, evaluate.threads):
    the settings a user picks for 1 and for N runs at once. Their records then differ in the float reduction order."""
    raw = yaml.safe_load(Path(study_file).read_text())
    threads = max(1, (os.cpu_count() or 1) // jobs)
    raw["shared"] = {**(raw.get("shared") or {}), "rl.threads": threads, "evaluate.threads": threads}
    out = Path(study_file).with_name(f"{Path(study_file).stem}-jobs{jobs}.yaml")
    out.write_text(yaml.safe_dump(raw, sort_keys=False))
    return str(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--study", default="benchmarks/study-jobs.yaml")
    parser.add_argument("--jobs", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--out", default=None)
    parser.add_argument("--split-cores", action="store_true",
                        help="give each setting's runs cores / jobs threads (else the study file's threads for all)")
    args = parser.parse_args()
    study = load_study(args.study)
    machine = {"cpu": provenance.cpu_name(), "matmul_gflops_before": round(matmul_flops_per_s() / 1e9, 1)}
    print(json.dumps(machine), flush=True)
    warm = runner.Runner(study, on_line=lambda line: None)
    t0 = time.perf_counter()
    for variant in {warm.chain_name(v): v for v in study.variants}.values():  # each chain once, untimed
        warm.build_chain(variant)  # kept: the timed studies find it up to date
    machine["chain_warmup_s"] = round(time.perf_counter() - t0, 1)
    rows, records = [], {}
    for rep in range(args.repeats):
        order = args.jobs if rep % 2 == 0 else list(reversed(args.jobs))
        for jobs in order:
            shutil.rmtree(study.results, ignore_errors=True)
            study_file = _with_threads(args.study, jobs) if args.split_cores else args.study
            cmd = [sys.executable, "-m", "dsmath.study", "run", "--study", study_file, "--jobs", str(jobs)]
            t0 = time.perf_counter()
            proc = subprocess.run(cmd, capture_output=True, text=True)
            wall = time.perf_counter() - t0
            if proc.returncode != 0:
                raise SystemExit(f"jobs {jobs} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
            recs = {(v, s): json.loads(study.result_path(v, s).read_text()) for v, s in study.runs()}
            records.setdefault(jobs, recs)
            row = {"repeat": rep, "jobs": jobs, "wall_s": round(wall, 1),
                   "runs_wall_s": {f"{v}-{s}": r["wall_s"] for (v, s), r in recs.items()},
                   "threads": sorted({r["threads"] for r in recs.values()})}
            rows.append(row)
            print(json.dumps(row), flush=True)
    machine["matmul_gflops_after"] = round(matmul_flops_per_s() / 1e9, 1)
    base = args.jobs[0]
    walls = {j: [r["wall_s"] for r in rows if r["jobs"] == j] for j in args.jobs}
    result = {
        "study": args.study, "runs": len(study.runs()), "machine": machine, "rows": rows,
        "median_wall_s": {j: median(w) for j, w in walls.items()},
        f"speedup_vs_jobs_{base}": {j: round(median(walls[base]) / median(w), 3) for j, w in walls.items()},
        "records_agree": {j: all(untimed(records[j][k]) == untimed(records[base][k]) for k in records[base])
                          for j in args.jobs},
    }
    print(json.dumps({k: v for k, v in result.items() if k != "rows"}, indent=1))
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    shutil.rmtree(study.results, ignore_errors=True)


if __name__ == "__main__":
    main()

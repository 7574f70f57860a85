"""Sandbox throughput: programs/s for a batch of short correct programs, and the per-program overhead.

    .venv/bin/python benchmarks/bench_sandbox.py [--n 64] [--workers 2] [--repeats 5]

Compares the sandbox pool (forking servers, contained) with a bare `python -I -S -c` per program (not contained)
so the overhead of containment and of interpreter start-up can be read off. Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

from dsmath.config import Sandbox
from dsmath.sandbox.pool import run_python, run_python_batch

PROGRAMS = [  # short correct PoT programs in the style of docs/formats.md
    "boxes = {i}\ntotal = boxes * 12\nprint(total - 5)",
    "from fractions import Fraction\nprint(Fraction({i}, 7) + Fraction(1, 3))",
    "import math\nprint(math.comb({i} + 10, 3))",
    "print(sum(k * k for k in range({i} + 100)))",
]


def programs(n: int) -> list[str]:
    return [PROGRAMS[i % len(PROGRAMS)].format(i=i) for i in range(n)]


def batch_rate(codes: list[str], cfg: Sandbox, workers: int, repeats: int) -> tuple[float, list[float]]:
    """Median programs/s of run_python_batch over `repeats` warm runs (the first, cold run is reported apart)."""
    rates = []
    for _ in range(repeats):
        start = time.perf_counter()
        results = run_python_batch(codes, cfg.timeout_s, cfg.memory_mb, cfg.max_output_bytes, workers)
        rates.append(len(codes) / (time.perf_counter() - start))
        assert all(r.ok for r in results), [r.error for r in results if not r.ok][:3]
    return statistics.median(rates), rates


def serial_latency_ms(codes: list[str], cfg: Sandbox) -> float:
    start = time.perf_counter()
    for code in codes:
        run_python(code, cfg.timeout_s, cfg.memory_mb, cfg.max_output_bytes)
    return (time.perf_counter() - start) / len(codes) * 1000


def bare_interpreter_ms(codes: list[str]) -> float:
    """Per-program time of `python -I -S -c code` with no containment at all: the start-up cost a pool avoids."""
    start = time.perf_counter()
    for code in codes:
        subprocess.run([sys.executable, "-I", "-S", "-c", code], capture_output=True, check=True, timeout=30)
    return (time.perf_counter() - start) / len(codes) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=64)
    parser.add_argument("--workers", type=int, default=Sandbox().workers)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    cfg, codes = Sandbox(), programs(args.n)
    start = time.perf_counter()
    run_python_batch(codes, cfg.timeout_s, cfg.memory_mb, cfg.max_output_bytes, args.workers)
    cold = args.n / (time.perf_counter() - start)
    median, rates = batch_rate(codes, cfg, args.workers, args.repeats)
    report = {
        "programs": args.n, "workers": args.workers, "cpus": os.cpu_count(),
        "batch_programs_per_s_cold": round(cold, 1),
        "batch_programs_per_s_warm_median": round(median, 1),
        "batch_programs_per_s_warm_runs": [round(r, 1) for r in rates],
        "serial_ms_per_program": round(serial_latency_ms(codes[:32], cfg), 2),
        "bare_python_-I_-S_ms_per_program": round(bare_interpreter_ms(codes[:32]), 2),
    }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()

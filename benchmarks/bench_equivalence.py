"""Answer-equivalence speed: pairs/s on random MATH-500 answer pairs and on reformatted golds, and how fast a
pathological input is cut off.

    .venv/bin/python benchmarks/bench_equivalence.py [--pairs 1000] [--seed 0]

Reads data/raw/math500/test.jsonl (run from the repository root). Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import time
from pathlib import Path

from dsmath.rewards import are_equivalent, is_equivalent
from dsmath.rewards.equivalence import fast_verdict

MATH500 = Path("data/raw/math500/test.jsonl")


def reformat(gold: str, rng: random.Random) -> str:
    """One random respelling of a gold answer ($..$, \\dfrac, a/b, spacing)."""
    options = [f"${gold}$", gold.replace("\\frac", "\\dfrac"), gold.replace(" ", ""),
               re.sub(r"\\frac\{(\d+)\}\{(\d+)\}", r"\1/\2", gold) if not re.search(r"\d\s*\\frac", gold) else gold]
    return rng.choice(options)


def timed(preds: list[str], golds: list[str]) -> dict:
    start = time.perf_counter()
    verdicts = are_equivalent(preds, golds)
    elapsed = time.perf_counter() - start
    pairs = {(p.strip(), g.strip()) for p, g in zip(preds, golds, strict=True)}
    slow = sum(p != g and fast_verdict(p, g) is None for p, g in pairs)
    return {"pairs": len(preds), "seconds": round(elapsed, 3), "pairs_per_s": round(len(preds) / elapsed, 1),
            "equivalent": sum(verdicts), "distinct_sent_to_math_verify": slow}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    golds = [json.loads(line)["answer"] for line in MATH500.read_text().splitlines() if line.strip()]
    rng = random.Random(args.seed)
    start = time.perf_counter()
    are_equivalent(["x+1", "y+1"], ["1+x", "1+y"])  # start the math-verify workers (sympy import) untimed
    startup = time.perf_counter() - start
    random_pairs = timed([rng.choice(golds) for _ in range(args.pairs)], [rng.choice(golds) for _ in range(args.pairs)])
    targets = [rng.choice(golds) for _ in range(args.pairs)]
    respelled = timed([reformat(g, rng) for g in targets], targets)
    numbers = [str(rng.randint(0, 999)) for _ in range(2 * args.pairs)]
    numeric = timed(numbers[: args.pairs], numbers[args.pairs :])
    start = time.perf_counter()
    verdict = is_equivalent("10^{10^{10}}", "5", timeout_s=1.0)
    cut = time.perf_counter() - start
    print(json.dumps({"worker_startup_s": round(startup, 2), "random_math500_pairs": random_pairs,
                      "reformatted_math500_pairs": respelled, "random_integer_pairs": numeric,
                      "pathological_10^{10^{10}}_with_1s_limit": {"verdict": verdict, "seconds": round(cut, 2)}},
                     indent=2))


if __name__ == "__main__":
    main()

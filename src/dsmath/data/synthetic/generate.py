"""Drawing problems by family and level, and the train/val/test splits, disjoint by problem identity.

Level L asks for L or L+1 reasoning steps (CoT equations). A problem's split is a stable hash of its `key`
(template + structural choices + numbers), so the same problem can never land in two splits; keys and question
texts are deduplicated across all splits.
"""

from __future__ import annotations

import hashlib
import random

from dsmath.config import Synthetic
from dsmath.data.synthetic import arithmetic, fraction_percent, linear, sums
from dsmath.data.synthetic.core import Ctx, Reject, Template

FAMILIES: dict[str, dict[str, Template]] = {
    "arithmetic": arithmetic.TEMPLATES,
    "linear": linear.TEMPLATES,
    "fraction_percent": fraction_percent.TEMPLATES,
    "sums": sums.TEMPLATES,  # the smoke profile's toy world
}
LEVELS = (1, 2, 3, 4, 5)
SPLITS = ("train", "val", "test")
_TRIES = 200  # draws per problem before giving up (rejections are cheap: a few microseconds each)
_CELL_REPEATS = 1000  # this many repeats in a row from one family/level: its problem space is used up


def generate_problem(rng: random.Random, family: str, level: int, max_number: int, scratchpad: bool = False,
                     decimals: bool = False) -> dict:
    """One problem record of `family` with `level` or `level + 1` steps; given numbers are <= `max_number`;
    `scratchpad`: CoT steps written as place-value chains (`dsmath.data.synthetic.scratch`); `decimals`: decimal
    operations too, whole and decimal parts apart."""
    if family not in FAMILIES:
        raise ValueError(f"family: must be one of {', '.join(FAMILIES)} (got {family!r})")
    if level not in LEVELS:
        raise ValueError(f"level: must be one of {', '.join(map(str, LEVELS))} (got {level!r})")
    templates = FAMILIES[family]
    for _ in range(_TRIES):
        n = level + rng.randint(0, 1)
        name = rng.choice([name for name, t in templates.items() if n in t.steps])
        template = templates[name]
        ctx = Ctx(rng, max_number, name, template.style, scratchpad, decimals)
        try:
            answer, goal = template.fn(ctx, n)
        except Reject:
            continue
        if ctx.steps != n:
            raise AssertionError(f"{name} built {ctx.steps} steps instead of {n}")
        return ctx.record(family, level, answer, goal)
    raise RuntimeError(f"{family} level {level}: no problem fits max_number={max_number} in {_TRIES} draws")


def split_of(key: str, weights: dict[str, float]) -> str:
    """The split of a problem: a stable hash of its key in [0, 1) against cumulative split weights."""
    u = int.from_bytes(hashlib.blake2b(key.encode(), digest_size=8).digest(), "big") / 2**64
    total, acc = sum(weights.values()), 0.0
    for name, w in weights.items():
        acc += w / total
        if u < acc:
            return name
    return name


def generate_splits(cfg: Synthetic, seed: int) -> dict[str, list[dict]]:
    """`{"train": [...], "val": [...], "test": [...]}` with the configured counts, families and levels.

    Each draw is for the (family, level) cell with the fewest distinct problems so far, so every split holds the
    cells in about equal shares. A problem whose key or question was seen before is skipped (a cell that only
    repeats itself is used up and dropped); one whose split is already full is discarded. Same seed, same bytes.
    """
    want = {"train": cfg.n_train, "val": cfg.n_val, "test": cfg.n_test}
    out: dict[str, list[dict]] = {s: [] for s in SPLITS}
    live = [(f, lv) for f in cfg.families for lv in cfg.levels]
    found, misses = dict.fromkeys(live, 0), dict.fromkeys(live, 0)
    rng, seen_keys, seen_questions = random.Random(seed), set(), set()
    while any(len(out[s]) < want[s] for s in SPLITS):
        if not live:
            have = ", ".join(f"{s}={len(out[s])}/{want[s]}" for s in SPLITS)
            raise RuntimeError(f"synthetic: every family/level repeats itself after {have} distinct problems; "
                               "raise max_number, add levels or families, or ask for fewer problems")
        cell = min(live, key=found.__getitem__)  # first of the least filled cells: deterministic
        rec = generate_problem(rng, *cell, cfg.max_number, cfg.scratchpad, cfg.decimal_scratchpad)
        if rec["key"] in seen_keys or rec["question"] in seen_questions:
            misses[cell] += 1
            if misses[cell] >= _CELL_REPEATS:
                live.remove(cell)
            continue
        found[cell], misses[cell] = found[cell] + 1, 0
        seen_keys.add(rec["key"])
        seen_questions.add(rec["question"])
        split = split_of(rec["key"], want)
        if len(out[split]) < want[split]:
            out[split].append(rec)
    return out


def math_text_documents(records: list[dict], pot_every: int = 4) -> list[dict]:
    """Worked-solution documents for the math pretraining corpus: question + CoT, every `pot_every`-th + program.

    Each document keeps the problem `key`, so decontamination can drop held-out problems by identity.
    """
    docs = []
    for i, r in enumerate(records):
        text = f"{r['question']}\n{r['cot']}"
        if pot_every and i % pot_every == pot_every - 1:
            text += f"\nThe same in Python:\n{r['pot']}"
        docs.append({"id": r["id"], "source": "synthetic", "key": r["key"], "text": text})
    return docs

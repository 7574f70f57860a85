"""Arithmetic drills for the math corpus: the world's operations written as the CoT writes them, many times over.

A chain of thought is only as good as its arithmetic, and a 1.5M-parameter model sees each fact only a few times in
its worked solutions. A drill document is a page of exercises, one operation per line in the CoT's own format
(`dsmath.data.synthetic.scratch`: `47 + 36 = 40 + 30 + 7 + 6 = 70 + 13 = 83`):

- a share `one_digit_share` of the lines are one-digit facts drawn from the complete tables (every `a + b`,
  `a * b` with a, b in 0..9; their inverses `(a + b) - b`, `(a * b) / b`), the links every scratchpad is made of;
- the rest are whole-number operations over the world's range: sums and differences of operands up to
  `max_operand` (log-uniform, so small numbers are as common as in the problems), products of a number up to
  `max_operand` / 2 with a factor up to 12, exact quotients with a divisor up to the world's `max_number`.

Deterministic by seed; documents carry `source: drill` and no problem key (they quote no problem).
"""

from __future__ import annotations

import math
import random

from dsmath.data.synthetic.scratch import chain_text

HEADINGS = ("Arithmetic practice:", "Exercises:", "Work out each line:", "Practice by place value:")


def _log_uniform(rng: random.Random, lo: int, hi: int) -> int:
    return min(hi, int(math.exp(rng.uniform(math.log(lo), math.log(hi + 1)))))


def one_digit_fact(rng: random.Random) -> str:
    """One line of the complete one-digit tables or their inverses."""
    a, b, kind = rng.randint(0, 9), rng.randint(0, 9), rng.randrange(4)
    if kind == 0:
        return chain_text(a, "+", b, str(a + b))
    if kind == 1:
        return chain_text(a + b, "-", b, str(a))
    if kind == 2:
        return chain_text(a, "*", b, str(a * b))
    b = max(b, 1)
    return chain_text(a * b, "/", b, str(a))


def operation(rng: random.Random, max_operand: int, max_divisor: int) -> str:
    """One whole-number operation over the world's range, with its place-value chain."""
    kind = rng.randrange(4)
    if kind == 0:
        a, b = _log_uniform(rng, 1, max_operand), _log_uniform(rng, 1, max_operand)
        return chain_text(a, "+", b, str(a + b))
    if kind == 1:
        a, b = _log_uniform(rng, 1, max_operand), _log_uniform(rng, 1, max_operand)
        a, b = max(a, b), min(a, b)
        return chain_text(a, "-", b, str(a - b))
    if kind == 2:
        a, b = _log_uniform(rng, 2, max(max_operand // 2, 2)), rng.randint(2, 12)
        a, b = (a, b) if rng.random() < 0.5 else (b, a)
        return chain_text(a, "*", b, str(a * b))
    b, q = rng.randint(2, max_divisor), _log_uniform(rng, 1, max(max_operand // 4, 2))
    return chain_text(b * q, "/", b, str(q))


def drill_documents(n_docs: int, lines_per_doc: int, one_digit_share: float, max_operand: int, max_divisor: int,
                    seed: int) -> list[dict]:
    """`n_docs` drill pages of `lines_per_doc` exercises each (see the module docstring)."""
    rng = random.Random(seed)
    docs = []
    for i in range(n_docs):
        lines = [rng.choice(HEADINGS)]
        for _ in range(lines_per_doc):
            lines.append(one_digit_fact(rng) if rng.random() < one_digit_share
                         else operation(rng, max_operand, max_divisor))
        docs.append({"id": f"drill-{i}", "source": "drill", "text": "\n".join(lines)})
    return docs

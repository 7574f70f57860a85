"""Arithmetic drills for the math corpus: the world's operations written as the CoT writes them, many times over.

A chain of thought is only as good as its arithmetic, and a 1.5M-parameter model sees each fact only a few times in
its worked solutions. A drill document is a page of exercises, one operation per line in the CoT's own format
(`dsmath.data.synthetic.scratch`: `47 + 36 = 40 + 30 + 7 + 6 = 70 + 13 = 83`):

- a share `one_digit_share` of the lines are one-digit facts drawn from the complete tables (every `a + b`,
  `a * b` with a, b in 0..9; their inverses `(a + b) - b`, `(a * b) / b`), the links every scratchpad is made of;
- a share `fraction_share` are fraction lines, over one denominator set of the world's fraction problems
  (`dsmath.data.synthetic.fraction_percent.DENOM_SETS`), half of them each: an equivalence `3/4 = 9/12` (scaled up
  to a denominator of the set) or `6/8 = 3/4` (reduced), and a sum or difference of two fractions written over the
  common denominator as the CoT writes it (`1/5 + 3/10 = 2/10 + 3/10 = 5/10 = 1/2`);
- a share `decimal_share` are decimal lines, money with at most two decimals as the decimal-style problems have it,
  written with the decimal chain (`dsmath.data.synthetic.scratch.decimal_chain`: `19 - 2.85 = 18 - 2 + 1 - 0.85 =
  16 + 0.15 = 16.15`): sums, differences and products by a whole number, and the decimal facts the chains are made
  of (`0.7 + 0.5 = 1.2`, `1 - 0.85 = 0.15`, `0.15 * 5 = 0.75`, `70 / 100 = 0.7`);
- the rest are whole-number operations over the world's range: sums and differences of operands up to
  `max_operand` (log-uniform, so small numbers are as common as in the problems), products of a number up to
  `max_operand` / 2 with a factor up to 12, exact quotients with a divisor up to the world's `max_number`.

Deterministic by seed; documents carry `source: drill` and no problem key (they quote no problem).
"""

from __future__ import annotations

import math
import random
from fractions import Fraction

from dsmath.data.synthetic.fraction_percent import DENOM_SETS
from dsmath.data.synthetic.scratch import decimal_text, chain_text, decimal_chain

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


def fraction_line(rng: random.Random) -> str:
    """One fraction line over a denominator set: an equivalence, or a sum / difference with its common-denominator
    chain (numerators 1..b-1, operands as reduced fractions, a difference never negative)."""
    denoms = rng.choice(DENOM_SETS)
    if rng.random() < 0.5:
        while True:
            b = rng.choice(denoms)
            a = rng.randint(1, b - 1)
            value = Fraction(a, b)
            options = [f"{a * d // b}/{d}" for d in denoms if d > b and d % b == 0]
            if value.denominator != b:
                options.append(str(value))
            if options:
                return f"{a}/{b} = {rng.choice(options)}"
    x, y = (Fraction(rng.randint(1, b - 1), b) for b in (rng.choice(denoms), rng.choice(denoms)))
    if rng.random() < 0.5:
        return chain_text(x, "+", y, str(x + y))
    x, y = max(x, y), min(x, y)
    return chain_text(x, "-", y, str(x - y))


def _money(rng: random.Random, max_whole: int) -> Fraction:
    """A non-whole amount with one or two decimals and a whole part up to `max_whole` (log-uniform, 0 as often)."""
    whole = 0 if rng.random() < 0.25 else _log_uniform(rng, 1, max_whole)
    cents = rng.randint(1, 9) * 10 if rng.random() < 0.5 else rng.choice([c for c in range(1, 100) if c % 10])
    return whole + Fraction(cents, 100)


def decimal_line(rng: random.Random, max_operand: int) -> str:
    """One decimal line: a sum, difference or product with its decimal chain, or one of the decimal facts."""
    def text(a: Fraction, op: str, b: Fraction, value: Fraction) -> str:
        return " = ".join([f"{decimal_text(a)} {op} {decimal_text(b)}", *decimal_chain(a, op, b),
                           decimal_text(value)])

    top = max(max_operand // 4, 2)
    kind = rng.randrange(5)
    if kind == 0:  # a sum: two amounts, or an amount and a whole number
        a = _money(rng, top)
        b = _money(rng, top) if rng.random() < 0.5 else Fraction(_log_uniform(rng, 1, top))
        a, b = (a, b) if rng.random() < 0.5 else (b, a)
        return text(a, "+", b, a + b)
    if kind == 1:  # a difference, never negative
        a = _money(rng, top) if rng.random() < 0.5 else Fraction(_log_uniform(rng, 1, top))
        b = _money(rng, top)
        a, b = max(a, b), min(a, b)
        return text(a, "-", b, a - b)
    if kind == 2:  # a product by a whole number
        a, k = _money(rng, top // 2), Fraction(rng.randint(2, 12))
        a, k = (a, k) if rng.random() < 0.5 else (k, a)
        return text(a, "*", k, a * k)
    if kind == 3:  # the decimal facts: parts that add up, complements of a whole, small products
        x = Fraction(rng.randint(1, 99), 100) if rng.random() < 0.5 else Fraction(rng.randint(1, 9), 10)
        fact = rng.randrange(3)
        if fact == 0:
            y = Fraction(rng.randint(1, 9), 10) if x.denominator == 10 else Fraction(rng.randint(1, 99), 100)
            return text(x, "+", y, x + y)
        if fact == 1:
            return text(Fraction(1), "-", x, 1 - x)
        k = Fraction(rng.randint(2, 9))
        return text(x, "*", k, x * k)
    n = rng.randint(1, 20 * top)  # a percent's last step: hundredths and tenths
    d = 100 if rng.random() < 0.7 else 10
    return f"{n} / {d} = {decimal_text(Fraction(n, d))}" if (Fraction(n, d) * 100).denominator == 1 else \
        f"{n * 10} / 100 = {decimal_text(Fraction(n * 10, 100))}"


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
                    seed: int, fraction_share: float = 0.2, decimal_share: float = 0.0) -> list[dict]:
    """`n_docs` drill pages of `lines_per_doc` exercises each (see the module docstring). The shares are of all
    lines: one-digit facts first, then fraction lines, then decimal lines (each up to what is left), whole-number
    operations the rest."""
    rng = random.Random(seed)
    docs = []
    for i in range(n_docs):
        lines = [rng.choice(HEADINGS)]
        for _ in range(lines_per_doc):
            r = rng.random()
            if r < one_digit_share:
                lines.append(one_digit_fact(rng))
            elif r < one_digit_share + fraction_share:
                lines.append(fraction_line(rng))
            elif r < one_digit_share + fraction_share + decimal_share:
                lines.append(decimal_line(rng, max_operand))
            else:
                lines.append(operation(rng, max_operand, max_divisor))
        docs.append({"id": f"drill-{i}", "source": "drill", "text": "\n".join(lines)})
    return docs

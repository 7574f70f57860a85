"""Sums of one-digit numbers (`What is 3 + 4 + 2?`): the smoke profile's world, which a model of 100k parameters
learns in seconds, so that the end-to-end tests see SFT and RL change what a model gets right.

Each addition is one step: `Add 4: 3 + 4 = 7.` in the CoT, `total = 3 + 4` in the programs.
"""

from __future__ import annotations

from dsmath.data.synthetic.core import Ctx, E, Template

_DIGITS = (1, 9)  # one-digit terms whatever the profile's max_number


def add_digits(ctx: Ctx, n: int) -> tuple[E, str]:
    terms = [ctx.num(ctx.int(*_DIGITS), "a") for _ in range(n + 1)]
    ctx.say(f"What is {' + '.join(t.cot for t in terms)}?")
    total = terms[0]
    for t in terms[1:]:
        total = ctx.step(f"Add {t}", total + t, "total")
    return total, "the sum"


TEMPLATES = {"sums.digits": Template(add_digits, range(1, 7))}

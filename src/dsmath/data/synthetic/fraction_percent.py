"""Fractions and percentages: `25% of 80`, discounts, price changes, `3/4 of 20`, sums of fractions as `a/b`.

Templates in decimal style give non-integer answers as terminating decimals with at most two places (`13.5`);
templates in fraction style give reduced fractions (`7/12`). Counts of things stay whole numbers.
"""

from __future__ import annotations

from fractions import Fraction

from dsmath.data.synthetic import words as W
from dsmath.data.synthetic.core import Ctx, E, Reject, Template

DENOMS = (2, 3, 4, 5, 6, 8, 10, 12)
DENOM_SETS = ((2, 3, 4, 6, 12), (2, 4, 8), (2, 5, 10))  # one set per problem keeps common denominators small
PERCENTS = (5, 10, 15, 20, 25, 30, 40, 50, 60, 75, 80)


def _cents(value: Fraction) -> bool:
    """At most two decimal places (money)."""
    return (value * 100).denominator == 1


def pct_of(ctx: Ctx, n: int) -> tuple[E, str]:
    """1 step: p% of w."""
    p, w = ctx.num(ctx.pick(PERCENTS), "percent"), ctx.num(ctx.int(2), "whole")
    ctx.say(f"What is {p}% of {w}?")
    return ctx.step(f"{p}% of {w}", w * p / ctx.lit(100), "part"), f"{p}% of {w}"


def frac_of(ctx: Ctx, n: int) -> tuple[E, str]:
    """1-2 steps: a/b of w (whole)."""
    b = ctx.pick(DENOMS[1:] if n == 2 else DENOMS)
    a = ctx.num(ctx.int(2 if n == 2 else 1, b - 1), "taken")  # two steps only when a part is taken a > 1 times
    b, w = ctx.num(b, "parts"), ctx.num(b * ctx.int(1, 20), "whole")
    ctx.say(f"What is {a}/{b} of {w}?")
    if n == 1:
        return ctx.step(f"{a}/{b} of {w}", w / b * a, "part"), f"{a}/{b} of {w}"
    one = ctx.step("One part", w / b, "one_part")
    return ctx.step(f"{a} parts", one * a, "part"), f"{a}/{b} of {w}"


def pct_what(ctx: Ctx, n: int) -> tuple[E, str]:
    """1-2 steps: what percent of a group has a property (or lacks it)."""
    group, yes, no = ctx.pick(W.GROUPS)
    total = ctx.pick([t for t in range(2, ctx.max_number + 1) if 10000 % t == 0])  # percents with <= 2 decimals
    part = ctx.int(1, total - 1)
    a, b = ctx.num(part, yes.replace(" ", "_")), ctx.num(total, group)
    ctx.tag("yes" if n == 1 else "no")
    ask = yes if n == 1 else no
    ctx.say(f"{a} of the {b} {group} are {yes} and the rest are {no}. What percent are {ask}?")
    count = a
    if n == 2:
        count = ctx.step(f"Number of {no}", b - a, no.replace(" ", "_"))
    return ctx.step(f"Percent {ask}", count / b * ctx.lit(100), "percent"), f"the percent of {ask}"


def discount(ctx: Ctx, n: int) -> tuple[E, str]:
    """2-4 steps: p% off, sale price, (times k), (change from a bill)."""
    p, (plural, single) = ctx.person(), ctx.pick(W.GOODS)
    price, pct = ctx.num(ctx.int(2), "price"), ctx.num(ctx.pick(PERCENTS), "percent")
    ctx.say(f"A {single} costs ${price}. It is on sale for {pct}% off.")
    off = ctx.step(f"{pct}% of ${price}", price * pct / ctx.lit(100), "off")
    sale = ctx.step("Sale price", price - off, "sale")
    if n == 2:
        ctx.say("What is the sale price?")
        return sale, f"the sale price of the {single}"
    k = ctx.num(ctx.int(2, 6), "count")
    ctx.say(f"{p.name} buys {k} of them.")
    total = ctx.step(f"{k} {plural}", sale * k, "total")
    if n == 3:
        ctx.say(f"How much does {p.he} pay?")
        return total, f"how much {p.name} pays"
    first = (int(total.value) // 10 + 1) * 10  # the next round bill above the total
    bill = ctx.num(ctx.pick(range(first, first + 30, 10)), "paid")
    ctx.say(f"{p.He} pays with ${bill}. How much change does {p.he} get?")
    return ctx.step(f"Change from ${bill}", bill - total, "change"), f"the change {p.name} gets"


def price_change(ctx: Ctx, n: int) -> tuple[E, str]:
    """2-6 steps: a price goes up or down by some percents (2 steps each), then maybe times k."""
    plural, single = ctx.pick(W.GOODS)
    start = ctx.num(ctx.int(2), "price")
    cur, phrases = start, []
    for i in range(n // 2):
        pv = ctx.pick(PERCENTS)
        up = ctx.rng.random() < 0.5
        change = cur.value * pv / 100
        if not _cents(change):
            raise Reject("more than two decimals")
        ctx.tag("up" if up else "down")
        pct = ctx.num(pv, "percent")
        phrases.append(f"{'then ' if i else ''}{'goes up' if up else 'goes down'} by {pct}%")
        delta = ctx.step(f"{pct}% of ${cur}", cur * pct / ctx.lit(100), "change")
        cur = ctx.step("New price", cur + delta if up else cur - delta, "price")
    ctx.say(f"A {single} costs ${start}. The price {', '.join(phrases)}.")
    if n % 2 == 0:
        ctx.say(f"What does the {single} cost now?")
        return cur, f"the new price of the {single}"
    k = ctx.num(ctx.int(2, 6), "count")
    ctx.say(f"How much do {k} {plural} cost now?")
    return ctx.step(f"{k} {plural}", cur * k, "total"), f"how much {k} {plural} cost now"


def _remove_part(ctx: Ctx, q: E, first: bool, who) -> E | None:
    """Two steps: gives away a/b or p% of the items; None if neither divides evenly."""
    v = int(q.value)
    fracs = [b for b in DENOMS if v % b == 0 and v > b and b <= ctx.max_number]
    pcts = [p for p in PERCENTS if v * p % 100 == 0 and p <= ctx.max_number]
    if not fracs and not pcts:
        return None
    them = "them" if first else "the rest"
    if fracs and (not pcts or ctx.rng.random() < 0.5):
        b = ctx.pick(fracs)
        a, b = ctx.num(ctx.int(1, b - 1), "taken"), ctx.num(b, "parts")
        ctx.tag("frac")
        ctx.say(f"{who.He} gives {a}/{b} of {them} to {ctx.person().name}.")
        part = ctx.step(f"{a}/{b} of {q}", q / b if a.value == 1 else q / b * a, "given")
    else:
        pct = ctx.num(ctx.pick(pcts), "percent")
        ctx.tag("pct")
        ctx.say(f"{who.He} sells {pct}% of {them}.")
        part = ctx.step(f"{pct}% of {q}", q * pct / ctx.lit(100), "sold")
    return ctx.step("Left", q - part, "left")


def remaining(ctx: Ctx, n: int) -> tuple[E, str]:
    """1-6 steps: gives away fractions / percents (2 steps each) and some items (1 step); how many are left."""
    p, item = ctx.person(), ctx.pick(W.ITEMS)
    q = ctx.num(ctx.int(2), item)
    ctx.say(f"{p.name} has {q} {item}.")
    first = True
    while ctx.steps < n:
        nxt = _remove_part(ctx, q, first, p) if n - ctx.steps >= 2 and ctx.rng.random() < 0.7 else None
        if nxt is None:
            k = ctx.num(ctx.int(1, int(q.value) - 1), "lost")
            ctx.tag("lose")
            ctx.say(f"{p.He} loses {k} of {'them' if first else 'the rest'}.")
            nxt = ctx.step(f"After losing {k}", q - k, "left")
        q, first = nxt, False
    ctx.say(f"How many {item} does {p.he} have left?")
    return q, f"how many {item} {p.name} has left"


def _fraction(ctx: Ctx, denoms: tuple[int, ...], lo: int = 2, share: int = 1) -> Fraction:
    """a/b with b from `denoms` (b >= lo) and a at most b / share."""
    b = ctx.pick([d for d in denoms if d >= lo])
    return Fraction(ctx.int(1, max(1, (b - 1) // share)), b)


def add_fractions(ctx: Ctx, n: int) -> tuple[E, str]:
    """1-4 steps: n + 1 fractions added or subtracted left to right; a reduced fraction."""
    denoms = ctx.pick(DENOM_SETS)
    acc = ctx.num(_fraction(ctx, denoms), "a")
    shown = [str(acc)]
    for _ in range(n):
        f = _fraction(ctx, denoms)
        sub = f < acc.value and ctx.rng.random() < 0.4
        ctx.tag("sub" if sub else "add")
        fe = ctx.num(f, "b")
        shown.append(f"{'-' if sub else '+'} {fe}")
        acc = ctx.step(f"{'Subtract' if sub else 'Add'} {fe}", acc - fe if sub else acc + fe, "total")
    if acc.value.denominator == 1:
        raise Reject("a whole number")
    ctx.say(f"What is {' '.join(shown)}? Give the answer as a fraction.")
    return acc, "the value as a fraction"


def eaten(ctx: Ctx, n: int) -> tuple[E, str]:
    """1-4 steps: n people eat parts of a whole; the fraction left."""
    whole = ctx.pick(("pizza", "cake", "pie"))
    denoms = ctx.pick(DENOM_SETS)
    parts = [_fraction(ctx, denoms, min(n + 1, 5), share=n) for _ in range(n)]
    if sum(parts) >= 1:
        raise Reject("they eat more than the whole")
    people = [ctx.person() for _ in range(n)]
    es = [ctx.num(f, p.name.lower()) for f, p in zip(parts, people, strict=True)]
    said = [f"{p.name} eats {e}" for p, e in zip(people, es, strict=True)]
    said[0] += f" of a {whole}"
    text = said[0] if n == 1 else ", ".join(said[:-1]) + " and " + said[-1]
    ctx.say(f"{text}. What fraction of the {whole} is left?")
    total = es[0]
    for p, e in zip(people[1:], es[1:], strict=True):
        total = ctx.step(f"With {p.name}'s part", total + e, "eaten")
    return ctx.step("Left", ctx.lit(1) - total, "left"), f"the fraction of the {whole} left"


TEMPLATES = {
    "fp.pct_of": Template(pct_of, (1,), "decimal"),
    "fp.frac_of": Template(frac_of, (1, 2)),
    "fp.pct_what": Template(pct_what, (1, 2), "decimal"),
    "fp.discount": Template(discount, range(2, 5), "decimal"),
    "fp.price_change": Template(price_change, range(2, 7), "decimal"),
    "fp.remaining": Template(remaining, range(1, 7)),
    "fp.add_fractions": Template(add_fractions, range(1, 5), "fraction"),
    "fp.eaten": Template(eaten, range(1, 5), "fraction"),
}

"""Arithmetic word problems in GSM8K style: people, items, buying, sharing, rates.

Open templates set up a quantity (boxes of items, wages, savings, ...) and then apply a chain of everyday
operations (gives some away, buys more packs, spends half, shares equally) until the problem has the requested
number of steps. Closed templates (shopping with change, reading, travel, work, ages) have their own fixed shapes.
Every intermediate result is a non-negative integer.
"""

from __future__ import annotations

from dataclasses import dataclass

from dsmath.data.synthetic import words as W
from dsmath.data.synthetic.core import Ctx, E, Reject, Template
from dsmath.data.synthetic.words import Person


@dataclass
class Story:
    """The running quantity of an open template and the question that asks for it."""

    who: Person
    q: E
    unit: str  # plural noun of the items, or "dollars"
    money: bool
    ask: str
    goal: str  # the ask as a phrase, for the tool-integrated reasoning line
    named: bool = False  # the first operation names its subject, later ones say he/she

    @property
    def subject(self) -> str:
        """The name the first time, then the pronoun (another person may have been mentioned before)."""
        if self.named:
            return self.who.He
        self.named = True
        return self.who.name


def _now(s: Story) -> None:
    if s.money:
        s.ask, s.goal = f"How much money does {s.who.name} have now?", f"how much money {s.who.name} has now"
    else:
        s.ask, s.goal = f"How many {s.unit} does {s.who.name} have now?", f"how many {s.unit} {s.who.name} has now"


_GIVE_VERBS = (("gives {k} of them to {f}", "After giving away {k}"), ("loses {k} of them", "After losing {k}"),
               ("uses {k} of them", "After using {k}"), ("sells {k} of them", "After selling {k}"))

# ---- operations of the open templates: each raises Reject (and is rolled back) when it does not apply --------


def _give(ctx: Ctx, s: Story) -> None:
    k = ctx.int(1, int(s.q.value) - 1)
    kn = ctx.num(k, "spent" if s.money else "given")
    if s.money:
        ctx.say(f"{s.subject} spends ${kn} on {ctx.pick(W.SPEND_ON)}.")
        done = f"After spending ${kn}"
    else:
        verb, done = ctx.pick(_GIVE_VERBS)
        ctx.say(f"{s.subject} {verb.format(k=kn, f=ctx.person().name)}.")
        done = done.format(k=kn)
    ctx.tag("give")
    s.q = ctx.step(done, s.q - kn, "left")
    _now(s)


def _get(ctx: Ctx, s: Story) -> None:
    kn, p = ctx.num(ctx.int(1), "more"), s.who
    if s.money:
        ctx.say(f"{s.subject} earns ${kn} more." if ctx.rng.random() < 0.5 else
                f"{ctx.person().name} gives {p.name if not s.named else p.him} ${kn}.")
    else:
        verb = ctx.pick(("buys {k} more {u}", "finds {k} more {u}", "gets {k} more {u} from {f}"))
        ctx.say(f"{s.subject} {verb.format(k=kn, u=s.unit, f=ctx.person().name)}.")
    ctx.tag("get")
    s.q = ctx.step(f"After getting {'$' if s.money else ''}{kn} more", s.q + kn, "total")
    _now(s)


def _half(ctx: Ctx, s: Story) -> None:
    if s.q.value % 2 or s.q.value < 2:
        raise Reject("odd")
    p = s.who
    if s.money:
        ctx.say(f"{s.subject} puts half of {p.his} money in the bank.")
    else:
        ctx.say(f"{s.subject} gives half of {p.his} {s.unit} to {ctx.person().name}.")
    ctx.tag("half")
    s.q = ctx.step("Half is left", s.q / ctx.lit(2), "half")
    _now(s)


def _packs(ctx: Ctx, s: Story) -> None:
    """Two steps: buys a packs of b more items."""
    box, single = ctx.pick(W.BOXES)
    a, b = ctx.num(ctx.int(2, 9), "more_" + box), ctx.num(ctx.int(2, 12), "per_" + single)
    ctx.say(f"{s.subject} buys {a} more {box} with {b} {s.unit} in each.")
    ctx.tag("packs")
    extra = ctx.step(f"{a} {box} of {b}", a * b, "extra")
    s.q = ctx.step("Adding them", s.q + extra, "total")
    _now(s)


def _buy(ctx: Ctx, s: Story) -> None:
    """Two steps: spends on a goods at p dollars each."""
    plural, single = ctx.pick(W.GOODS)
    a, price = ctx.num(ctx.int(2, 6), plural), ctx.num(ctx.int(1, 15), single + "_price")
    ctx.say(f"{s.subject} buys {a} {plural} for ${price} each.")
    ctx.tag("buy")
    cost = ctx.step(f"{a} {plural} at ${price}", a * price, "cost")
    s.q = ctx.step("Money left", s.q - cost, "left")
    _now(s)


def _share(ctx: Ctx, s: Story) -> None:
    """Closing step: an equal share."""
    ks = [k for k in range(2, min(10, ctx.max_number) + 1) if s.q.value % k == 0 and s.q.value > k]
    if not ks:
        raise Reject("no divisor")
    k, f = ctx.num(ctx.pick(ks), "people"), ctx.pick(W.FRIENDS)
    ctx.say(f"{s.subject} shares {'the money' if s.money else 'them'} equally among {k} {f}.")
    ctx.tag("share")
    s.q = ctx.step(f"Sharing among {k}", s.q / k, "each")
    s.ask = "How much money does each get?" if s.money else f"How many {s.unit} does each get?"
    s.goal = f"how much money each {f[:-1]} gets" if s.money else f"how many {s.unit} each {f[:-1]} gets"


def _bags(ctx: Ctx, s: Story) -> None:
    """Closing step: how many full bags."""
    ks = [k for k in range(2, min(20, ctx.max_number) + 1) if s.q.value % k == 0 and s.q.value > k]
    if s.money or not ks:
        raise Reject("no divisor")
    box, single = ctx.pick(W.BOXES)
    k = ctx.num(ctx.pick(ks), "per_" + single)
    ctx.say(f"{s.subject} puts them into {box} of {k}.")
    ctx.tag("bags")
    s.q = ctx.step(f"{box.capitalize()} of {k}", s.q / k, box)
    s.ask, s.goal = f"How many {box} does {s.who.he} fill?", f"how many {box} {s.who.name} fills"


_OPS = {False: ((_give, 1), (_get, 1), (_half, 1), (_packs, 2)), True: ((_give, 1), (_get, 1), (_half, 1), (_buy, 2))}


def _attempt(ctx: Ctx, s: Story, ops: list) -> bool:
    """Apply the first of `ops` (in random order) that fits; False if none does."""
    ops = list(ops)
    ctx.rng.shuffle(ops)
    for op in ops:
        mark, state = ctx.mark(), dict(vars(s))
        try:
            op(ctx, s)
            return True
        except Reject:
            ctx.rollback(mark)
            vars(s).update(state)
    return False


def _finish(ctx: Ctx, s: Story, n: int) -> tuple[E, str]:
    """Chain operations until the problem has `n` steps, maybe closing with a share; then ask."""
    while ctx.steps < n:
        left = n - ctx.steps
        if left == 1 and ctx.rng.random() < 0.35 and _attempt(ctx, s, [_share, _bags]):
            break
        if not _attempt(ctx, s, [op for op, cost in _OPS[s.money] if cost <= left]):
            raise Reject("no operation applies")
    ctx.say(s.ask)
    return s.q, s.goal


# ---- open templates --------------------------------------------------------------------------------------------


def boxes(ctx: Ctx, n: int) -> tuple[E, str]:
    """1-6 steps: a boxes of b items, then a chain of operations."""
    p, (box, single), item = ctx.person(), ctx.pick(W.BOXES), ctx.pick(W.ITEMS)
    a, b = ctx.num(ctx.int(2, 10), box), ctx.num(ctx.int(2, 20), "per_" + single)
    ctx.say(f"{p.name} buys {a} {box} of {b} {item}.")
    q = ctx.step(f"{a} {box} of {b} {item}", a * b, item)
    return _finish(ctx, Story(p, q, item, False, f"How many {item} does {p.he} buy?", f"how many {item} "
                              f"{p.name} buys"), n)


def has(ctx: Ctx, n: int) -> tuple[E, str]:
    """1-6 steps: a starting count, then a chain of operations."""
    p, item = ctx.person(), ctx.pick(W.ITEMS)
    q = ctx.num(ctx.int(2), item)
    ctx.say(f"{p.name} has {q} {item}.")
    return _finish(ctx, Story(p, q, item, False, "", ""), n)


def times_as_many(ctx: Ctx, n: int) -> tuple[E, str]:
    """1-6 steps: k times as many as someone else, then a chain of operations."""
    p, other, item = ctx.person(), ctx.person(), ctx.pick(W.ITEMS)
    a, k = ctx.num(ctx.int(2, 30), item), ctx.num(ctx.int(2, 5), "times")
    ctx.say(f"{other.name} has {a} {item}. {p.name} has {k} times as many {item} as {other.name}.")
    q = ctx.step(f"{k} times as many as {a}", a * k, p.name.lower())
    return _finish(ctx, Story(p, q, item, False, f"How many {item} does {p.name} have?",
                              f"how many {item} {p.name} has"), n)


def wage(ctx: Ctx, n: int) -> tuple[E, str]:
    """1-6 steps: hourly pay times hours, then a chain of money operations."""
    p = ctx.person()
    a, b = ctx.num(ctx.int(5, 30), "per_hour"), ctx.num(ctx.int(2, 10), "hours")
    ctx.say(f"{p.name} earns ${a} an hour and works {b} hours.")
    q = ctx.step(f"Pay for {b} hours", a * b, "pay")
    return _finish(ctx, Story(p, q, "dollars", True, f"How much money does {p.name} earn?",
                              f"how much money {p.name} earns"), n)


def savings(ctx: Ctx, n: int) -> tuple[E, str]:
    """2-6 steps: weekly savings plus what was there, then a chain of money operations."""
    p = ctx.person()
    c, a, b = ctx.num(ctx.int(1), "start"), ctx.num(ctx.int(2, 25), "per_week"), ctx.num(ctx.int(2, 10), "weeks")
    ctx.say(f"{p.name} has ${c}. {p.He} saves ${a} a week for {b} weeks.")
    saved = ctx.step(f"Saved in {b} weeks", a * b, "saved")
    q = ctx.step(f"With the ${c} {p.he} had", c + saved, "total")
    return _finish(ctx, Story(p, q, "dollars", True, f"How much money does {p.name} have then?",
                              f"how much money {p.name} has then"), n)


# ---- closed templates ------------------------------------------------------------------------------------------


def shop(ctx: Ctx, n: int) -> tuple[E, str]:
    """1-4 steps: one or two kinds of goods, maybe paid with a bill."""
    p, kinds, change = ctx.person(), 1 if n <= 2 else 2, n in (2, 4)
    parts, costs = [], []
    for plural, single in ctx.rng.sample(W.GOODS, kinds):
        a, price = ctx.num(ctx.int(2, 6), plural), ctx.num(ctx.int(2, 20), single + "_price")
        parts.append(f"{a} {plural} for ${price} each")
        costs.append(ctx.step(f"{a} {plural} at ${price}", a * price, single + "_cost"))
    total = costs[0] if kinds == 1 else ctx.step("Total", costs[0] + costs[1], "total")
    ctx.say(f"{p.name} buys {' and '.join(parts)}.")
    if not change:
        ctx.say(f"How much does {p.he} spend?")
        return total, f"how much {p.name} spends"
    first = (int(total.value) // 10 + 1) * 10  # the next round bill above the total
    bill = ctx.num(ctx.pick(range(first, first + 30, 10)), "paid")
    ctx.say(f"{p.He} pays with ${bill}. How much change does {p.he} get?")
    left = ctx.step(f"Change from ${bill}", bill - total, "change")
    return left, f"the change {p.name} gets"


def reading(ctx: Ctx, n: int) -> tuple[E, str]:
    """2-5 steps: pages read over some days, pages left."""
    p = ctx.person()
    days = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday")[:n]
    pages = [ctx.int(2, 25) for _ in days]
    book = ctx.num(ctx.int(sum(pages) + 1), "book")
    read = [ctx.num(x, d.lower()) for x, d in zip(pages, days, strict=True)]
    listed = ", ".join(f"{x} pages on {d}" for x, d in zip(read[:-1], days[:-1], strict=True))
    ctx.say(f"A book has {book} pages. {p.name} reads {listed} and {read[-1]} pages on {days[-1]}.")
    total = read[0]
    for i in range(1, n):
        total = ctx.step(f"Read by {days[i]}", total + read[i], "read")
    ctx.say("How many pages are left?")
    return ctx.step("Pages left", book - total, "left"), "how many pages are left"


def travel(ctx: Ctx, n: int) -> tuple[E, str]:
    """1-6 steps: distance = speed * time per part, summed; maybe the distance left."""
    (vehicle, verb), remaining = ctx.pick(W.VEHICLES), n % 2 == 0
    legs = (n + 1) // 2 if not remaining else n // 2
    raw = [(ctx.int(3, 20 if remaining else 60), ctx.int(1, 4 if remaining else 6)) for _ in range(legs)]
    trip = ctx.num(ctx.int(sum(s * h for s, h in raw) + 1), "trip") if remaining else None
    parts, total = [], None
    for i, (s, h) in enumerate(raw):
        speed, hours = ctx.num(s, "speed"), ctx.num(h, "hours")
        parts.append(f"{'at' if i == 0 else 'then at'} {speed} km per hour for {hours} hours")
        dist = ctx.step(f"Part {i + 1}", speed * hours, "part")
        total = dist if total is None else ctx.step("Distance so far", total + dist, "distance")
    start = f"A {vehicle} has to go {trip} km. It {verb} " if remaining else f"A {vehicle} {verb} "
    ctx.say(start + ", ".join(parts) + ".")
    if not remaining:
        ctx.say("How many km does it go in total?")
        return total, f"how many km the {vehicle} goes"
    ctx.say("How many km are left?")
    return ctx.step("Left to go", trip - total, "left"), "how many km are left"


def work(ctx: Ctx, n: int) -> tuple[E, str]:
    """1-3 steps: workers * rate (* days) (- damaged)."""
    group, verb, obj = ctx.pick(W.WORKERS)
    a, b = ctx.num(ctx.int(2, 12), group), ctx.num(ctx.int(2, 15), "each")
    ctx.say(f"{a} {group} each {verb} {b} {obj} a day.")
    q = ctx.step(f"{a} {group} in one day", a * b, "per_day")
    if n == 1:
        ctx.say(f"How many {obj} do they {verb} in a day?")
        return q, f"how many {obj} they {verb} in a day"
    days = ctx.num(ctx.int(2, 7), "days")
    q = ctx.step(f"In {days} days", q * days, "made")
    if n == 2:
        ctx.say(f"How many {obj} do they {verb} in {days} days?")
        return q, f"how many {obj} they {verb} in {days} days"
    bad = ctx.num(ctx.int(1, int(q.value) - 1), "lost")
    ctx.say(f"They work for {days} days and {bad} of the {obj} are lost. How many {obj} are left?")
    return ctx.step(f"After losing {bad}", q - bad, "left"), f"how many {obj} are left"


def ages(ctx: Ctx, n: int) -> tuple[E, str]:
    """1, 2 or 4 steps: an age difference, a later age, the sum of later ages."""
    p, o = ctx.person(), ctx.person()
    a, b = ctx.num(ctx.int(2, 40), "age"), ctx.num(ctx.int(1, 30), "older")
    ctx.say(f"{p.name} is {a} years old. {o.name} is {b} years older than {p.name}.")
    other = ctx.step(f"{o.name} now", a + b, o.name.lower())
    if n == 1:
        ctx.say(f"How old is {o.name}?")
        return other, f"how old {o.name} is"
    c = ctx.num(ctx.int(1, 20), "years")
    later = ctx.step(f"{o.name} in {c} years", other + c, o.name.lower() + "_later")
    if n == 2:
        ctx.say(f"How old will {o.name} be in {c} years?")
        return later, f"how old {o.name} will be in {c} years"
    ctx.tag("sum")
    mine = ctx.step(f"{p.name} in {c} years", a + c, p.name.lower() + "_later")
    ctx.say(f"What will their ages add up to in {c} years?")
    return ctx.step("Sum of ages", mine + later, "total"), f"the sum of their ages in {c} years"


# template name -> Template(function, step counts it can build)
TEMPLATES = {
    "arith.boxes": Template(boxes, range(1, 7)),
    "arith.has": Template(has, range(1, 7)),
    "arith.times": Template(times_as_many, range(1, 7)),
    "arith.wage": Template(wage, range(1, 7)),
    "arith.savings": Template(savings, range(2, 7)),
    "arith.shop": Template(shop, range(1, 5)),
    "arith.reading": Template(reading, range(2, 6)),
    "arith.travel": Template(travel, range(1, 7)),
    "arith.work": Template(work, range(1, 4)),
    "arith.ages": Template(ages, (1, 2, 4)),
}

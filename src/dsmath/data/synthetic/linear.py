"""Linear equations in one unknown: bare (`Solve for x: 3x + 5 = 20.`) and word problems that reduce to one.

The CoT only writes checkable arithmetic, never an equation in x: `Subtract 5 from both sides: 20 - 5 = 15.`,
`Divide both sides by 3: 15 / 3 = 5.`, and may end with `Check: 3 * 5 + 5 = 20.` (a step the programs skip).
The unknown is always a positive integer.
"""

from __future__ import annotations

from dsmath.data.synthetic import words as W
from dsmath.data.synthetic.core import Ctx, E, Reject, Template


def _x(a: E) -> str:
    return "x" if a.value == 1 else f"{a}x"


# ---- bare equations: each form returns (equation text, x, check expression); core step counts below ------------


def _add(ctx: Ctx):
    x = ctx.int(1, ctx.max_number - 1)
    b = ctx.num(ctx.int(1, ctx.max_number - x), "b")
    c = ctx.num(x + b.value, "c")
    xs = ctx.step(f"Subtract {b} from both sides", c - b, "x")
    return f"x + {b} = {c}", xs, xs + b


def _sub(ctx: Ctx):
    x = ctx.int(2)
    b = ctx.num(ctx.int(1, x - 1), "b")
    c = ctx.num(x - b.value, "c")
    xs = ctx.step(f"Add {b} to both sides", c + b, "x")
    return f"x - {b} = {c}", xs, xs - b


def _mul(ctx: Ctx):
    a = ctx.num(ctx.int(2, 12), "a")
    c = ctx.num(a.value * ctx.int(1, ctx.max_number // int(a.value)), "c")
    xs = ctx.step(f"Divide both sides by {a}", c / a, "x")
    return f"{a}x = {c}", xs, a * xs


def _mul_add(ctx: Ctx):
    a = ctx.num(ctx.int(2, 12), "a")
    ax = a.value * ctx.int(1, (ctx.max_number - 1) // int(a.value))
    b = ctx.num(ctx.int(1, ctx.max_number - int(ax)), "b")
    c = ctx.num(ax + b.value, "c")
    r = ctx.step(f"Subtract {b} from both sides", c - b, "rest")
    xs = ctx.step(f"Divide both sides by {a}", r / a, "x")
    return f"{a}x + {b} = {c}", xs, a * xs + b


def _mul_sub(ctx: Ctx):
    a = ctx.num(ctx.int(2, 12), "a")
    ax = a.value * ctx.int(1, ctx.max_number // int(a.value))
    b = ctx.num(ctx.int(1, int(ax) - 1), "b")
    c = ctx.num(ax - b.value, "c")
    r = ctx.step(f"Add {b} to both sides", c + b, "rest")
    xs = ctx.step(f"Divide both sides by {a}", r / a, "x")
    return f"{a}x - {b} = {c}", xs, a * xs - b


def _paren(ctx: Ctx):
    a = ctx.num(ctx.int(2, 9), "a")
    inner = ctx.int(2, ctx.max_number // int(a.value))
    b = ctx.num(ctx.int(1, inner - 1), "b")
    c = ctx.num(a.value * inner, "c")
    r = ctx.step(f"Divide both sides by {a}", c / a, "inner")
    xs = ctx.step(f"Subtract {b} from both sides", r - b, "x")
    return f"{a}(x + {b}) = {c}", xs, a * (xs + b)


def _two_sided(ctx: Ctx):
    cv, k = ctx.int(1, 6), ctx.int(2, 6)
    x = ctx.int(1, (ctx.max_number - 1) // k)
    bv = ctx.int(1, ctx.max_number - k * x)
    a, b, c, d = ctx.num(cv + k, "a"), ctx.num(bv, "b"), ctx.num(cv, "c"), ctx.num(bv + k * x, "d")
    kk = ctx.step("Collect the x terms on the left", a - c, "k")
    r = ctx.step(f"Subtract {b} from both sides", d - b, "rest")
    xs = ctx.step(f"Divide both sides by {kk}", r / kk, "x")
    return f"{a}x + {b} = {_x(c)} + {d}", xs, a * xs + b


def _paren_add(ctx: Ctx):
    a = ctx.num(ctx.int(2, 9), "a")
    inner = ctx.int(2, (ctx.max_number - 1) // int(a.value))
    b = ctx.num(ctx.int(1, inner - 1), "b")
    e = ctx.num(ctx.int(1, ctx.max_number - int(a.value) * inner), "e")
    d = ctx.num(a.value * inner + e.value, "d")
    s = ctx.step(f"Subtract {e} from both sides", d - e, "rest")
    t = ctx.step(f"Divide both sides by {a}", s / a, "inner")
    xs = ctx.step(f"Subtract {b} from both sides", t - b, "x")
    return f"{a}(x + {b}) + {e} = {d}", xs, a * (xs + b) + e


def _paren_two(ctx: Ctx, extra: bool = False):
    cv, k, x, bv = ctx.int(1, 4), ctx.int(2, 4), ctx.int(1, 10), ctx.int(1, 6)
    ev = ctx.int(1, 15) if extra else 0
    a, b = ctx.num(cv + k, "a"), ctx.num(bv, "b")
    e = ctx.num(ev, "e") if extra else None
    c, d = ctx.num(cv, "c"), ctx.num((cv + k) * bv + ev + k * x, "d")
    ab = ctx.step("Expand the brackets", a * b, "ab")
    if extra:
        ab = ctx.step("Combine the numbers on the left", ab + e, "left")
    kk = ctx.step("Collect the x terms on the left", a - c, "k")
    r = ctx.step(f"Subtract {ab} from both sides", d - ab, "rest")
    xs = ctx.step(f"Divide both sides by {kk}", r / kk, "x")
    lhs = f"{a}(x + {b})" + (f" + {e}" if extra else "")
    check = a * (xs + b) + e if extra else a * (xs + b)
    return f"{lhs} = {_x(c)} + {d}", xs, check


_FORMS = {1: (_add, _sub, _mul), 2: (_mul_add, _mul_sub, _paren), 3: (_two_sided, _paren_add), 4: (_paren_two,),
          5: (lambda ctx: _paren_two(ctx, extra=True),)}


def equation(ctx: Ctx, n: int) -> tuple[E, str]:
    """1-6 steps: a form with n steps, or n - 1 steps and a check."""
    core = n if n in _FORMS and (n - 1 not in _FORMS or ctx.rng.random() < 0.6) else n - 1
    form = ctx.pick(_FORMS[core])
    ctx.tag(f"f{core}.{_FORMS[core].index(form)}")
    eq, xs, check = form(ctx)
    if core < n:
        ctx.step("Check", check, "check", code=False)
    ctx.say(ctx.pick((f"Solve for x: {eq}.", f"Find x if {eq}.")))
    return xs, "x"


# ---- word problems ---------------------------------------------------------------------------------------------

_THINK = {  # name: (phrase, forward, undo text, undo)
    "add": ("adds {k}", lambda v, k: v + k, "Undo adding {k}", lambda e, k: e - k),
    "sub": ("subtracts {k}", lambda v, k: v - k, "Undo subtracting {k}", lambda e, k: e + k),
    "mul": ("multiplies it by {k}", lambda v, k: v * k, "Undo multiplying by {k}", lambda e, k: e / k),
    "div": ("divides it by {k}", lambda v, k: v // k, "Undo dividing by {k}", lambda e, k: e * k),
}


def _forward(ctx: Ctx, x: int, n: int) -> list[tuple[str, int]]:
    """n operations on x keeping every value a whole number in [1, max_number]."""
    ops, v = [], x
    for _ in range(n):
        options = []
        for name in _THINK:
            k = ctx.int(2, 9) if name in ("mul", "div") else ctx.int(1, 20)
            w = _THINK[name][1](v, k)
            if 1 <= w <= ctx.max_number and (name != "div" or v % k == 0):
                options.append((name, k, w))
        if not options:
            raise Reject("no operation fits")
        name, k, v = ctx.pick(options)
        ops.append((name, k))
    return ops


def _joined(phrases: list[str]) -> str:
    return phrases[0] if len(phrases) == 1 else ", ".join(phrases[:-1]) + f", then {phrases[-1]}"


def think(ctx: Ctx, n: int) -> tuple[E, str]:
    """1-6 steps: a number put through n operations; undo them in reverse."""
    p, x = ctx.person(), ctx.int(1)
    ops = _forward(ctx, x, n)
    ks = [ctx.num(k, name + "_by") for name, k in ops]
    v = x
    for name, k in ops:
        ctx.tag(name)
        v = _THINK[name][1](v, k)
    c = ctx.num(v, "result")
    phrases = [_THINK[name][0].format(k=k) for (name, _), k in zip(ops, ks, strict=True)]
    ctx.say(f"{p.name} thinks of a number. {p.He} {_joined(phrases)} and gets {c}. What is the number?")
    cur = c
    for (name, _), k in reversed(list(zip(ops, ks, strict=True))):
        cur = ctx.step(_THINK[name][2].format(k=k), _THINK[name][3](cur, k), "number")
    return cur, "the number"


def at_first(ctx: Ctx, n: int) -> tuple[E, str]:
    """1-6 steps: gave some away, got more, bought packs; how many at first?"""
    p, item, (box, _) = ctx.person(), ctx.pick(W.ITEMS), ctx.pick(W.BOXES)
    plan, left, v, top = [], n, ctx.int(1), ctx.max_number
    while left:
        kinds = [k for k, ok in (("gave", v > 1), ("got", v < top), ("packs", left >= 2 and top - v >= 4)) if ok]
        kind = ctx.pick(kinds)
        if kind == "packs":
            a = ctx.int(2, min(6, (top - v) // 2))
            nums = (a, ctx.int(2, min(10, (top - v) // a)))
        else:
            nums = (ctx.int(1, min(20, v - 1 if kind == "gave" else top - v)),)
        v += -nums[0] if kind == "gave" else nums[0] * nums[-1] if kind == "packs" else nums[0]
        plan.append((kind, nums))
        left -= 2 if kind == "packs" else 1
    phrases, given = [], []
    for kind, nums in plan:
        ctx.tag(kind)
        es = [ctx.num(k, f"{kind}_{i}") for i, k in enumerate(nums)]
        given.append(es)
        if kind == "gave":
            phrases.append(f"gave {es[0]} of them to {ctx.person().name}")
        else:
            phrases.append(f"found {es[0]} more" if kind == "got" else f"bought {es[0]} {box} of {es[1]}")
    c = ctx.num(v, "now")
    ctx.say(f"{p.name} had some {item}. {p.He} {_joined(phrases)}. Now {p.he} has {c} {item}. "
            f"How many {item} did {p.he} have at first?")
    cur = c
    for (kind, _), es in reversed(list(zip(plan, given, strict=True))):
        if kind == "packs":
            bought = ctx.step(f"{es[0]} {box} of {es[1]}", es[0] * es[1], "bought")
            cur = ctx.step(f"Before buying the {box}", cur - bought, "before")
        elif kind == "got":
            cur = ctx.step(f"Before finding {es[0]} more", cur - es[0], "before")
        else:
            cur = ctx.step(f"Before giving away {es[0]}", cur + es[0], "before")
    return cur, f"how many {item} {p.name} had at first"


def consecutive(ctx: Ctx, n: int) -> tuple[E, str]:
    """2-5 steps: k consecutive whole numbers with a given sum; the smallest or the largest."""
    shapes = [(k, big, chk) for k in range(2, 6) for big in (0, 1) for chk in (0, 1)
              if (2 if k == 2 else 3) + big + chk == n]
    k, big, chk = ctx.pick(shapes)
    extra = k * (k - 1) // 2
    x = ctx.int(1, (ctx.max_number - extra) // k)
    kn, s = ctx.num(k, "count"), ctx.num(k * x + extra, "total")
    ctx.tag("largest" if big else "smallest")
    ctx.say(f"The sum of {kn} consecutive whole numbers is {s}. What is the {'largest' if big else 'smallest'} one?")
    if k == 2:
        rest = ctx.step("Take away the extra 1", s - ctx.lit(1), "rest")
    else:
        offsets = ctx.lit(1)
        for i in range(2, k):
            offsets = offsets + ctx.lit(i)
        extras = ctx.step("The extras above the smallest add up", offsets, "extras")
        rest = ctx.step("Take away the extras", s - extras, "rest")
    xs = ctx.step(f"Divide by {kn}", rest / kn, "smallest")
    if chk:
        terms = ctx.lit(x)
        for i in range(1, k):
            terms = terms + ctx.lit(x + i)
        ctx.step("Check", terms, "check", code=False)
    if big:
        return ctx.step("The largest", xs + ctx.lit(k - 1), "largest"), "the largest number"
    return xs, "the smallest number"


def ages(ctx: Ctx, n: int) -> tuple[E, str]:
    """2-4 steps: one is k times as old as the other, ages sum to s."""
    p, o = ctx.person(), ctx.person()
    k, older = ctx.int(2, 6), n == 4 or (n == 3 and ctx.rng.random() < 0.5)
    kn, s = ctx.num(k, "times"), ctx.num((k + 1) * ctx.int(1, ctx.max_number // (k + 1)), "total")
    who = p if older else o
    ctx.tag("older" if older else "younger")
    ctx.say(f"{p.name} is {kn} times as old as {o.name}. Together they are {s} years old. How old is {who.name}?")
    parts = ctx.step("Their ages make this many equal parts", kn + ctx.lit(1), "parts")
    xs = ctx.step(f"{o.name} is one part", s / parts, o.name.lower())
    if n - 2 - older:
        ctx.step("Check", xs + xs * kn, "check", code=False)
    if older:
        return ctx.step(f"{p.name} is {kn} times that", xs * kn, p.name.lower()), f"how old {p.name} is"
    return xs, f"how old {o.name} is"


def cost(ctx: Ctx, n: int) -> tuple[E, str]:
    """2-3 steps: a goods and a bag cost c together; the price of one."""
    plural, single = ctx.pick(W.GOODS)
    a, price = ctx.int(2, 9), ctx.int(1, 15)
    b = ctx.int(1, ctx.max_number - a * price)
    an, cn, bn = ctx.num(a, plural), ctx.num(a * price + b, "total"), ctx.num(b, "bag")
    ctx.say(f"{an} {plural} and a bag cost ${cn} in total. The bag costs ${bn}. How much does one {single} cost?")
    rest = ctx.step("Without the bag", cn - bn, "rest")
    xs = ctx.step(f"One {single}", rest / an, single)
    if n == 3:
        ctx.step("Check", an * xs + bn, "check", code=False)
    return xs, f"the price of one {single}"


TEMPLATES = {
    "lin.equation": Template(equation, range(1, 7)),
    "lin.think": Template(think, range(1, 7)),
    "lin.at_first": Template(at_first, range(1, 7)),
    "lin.consecutive": Template(consecutive, range(2, 6)),
    "lin.ages": Template(ages, range(2, 5)),
    "lin.cost": Template(cost, range(2, 4)),
}

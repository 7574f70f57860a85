"""The place-value scratchpad: a multi-digit operation written as a chain of one-digit facts on one line.

A 1.5M-parameter model does not learn `83 - 36 = 47` written whole (the result's first digit depends on a borrow
from the last), but it learns a small table of one-digit facts. So a chain-of-thought step with a multi-digit
operation on whole numbers is written the way a pupil splits it by place value, each link an equation that holds:

    47 + 36 = 40 + 30 + 7 + 6 = 70 + 13 = 83          (tens with tens, ones with ones, then a round + a teen)
    83 - 36 = 70 - 30 + 13 - 6 = 40 + 7 = 47          (the borrow written out: 83 is 70 + 13)
    17 * 5 = 10 * 5 + 7 * 5 = 50 + 35 = 85            (split the larger factor)
    12 * 15 = 12 * 10 + 12 * 5 = 120 + 60 = 180       (both factors >= 10: split the second)
    96 / 8 = 80 / 8 + 16 / 8 = 10 + 2 = 12            (long division: the tens of the quotient, then the ones)

One-digit facts (`7 + 6 = 13`, `13 - 6 = 7`, `7 * 8 = 56`, `56 / 8 = 7`) and splits that would only repeat the
expression (`20 + 4`, `30 * 4`) are written directly. Every link of a chain is exact; the final value is the result.
Compound expressions are reduced one operation at a time by `dsmath.data.synthetic.core` (`9 * 2 + 1 = 18 + 1 =
19`), the last operation with this scratchpad.

A sum or difference with a fraction `a/b` is written over the common denominator (the lcm; a whole number w as
w*L/L), then the numerators are added or subtracted, then the result is reduced (:func:`fraction_chain`):

    1/5 + 3/10 = 2/10 + 3/10 = 5/10 = 1/2          7/6 + 1/4 = 14/12 + 3/12 = 17/12
    1 - 7/12 = 12/12 - 7/12 = 5/12                  1/4 + 1/4 = 2/4 = 1/2          2/5 + 1/5 = 3/5

A link that would repeat the expression or the result is left out; the numerator operation is written whole.
"""

from __future__ import annotations

import math
from fractions import Fraction


def _split(n: int) -> tuple[int, int]:
    """(the round part, the ones) of a whole number: 47 -> (40, 7), 347 -> (340, 7)."""
    return n - n % 10, n % 10


def _terms(parts: list[tuple[str, int]]) -> str:
    """`+ 40 + 7 - 6` style text of signed terms, zeros dropped, the first sign only when it is a minus."""
    text = ""
    for sign, value in parts:
        if value == 0:
            continue
        text += f" {sign} {value}" if text else (f"{value}" if sign == "+" else f"0 - {value}")
    return text or "0"


def _add(a: int, b: int) -> list[str]:
    if a < 10 and b < 10 or a == 0 or b == 0:
        return []
    (a1, a0), (b1, b0) = _split(a), _split(b)
    chain = [_terms([("+", a1), ("+", b1), ("+", a0), ("+", b0)]), _terms([("+", a1 + b1), ("+", a0 + b0)])]
    return chain


def _sub(a: int, b: int) -> list[str]:
    if b == 0 or (a < 20 and b < 10) or a < b:
        return []
    (a1, a0), (b1, b0) = _split(a), _split(b)
    if a0 < b0:  # borrow: a = (a1 - 10) + (a0 + 10)
        a1, a0 = a1 - 10, a0 + 10
    split = _terms([("+", a1), ("-", b1), ("+", a0), ("-", b0)])
    return [split, _terms([("+", a1 - b1), ("+", a0 - b0)])]


def _mul(a: int, b: int) -> list[str]:
    if a < 10 and b < 10 or min(a, b) <= 1:
        return []
    if a >= 10 and b >= 10:  # split the second factor
        b1, b0 = _split(b)
        if b0 == 0:
            return []
        return [f"{a} * {b1} + {a} * {b0}", f"{a * b1} + {a * b0}"]
    if a >= 10:  # a one-digit factor: split the other, keeping the written order
        a1, a0 = _split(a)
        if a0 == 0:
            return []
        return [f"{a1} * {b} + {a0} * {b}", f"{a1 * b} + {a0 * b}"]
    b1, b0 = _split(b)
    if b0 == 0:
        return []
    return [f"{a} * {b1} + {a} * {b0}", f"{a * b1} + {a * b0}"]


def _div(a: int, b: int) -> list[str]:
    if b <= 1 or a % b:
        return []
    q1, q0 = _split(a // b)
    if q1 == 0 or q0 == 0:  # a one-digit quotient (an inverse fact) or a round one
        return []
    return [f"{b * q1} / {b} + {b * q0} / {b}", f"{q1} + {q0}"]


_RULES = {"+": _add, "-": _sub, "*": _mul, "/": _div}


def place_value_chain(a: int, op: str, b: int) -> list[str]:
    """The expressions between `a op b` and its result (both excluded); [] when the operation is written directly.

    a, b: whole numbers >= 0 (anything else is written directly); op: one of `+ - * /`.
    >>> place_value_chain(83, "-", 36)
    ['70 - 30 + 13 - 6', '40 + 7']
    """
    if op not in _RULES or type(a) is not int or type(b) is not int or a < 0 or b < 0:
        return []
    chain = _RULES[op](a, b)
    return [x for i, x in enumerate(chain) if x != f"{a} {op} {b}" and (i == 0 or x != chain[i - 1])
            and not _is_number(x)]


def _is_number(text: str) -> bool:
    return text.strip().isdigit()


def _is_fraction(x) -> bool:
    """A non-integer rational (written `a/b`)."""
    return isinstance(x, Fraction) and x.denominator != 1


def fraction_chain(a: Fraction | int, op: str, b: Fraction | int) -> list[str]:
    """The expressions between `a op b` and its reduced result (both excluded) for a sum or difference with a
    non-integer operand: the operands over the common denominator, then the numerators' sum or difference over it.
    [] for anything else (whole operands, another operation, a negative operand).

    >>> fraction_chain(Fraction(1, 5), "+", Fraction(3, 10))
    ['2/10 + 3/10', '5/10']
    >>> fraction_chain(1, "-", Fraction(7, 12))
    ['12/12 - 7/12']
    >>> fraction_chain(Fraction(2, 5), "+", Fraction(1, 5))
    []
    """
    if op not in ("+", "-"):
        return []
    a, b = Fraction(a), Fraction(b)
    if a < 0 or b < 0 or (a.denominator == 1 and b.denominator == 1):
        return []
    den = math.lcm(a.denominator, b.denominator)
    na, nb = int(a * den), int(b * den)
    value = a + b if op == "+" else a - b
    expr, result = f"{a} {op} {b}", str(value)
    chain = [f"{na}/{den} {op} {nb}/{den}", f"{na + nb if op == '+' else na - nb}/{den}"]
    return [x for x in chain if x not in (expr, result)]


def chain_text(a: int | Fraction, op: str, b: int | Fraction, result: str) -> str:
    """`a op b = <chain> = result`: the whole equation chain of one operation (over the common denominator when an
    operand is a fraction, see :func:`fraction_chain`; `str(Fraction)` writes `1/2`, a whole one `1`)."""
    links = fraction_chain(a, op, b) if _is_fraction(a) or _is_fraction(b) else place_value_chain(a, op, b)
    return " = ".join([f"{a} {op} {b}", *links, result])


# ----------------------------------------------------------------------------------------------------------------
# decimals (money in decimal-style problems): whole part and cents apart


def decimal_text(x: Fraction) -> str:
    """`13.3`, `0.75`, `16` (a value with at most two decimals)."""
    if x.denominator == 1:
        return str(x.numerator)
    cents = int(x * 100)
    whole, rest = divmod(cents, 100)
    return f"{whole}.{rest:02d}".rstrip("0")


def _decimal_terms(parts: list[tuple[str, Fraction]]) -> str:
    """`18 - 2 + 1 - 0.85` style text of signed terms, zero terms dropped."""
    text = ""
    for sign, value in parts:
        if value == 0:
            continue
        text += f" {sign} {decimal_text(value)}" if text else decimal_text(value)
    return text or "0"


def _cents(x: Fraction) -> bool:
    return x >= 0 and (x * 100).denominator == 1


def _place_terms(x: Fraction) -> list[Fraction]:
    """The place-value parts of an amount with at most two decimals: 17.15 -> [10, 7, 0.1, 0.05] (zeros left out)."""
    cents = int(x * 100)
    parts = [Fraction(cents // 100 - cents // 100 % 10), Fraction(cents // 100 % 10), Fraction(cents // 10 % 10, 10),
             Fraction(cents % 10, 100)]
    return [t for t in parts if t] or [Fraction(0)]


def _whole_links(a: int, op: str, b: int) -> tuple[str, str]:
    """(the split, the combined) texts of a whole-number `a op b` as its place-value chain writes them (the
    expression and its value when it is written directly)."""
    chain = {"+": _add, "-": _sub}[op](a, b)
    if len(chain) == 2:
        return chain[0], chain[1]
    value = a + b if op == "+" else a - b
    return _terms([("+", a), (op, b)]), str(value)


def decimal_chain(a: Fraction | int, op: str, b: Fraction | int) -> list[str]:
    """The expressions between `a op b` and its result (both excluded) for an operation with a decimal operand
    (at most two decimals, as money), every link made of one-digit facts as far as the place-value scratchpad's:
    a product by a whole number splits the amount into its place-value parts (`13.3 * 4 = 10 * 4 + 3 * 4 + 0.3 * 4
    = 40 + 12 + 1.2 = 52 + 1.2`); a sum or difference takes the whole parts by place value and the decimal parts
    apart (a borrow of one whole when the decimals need it: `19 - 2.85 = 10 + 8 - 2 + 1 - 0.85 = 10 + 6 + 0.15 =
    16 + 0.15`). [] when the operation is written directly (whole operands, a division, two decimal factors, a
    negative value, a decimal fact such as `0.7 + 0.5` or `0.15 * 5`).

    >>> decimal_chain(Fraction("18"), "+", Fraction("3.6"))
    ['10 + 8 + 3 + 0.6', '10 + 11 + 0.6', '21 + 0.6']
    >>> decimal_chain(Fraction("13.3"), "*", 4)
    ['10 * 4 + 3 * 4 + 0.3 * 4', '40 + 12 + 1.2', '52 + 1.2']
    """
    a, b = Fraction(a), Fraction(b)
    if op not in ("+", "-", "*") or not (_cents(a) and _cents(b)) or (a.denominator == 1 and b.denominator == 1):
        return []
    value = a + b if op == "+" else a - b if op == "-" else a * b
    if value < 0:
        return []
    if op == "*":
        if a.denominator != 1 and b.denominator != 1:
            return []  # two decimal factors: written whole
        x, k, x_first = (a, b, True) if a.denominator != 1 else (b, a, False)
        if x < 1 or k <= 1:
            return []  # 0.15 * 5: a decimal fact, written whole
        parts, kt = _place_terms(x), str(int(k))
        split = " + ".join(f"{decimal_text(t)} * {kt}" if x_first else f"{kt} * {decimal_text(t)}" for t in parts)
        products = [t * k for t in parts]
        whole = sum(p for p in products if p.denominator == 1 and p >= 1)
        decimal = sum(products) - whole
        chain = [split, " + ".join(decimal_text(p) for p in products), _decimal_terms([("+", whole), ("+", decimal)])]
    else:
        wa, fa = divmod(a, 1)
        wb, fb = divmod(b, 1)
        if op == "-" and fa < fb:  # borrow one whole
            wa, fa = wa - 1, fa + 1
        split, combined = _whole_links(int(wa), op, int(wb))
        dec = fa + fb if op == "+" else fa - fb
        whole = wa + wb if op == "+" else wa - wb
        decimals = _decimal_terms([("+", fa), (op, fb)])  # `1 - 0.85`, `0.3 + 0.45`
        if split == "0":
            first = decimals
        elif decimals == "0":
            first = split
        else:
            first = f"{split} {decimals}" if decimals.startswith("- ") else f"{split} + {decimals}"
        second = combined if not dec else (decimal_text(dec) if combined == "0" else f"{combined} + {decimal_text(dec)}")
        chain = [first, second, _decimal_terms([("+", whole), ("+", dec)])]
    expr, result = f"{decimal_text(a)} {op} {decimal_text(b)}", decimal_text(value)
    out = []
    for x in chain:
        if x not in (expr, result, *out):
            out.append(x)
    return out

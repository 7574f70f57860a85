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


def decimal_chain(a: Fraction | int, op: str, b: Fraction | int) -> list[str]:
    """The expressions between `a op b` and its result (both excluded) for an operation with a decimal operand
    (at most two decimals, as money): the whole parts and the decimal parts apart, then together. [] when the
    operation is written directly (whole operands, a division, two decimal factors, a negative value).

    >>> decimal_chain(Fraction("19"), "-", Fraction("2.85"))
    ['18 - 2 + 1 - 0.85', '16 + 0.15']
    >>> decimal_chain(Fraction("13.3"), "+", Fraction("2.45"))
    ['13 + 2 + 0.3 + 0.45', '15 + 0.75']
    >>> decimal_chain(Fraction("17.15"), "*", 5)
    ['17 * 5 + 0.15 * 5', '85 + 0.75']
    """
    a, b = Fraction(a), Fraction(b)
    if op not in ("+", "-", "*") or not (_cents(a) and _cents(b)) or (a.denominator == 1 and b.denominator == 1):
        return []
    wa, fa = divmod(a, 1)
    wb, fb = divmod(b, 1)
    if op == "+":
        chain = [_decimal_terms([("+", wa), ("+", wb), ("+", fa), ("+", fb)]),
                 _decimal_terms([("+", wa + wb), ("+", fa + fb)])]
    elif op == "-":
        if a < b:
            return []
        if fa < fb:  # borrow one whole
            wa, fa = wa - 1, fa + 1
        chain = [_decimal_terms([("+", wa), ("-", wb), ("+", fa), ("-", fb)]),
                 _decimal_terms([("+", wa - wb), ("+", fa - fb)])]
    else:
        if a.denominator != 1 and b.denominator != 1:
            return []  # two decimal factors: written whole
        x, k, x_first = (a, b, True) if a.denominator != 1 else (b, a, False)
        wx, fx = divmod(x, 1)
        if wx == 0 or k <= 1:
            return []  # 0.15 * 5: a decimal fact, written whole
        k_text = str(int(k))
        split = (f"{decimal_text(wx)} * {k_text} + {decimal_text(fx)} * {k_text}" if x_first
                 else f"{k_text} * {decimal_text(wx)} + {k_text} * {decimal_text(fx)}")
        chain = [split, _decimal_terms([("+", wx * k), ("+", fx * k)])]
    expr, result = f"{decimal_text(a)} {op} {decimal_text(b)}", decimal_text(a + b if op == "+" else
                                                                            a - b if op == "-" else a * b)
    out = []
    for x in chain:
        if x not in (expr, result, *out):
            out.append(x)
    return out

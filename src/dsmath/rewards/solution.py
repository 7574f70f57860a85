"""The reference solution of a problem as the numbers it computes: what process rewards judge a step's value against.

A problem record (docs/formats.md) names the value of each step of its solution, in order, as canonical number
strings ("24", "2", "3/4", "0.7"): a synthetic record in its ``quantities`` field; a GSM8K record in the calculator
annotations of its ``solution`` text (``48/2 = <<48/2=24>>24 clips``), read by :func:`gsm8k_quantities`. Other records
(MATH-500, SVAMP) name none: their steps can only be checked for true arithmetic (``dsmath.rewards.steps``).

    reference_quantities(problem) -> list[str]    the solution's step values, plus the gold answer; [] when unknown
    gsm8k_quantities(solution) -> list[str]       the results of a GSM8K solution's <<expr=result>> annotations
    canonical_number(value) -> str                "24", "-3", "2.5", "1/3"
    QuantityPool(quantities)                      matches step values, each quantity used once (a multiset)
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from fractions import Fraction

from dsmath.rewards.normalize import normalize_answer, parse_number

_ANNOTATION = re.compile(r"<<([^<>\n]*)>>")
_PLAIN_NUMBER = re.compile(r"[+-]?(?:\d+(?:\.\d+)?|\.\d+|\d+/\d+)")
MAX_QUANTITY_CHARS = 60  # longer strings are not quantities (bounds Fraction parsing)


def canonical_number(value: Fraction | int, fraction: bool = False) -> str:
    """The canonical string of an exact number (docs/formats.md): an integer "24"; otherwise a ratio "3/4" when
    `fraction` (the number was written as one) or when it has no finite decimal ("1/3"), else a decimal "2.5"."""
    value = Fraction(value)
    if value.denominator == 1:
        return str(value.numerator)
    if fraction:
        return f"{value.numerator}/{value.denominator}"
    d, twos, fives = value.denominator, 0, 0
    while d % 2 == 0:
        d, twos = d // 2, twos + 1
    while d % 5 == 0:
        d, fives = d // 5, fives + 1
    if d != 1:
        return f"{value.numerator}/{value.denominator}"
    places = max(twos, fives)
    sign, digits = "-" if value < 0 else "", str(abs(value.numerator) * 10**places // value.denominator)
    digits = digits.rjust(places + 1, "0")
    return f"{sign}{digits[:-places]}.{digits[-places:]}".rstrip("0")


def parse_quantity(text: str) -> Fraction | None:
    """Exact value of a quantity or answer string ("24", "1,000", "3/4", "\\frac{3}{4}", "$2.50"), else None."""
    if not isinstance(text, str) or len(text) > MAX_QUANTITY_CHARS:
        return None
    return parse_number(normalize_answer(text))


def gsm8k_quantities(solution: str | None) -> list[str]:
    """The results of the calculator annotations ``<<expr=result>>`` of a GSM8K solution, in order, canonical.

    The result is what follows the annotation's last '='; "$", "," and spaces are dropped ("$1,200.50" -> "1200.5").
    An annotation with no '=' or an empty expression, or whose result is not a plain number (integer, decimal, a/b,
    optional sign), is skipped; so is an unclosed one.
    """
    if not isinstance(solution, str):
        return []
    out = []
    for m in _ANNOTATION.finditer(solution):
        expr, eq, result = m.group(1).rpartition("=")
        result = result.replace("$", "").replace(",", "").replace(" ", "")
        if not eq or not expr.strip() or not _PLAIN_NUMBER.fullmatch(result) or len(result) > MAX_QUANTITY_CHARS:
            continue
        if (value := parse_number(result.removeprefix("+"))) is not None:
            out.append(canonical_number(value, fraction="/" in result))
    return out


def reference_quantities(problem: dict) -> list[str]:
    """The values a right solution computes (canonical strings, in solution order): the record's ``quantities`` if it
    has any, else its GSM8K annotations (``solution``), else [] (then nothing is known about the solution's steps).
    When the list is not empty the gold ``answer`` is in it too (appended unless an equal number is already there)."""
    given = problem.get("quantities") or []
    quantities = [q.strip() for q in given if isinstance(q, str) and parse_quantity(q) is not None]
    if not quantities:
        quantities = gsm8k_quantities(problem.get("solution"))
    answer = str(problem.get("answer", ""))
    gold = parse_quantity(answer)
    if quantities and gold is not None and all(parse_quantity(q) != gold for q in quantities):
        quantities.append(canonical_number(gold, fraction="/" in answer or "frac" in answer))
    return quantities


class QuantityPool:
    """The reference quantities as a multiset: a step value is matched against the quantities not yet used.

    A value matches a quantity when they are equal as numbers (0.5 == 1/2), or when the quantity is a decimal with
    two or more places and the value rounds to it (GSM8K's ``<<100/3=33.33>>``). Each quantity pays one step: a
    solution that computes 6 twice has two 6s to match; the third step worth 6 is a repeat.
    """

    def __init__(self, quantities: Iterable[str]):
        self.entries: list[tuple[Fraction, int]] = []  # (value, decimal places shown)
        for q in quantities:
            if (value := parse_quantity(q)) is not None:
                m = re.search(r"\.(\d+)$", q.strip())
                self.entries.append((value, len(m.group(1)) if m else 0))
        self.used = [False] * len(self.entries)

    def __bool__(self) -> bool:
        """Whether anything is known about the solution (an empty pool: fall back to truth-only checks)."""
        return bool(self.entries)

    @staticmethod
    def _matches(entry: tuple[Fraction, int], values: Iterable[Fraction]) -> bool:
        q, places = entry
        return any(v == q or (places >= 2 and abs(v - q) <= Fraction(1, 2 * 10**places)) for v in values)

    def take(self, values: Iterable[Fraction]) -> bool:
        """Use the first unused quantity matching one of `values` (the ways a step shows one value); False if none."""
        values = list(values)
        for i, entry in enumerate(self.entries):
            if not self.used[i] and self._matches(entry, values):
                self.used[i] = True
                return True
        return False

    def known(self, values: Iterable[Fraction]) -> bool:
        """Whether one of `values` matches any quantity, used or not."""
        values = list(values)
        return any(self._matches(entry, values) for entry in self.entries)

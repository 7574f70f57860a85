"""Per-equation arithmetic accuracy of chain-of-thought text, by operator and operand digit count.

A CoT step writes its computation as a chain on one line, the place-value scratchpad in between
(``47 + 36 = 40 + 30 + 7 + 6 = 70 + 13 = 83``). Each chain ``e0 = e1 = ... = em`` of a line is one *equation*:
it is true (``step_true``) when the value written last, ``em``, equals the exact value of the first expression
``e0``; each ``e(j) = e(j+1)`` is a *link*, true when that one ``=`` holds. A chain can be true with a false link
(two slips that cancel) and false with every link true only if it is cut short; the two rates are reported apart.
The line is read by :mod:`dsmath.rewards.chains`, the reader the process rewards use too, so equality is theirs:
exact with Fractions after :func:`~dsmath.rewards.chains.normalize_step` (LaTeX/unicode operators, ``\\frac``,
thousands commas), a decimal written value may be rounded (``10 / 3 = 3.33`` holds).

Chains (:func:`~dsmath.rewards.chains.chains`). The text between two ``=`` that is one arithmetic expression
(numbers, ``+ - * /``, parentheses) continues the chain; other text ends it (``3 + 4 = 7 and 7 * 2 = 14`` is two
chains). The expression at either end of a chain is the longest arithmetic text touching the ``=`` (``After getting
4 more: 20 + 4 = 24.``: ``20 + 4`` and ``24``). A chain counts only when its first expression has an operation:
``24 = 20 + 4`` is not a computation.

Categories, of the first expression ``e0`` (in this order of precedence):

- ``fraction``: an operand is a fraction written as such, ``a/b`` with no space around the slash (``1/4 + 1/2``;
  a LaTeX ``\\frac{1}{4}`` too). The synthetic CoT writes fractions so and divisions spaced (``96 / 8``);
- ``decimal``: an operand is written with a decimal point (``13.3 * 2``);
- ``mixed``: more than one operation (``9 * 2 + 1``, ``14 * 5 / 100``);
- ``add`` / ``sub`` / ``mul`` / ``div``: one binary operation on two numbers (a unary minus is part of a number).

Digits: the digit count of the largest operand (of every number in ``e0`` for ``mixed``; a fraction counts its
longer part; a decimal its written digits without leading zeros, ``0.25`` -> 2, ``13.3`` -> 3), bucketed
``1``, ``2``, ``3+``.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable
from dataclasses import dataclass

from dsmath.rewards.chains import chains, holds

OPERATORS = ("add", "sub", "mul", "div", "mixed", "fraction", "decimal")  # category order of the tables
SYMBOLS = {"add": "+", "sub": "-", "mul": "*", "div": "/"}
DIGITS = ("1", "2", "3+")
KEY_PREFIX = "equations"  # per-category metric keys: equations/<operator>/<digits key>/{acc,n}
FLAT_KEYS = ("equation_acc", "link_acc", "n_equations", "n_links")

_NUMBER = re.compile(r"\d+(?:\.\d+)?")
_FRACTION = re.compile(r"(?<![\d.])(\d+)/(\d+)(?![\d.])|\((\d+)\)/\((\d+)\)")
_OPS = {ast.Add: "add", ast.Sub: "sub", ast.Mult: "mul", ast.Div: "div"}


@dataclass(frozen=True)
class Equation:
    """One chain ``e0 = ... = em`` of a line: the step ``e0 = em`` and the truth of each of its m links."""

    expression: str  # e0, as normalised
    result: str  # em, the value written last
    operator: str  # one of OPERATORS
    digits: str  # one of DIGITS
    step_true: bool
    links: tuple[bool, ...]


def digits_key(digits: str) -> str:
    """The metric-key form of a digits bucket (MLflow names allow no '+'): `3+` -> `3plus`."""
    return digits.replace("+", "plus")


def _digit_count(number: str) -> int:
    return max(len(number.replace(".", "").lstrip("0")), 1)


def _bucket(n: int) -> str:
    return DIGITS[min(n, len(DIGITS)) - 1]


def category(expr: str) -> tuple[str, str]:
    """(operator, digits) of a first expression (see the module doc); `expr` must parse as arithmetic."""
    fractions = list(_FRACTION.finditer(expr))
    rest = _FRACTION.sub(" ", expr)
    numbers = [g for m in fractions for g in m.groups() if g is not None] + _NUMBER.findall(rest)
    digits = _bucket(max((_digit_count(n) for n in numbers), default=1))
    if fractions:
        return "fraction", digits
    if any("." in n for n in numbers):
        return "decimal", digits
    ops = [node.op for node in ast.walk(ast.parse(expr, mode="eval")) if isinstance(node, ast.BinOp)]
    return (_OPS[type(ops[0])] if len(ops) == 1 else "mixed"), digits


def _has_operation(tree: ast.Expression) -> bool:
    return any(isinstance(node, ast.BinOp) for node in ast.walk(tree))


def line_equations(line: str) -> list[Equation]:
    """The equations (chains) of one line, left to right; [] when it has none.

    >>> [(eq.operator, eq.digits, eq.step_true, eq.links) for eq in line_equations("47 + 36 = 40 + 30 + 7 + 6 = 83")]
    [('add', '2', True, (True, True))]
    """
    out = []
    for chain in chains(line):
        (first, expression), (_, result) = chain[0], chain[-1]
        if not _has_operation(first):
            continue
        links = tuple(holds(chain[j][0], *chain[j + 1]) for j in range(len(chain) - 1))
        operator, digits = category(expression)
        out.append(Equation(expression, result, operator, digits, holds(first, *chain[-1]), links))
    return out


def completion_equations(text: str | None) -> list[Equation]:
    """Every equation of a completion, line by line ([] for None)."""
    if not isinstance(text, str):
        return []
    return [eq for line in text.split("\n") for eq in line_equations(line)]


def _rate(hits: int, n: int) -> float | None:
    return hits / n if n else None


def equation_table(completions: Iterable[str | None]) -> dict:
    """Counts and accuracies over the equations of `completions`:

    ``{"n_equations", "n_true", "equation_acc", "n_links", "n_links_true", "link_acc", "rows"}``, where
    ``equation_acc`` is the share of equations whose written result is true (None when there is none), ``link_acc``
    the share of true ``=`` links, and ``rows`` one ``{"operator", "digits", "n", "correct", "acc"}`` per category
    seen, in OPERATORS x DIGITS order."""
    cells: dict[tuple[str, str], list[int]] = {}
    n_links = links_true = 0
    for text in completions:
        for eq in completion_equations(text):
            cell = cells.setdefault((eq.operator, eq.digits), [0, 0])
            cell[0] += 1
            cell[1] += eq.step_true
            n_links += len(eq.links)
            links_true += sum(eq.links)
    n = sum(c[0] for c in cells.values())
    true = sum(c[1] for c in cells.values())
    order = {(o, d): i for i, (o, d) in enumerate((o, d) for o in OPERATORS for d in DIGITS)}
    rows = [{"operator": o, "digits": d, "n": c[0], "correct": c[1], "acc": c[1] / c[0]}
            for (o, d), c in sorted(cells.items(), key=lambda kv: order[kv[0]])]
    return {"n_equations": n, "n_true": true, "equation_acc": _rate(true, n), "n_links": n_links,
            "n_links_true": links_true, "link_acc": _rate(links_true, n_links), "rows": rows}


def table_metrics(table: dict) -> dict[str, float]:
    """Flat metrics of an :func:`equation_table`: ``n_equations``, ``n_links``, ``equation_acc`` and ``link_acc``
    (only where there is an equation / a link to measure), and ``equations/<operator>/<digits>/acc`` and ``/n``
    per category seen (digits key `1`, `2`, `3plus`)."""
    out = {"n_equations": float(table["n_equations"]), "n_links": float(table["n_links"])}
    out |= {k: table[k] for k in ("equation_acc", "link_acc") if table[k] is not None}
    for r in table["rows"]:
        key = f"{KEY_PREFIX}/{r['operator']}/{digits_key(r['digits'])}"
        out |= {f"{key}/acc": r["acc"], f"{key}/n": float(r["n"])}
    return out

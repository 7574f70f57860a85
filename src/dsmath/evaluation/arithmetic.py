"""Per-equation arithmetic accuracy of chain-of-thought text, by operator and operand digit count.

A CoT step writes its computation as a chain on one line, the place-value scratchpad in between
(``47 + 36 = 40 + 30 + 7 + 6 = 70 + 13 = 83``). Each chain ``e0 = e1 = ... = em`` of a line is one *equation*:
it is true (``step_true``) when the value written last, ``em``, equals the exact value of the first expression
``e0``; each ``e(j) = e(j+1)`` is a *link*, true when that one ``=`` holds. A chain can be true with a false link
(two slips that cancel) and false with every link true only if it is cut short; the two rates are reported apart.
Equality is :mod:`dsmath.rewards.steps`'s: exact with Fractions after :func:`normalize_step` (LaTeX/unicode
operators, ``\\frac``, thousands commas), a decimal written value may be rounded (``10 / 3 = 3.33`` holds).

Chains. The text between two ``=`` that is one arithmetic expression (numbers, ``+ - * /``, parentheses) continues
the chain; other text ends it (``3 + 4 = 7 and 7 * 2 = 14`` is two chains). The expression at either end of a
chain is the longest arithmetic text touching the ``=`` (``After getting 4 more: 20 + 4 = 24.``: ``20 + 4`` and
``24``). A chain counts only when its first expression has an operation: ``24 = 20 + 4`` is not a computation.

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

from dsmath.rewards.steps import _RELATION, _holds, _parse, normalize_step

OPERATORS = ("add", "sub", "mul", "div", "mixed", "fraction", "decimal")  # category order of the tables
SYMBOLS = {"add": "+", "sub": "-", "mul": "*", "div": "/"}
DIGITS = ("1", "2", "3+")
KEY_PREFIX = "equations"  # per-category metric keys: equations/<operator>/<digits key>/{acc,n}
FLAT_KEYS = ("equation_acc", "link_acc", "n_equations", "n_links")

MAX_SPAN_CHARS = 208  # a longer run of arithmetic characters is not read (bounds the cost, as in rewards.steps)
_SPAN = frozenset("0123456789.+-*/() ")
_TOKEN = re.compile(r"\d+(?:\.\d+)?|[-+*/()]")
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


def _expr(text: str) -> ast.Expression | None:
    """The AST of `text` if it is exactly arithmetic tokens (no stray '.', as in `7.`) and parses, else None."""
    if not text.strip() or "".join(_TOKEN.findall(text)) != text.replace(" ", ""):
        return None
    return _parse(text)


def _left(text: str, line_start: bool) -> str | None:
    """The longest arithmetic expression ending `text` (the left side of an '='). A shorter one is taken only
    where what it leaves out cannot continue it: a list number `1.`, a `(`, a bullet at the start of the line."""
    i = len(text)
    while i > 0 and text[i - 1] in _SPAN:
        i -= 1
    span, at_start = text[i:], line_start and not text[:i].strip()
    if len(span) > MAX_SPAN_CHARS:
        return None
    for m in _TOKEN.finditer(span):
        piece, rest = span[m.start() :], span[: m.start()].strip()
        if rest and rest[-1] not in ".(" and not (at_start and rest in ("-", "*", "+")):
            continue
        if _expr(piece) is not None:
            return piece.strip()
    return None


def _right(text: str) -> str | None:
    """The longest arithmetic expression starting `text` (the right side of an '='), before a `.` or `)` at most."""
    j = 0
    while j < len(text) and text[j] in _SPAN:
        j += 1
    span = text[:j]
    if len(span) > MAX_SPAN_CHARS:
        return None
    for m in reversed(list(_TOKEN.finditer(span))):
        piece, rest = span[: m.end()], span[m.end() :].strip()
        if rest and rest[0] not in ".)":
            continue
        if _expr(piece) is not None:
            return piece.strip()
    return None


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
    """The equations (chains) of one line, left to right; [] when it has none."""
    line = normalize_step(line)
    marks = list(_RELATION.finditer(line))
    if not marks:
        return []
    segments = [line[a:b] for a, b in zip([0] + [m.end() for m in marks], [m.start() for m in marks] + [len(line)],
                                          strict=True)]
    chains: list[list[str]] = []
    current: list[str] = []  # the expressions of the chain being read
    for k in range(len(marks)):  # the '=' between segments k and k + 1
        after = segments[k + 1]
        whole = k + 1 < len(marks) and _expr(after) is not None  # an inner segment that is one expression
        lhs = current[-1] if current else _left(segments[k], line_start=k == 0)
        rhs = after.strip() if whole else _right(after)
        if lhs is None or rhs is None:
            if len(current) > 1:
                chains.append(current)
            current = []
            continue
        current = (current or [lhs]) + [rhs]
        if not whole:  # the chain ends at this '='
            chains.append(current)
            current = []
    out = []
    for chain in chains:
        trees = [_parse(e) for e in chain]
        if not _has_operation(trees[0]):
            continue
        links = tuple(_holds(trees[j], trees[j + 1], chain[j + 1]) for j in range(len(chain) - 1))
        operator, digits = category(chain[0])
        out.append(Equation(chain[0], chain[-1], operator, digits, _holds(trees[0], trees[-1], chain[-1]), links))
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

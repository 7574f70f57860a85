"""The reader of written arithmetic: the equations a model writes on a line, evaluated exactly.

A line computes with ``=``: ``After getting 4 more: 20 + 4 = 24.``, a place-value chain
``47 + 36 = 40 + 30 + 7 + 6 = 70 + 13 = 83``, a fraction sum ``With Leo's part: 1/5 + 1/10 = 2/10 + 1/10 = 3/10.``
How it is read, top to bottom:

- notation (:func:`normalize_step`): LaTeX/unicode operators (``\\times \\cdot \\div``, ``×``, ``−``) become
  ``* / -``, ``\\frac{a}{b}`` becomes ``(a)/(b)``, thousands commas go (``1,000`` -> ``1000``), ``$`` too;
- an expression (:func:`parse`, :func:`evaluate`): numbers (integers and decimals), ``+ - * /``, unary minus and
  parentheses, parsed with ``ast`` and evaluated exactly with Fractions (``0.1 + 0.2`` is 3/10), never run; at most
  MAX_EXPR_CHARS characters and no number longer than MAX_NUMBER_DIGITS digits;
- the sides of an ``=`` (:func:`left_side`, :func:`right_side`): the longest arithmetic text touching it; a shorter
  piece only where what it leaves out cannot continue it (a list number ``1.``, a parenthesis, a bullet ``-`` at the
  start of the line), so in ``2 * 3 ** 2 = 18`` the piece ``2`` is not read as the left side;
- truth (:func:`holds`): the two sides are equal exactly, or the right one is a decimal and the left one rounds to it
  (``10 / 3 = 3.33`` holds);
- the equations of a line, two ways: :func:`equations` reads each ``=`` on its own (the process rewards'
  steps); :func:`chains` groups ``e0 = e1 = ... = em`` into one chain while the text between two ``=`` is one
  expression (the per-equation accuracy of ``dsmath.evaluation.arithmetic``).

    >>> [text for _, text in chains("After getting 4 more: 47 + 36 = 40 + 30 + 7 + 6 = 70 + 13 = 83.")[0]]
    ['47 + 36', '40 + 30 + 7 + 6', '70 + 13', '83']
    >>> [(evaluate(lhs), evaluate(rhs)) for lhs, rhs, _ in equations("1/5 + 1/10 = 2/10 + 1/10 = 3/10.")]
    [(Fraction(3, 10), Fraction(3, 10)), (Fraction(3, 10), Fraction(3, 10))]
"""

from __future__ import annotations

import ast
import re
from fractions import Fraction

MAX_EXPR_CHARS = 200  # longer arithmetic spans are not checked (bounds the evaluation cost)
MAX_NUMBER_DIGITS = 30
MAX_SPAN_CHARS = MAX_EXPR_CHARS + 8  # a longer run of arithmetic characters is not read (keeps the search linear)

_REPLACEMENTS = (("\\times", "*"), ("\\cdot", "*"), ("×", "*"), ("·", "*"), ("\\div", "/"), ("÷", "/"),
                 ("−", "-"), ("–", "-"), ("\\left", ""), ("\\right", ""), ("\\$", ""), ("$", ""))  # fmt: skip
_LATEX_FRAC = re.compile(r"\\[dt]?frac\{([\d.\s+\-*/()]+)\}\{([\d.\s+\-*/()]+)\}")
_THOUSANDS = re.compile(r"(?<=\d),(?=\d{3}(?!\d))")
_SPAN_CHARS = frozenset("0123456789.+-*/() ")
_TOKEN = re.compile(r"\d+(?:\.\d+)?|[-+*/()]")
_LONG_NUMBER = re.compile(rf"\d{{{MAX_NUMBER_DIGITS + 1},}}")
_RELATION = re.compile(r"(?<![<>!=])=(?!=)")  # an '=' that is not part of ==, <=, >=, !=


def normalize_step(line: str) -> str:
    """A line in plain arithmetic notation: LaTeX/unicode operators, \\frac{a}{b} -> (a)/(b), no 1,000 commas.

    >>> normalize_step("\\\\frac{1}{2} \\\\times 1,000 = 500")
    '(1)/(2) * 1000 = 500'
    """
    for old, new in _REPLACEMENTS:
        line = line.replace(old, new)
    line = _LATEX_FRAC.sub(r"(\1)/(\2)", line)
    return _THOUSANDS.sub("", line)


def evaluate(node: ast.AST) -> Fraction:
    """Exact value of an arithmetic AST of number literals, + - * / and unary minus (ZeroDivisionError possible)."""
    if isinstance(node, ast.Expression):
        return evaluate(node.body)
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        return Fraction(repr(node.value)) if isinstance(node.value, float) else Fraction(node.value)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        value = evaluate(node.operand)
        return -value if isinstance(node.op, ast.USub) else value
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub, ast.Mult, ast.Div)):
        a, b = evaluate(node.left), evaluate(node.right)
        ops = {ast.Add: a.__add__, ast.Sub: a.__sub__, ast.Mult: a.__mul__, ast.Div: a.__truediv__}
        return ops[type(node.op)](b)
    raise ValueError("not arithmetic")


def parse(expr: str, strict: bool = False) -> ast.Expression | None:
    """AST of an arithmetic expression; None unless it parses and has no number longer than MAX_NUMBER_DIGITS.

    strict: the text must also be arithmetic tokens only, so a stray '.' (``7.``, Python's float 7.0) is no number.

    >>> evaluate(parse("3 / 4 + 0.25")), parse("- 3 + 4"), parse("7. + 1") is None, parse("7. + 1", strict=True)
    (Fraction(1, 1), None, False, None)
    """
    if strict and (not expr.strip() or "".join(_TOKEN.findall(expr)) != expr.replace(" ", "")):
        return None
    expr = expr.strip()
    if not expr or len(expr) > MAX_EXPR_CHARS or _LONG_NUMBER.search(expr):
        return None
    if expr[0] == "-" and (len(expr) < 2 or expr[1] == " "):  # "- 3 + 4" is a bullet, not a negative number
        return None
    try:
        tree = ast.parse(expr, mode="eval")
        evaluate(tree)
    except ZeroDivisionError:
        return tree
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    return tree


def left_side(line: str, end: int, strict: bool = False) -> tuple[ast.Expression, str] | None:
    """The longest arithmetic expression ending at line[end] (the left side of an '=' there), with its text.

    A shorter piece is taken only where the text it leaves out cannot continue it (a list number "1.", an opening
    parenthesis, a bullet "-" at the start of the line). strict: as in :func:`parse`.

    >>> left_side("1. 3 + 4 = 7", 9)[1], left_side("2 * 3 ** 2 = 18", 11)
    ('3 + 4', None)
    """
    i = end
    while i > 0 and line[i - 1] in _SPAN_CHARS:
        i -= 1
    span, at_line_start = line[i:end], not line[:i].strip()
    if len(span) > MAX_SPAN_CHARS:  # too long to check (and keeps the search over cuts linear)
        return None
    for m in _TOKEN.finditer(span):
        text, rest = span[m.start() :], span[: m.start()].strip()
        if rest and rest[-1] not in ".(" and not (at_line_start and rest in ("-", "*", "+")):
            continue
        if (tree := parse(text, strict)) is not None:
            return tree, text.strip()
    return None


def right_side(line: str, start: int, strict: bool = False) -> tuple[ast.Expression, str] | None:
    """The longest arithmetic expression starting at line[start] (the right side of an '=' before it), with its text;
    a shorter one only before a '.' or ')'. strict: as in :func:`parse`.

    >>> right_side("20 + 4 = 24.", 8)[1]
    '24'
    """
    j = start
    while j < len(line) and line[j] in _SPAN_CHARS:
        j += 1
    span = line[start:j]
    if len(span) > MAX_SPAN_CHARS:
        return None
    for m in reversed(list(_TOKEN.finditer(span))):
        text, rest = span[: m.end()], span[m.end() :].strip()
        if rest and rest[0] not in ".)":
            continue
        if (tree := parse(text, strict)) is not None:
            return tree, text.strip()
    return None


def holds(lhs: ast.Expression, rhs: ast.Expression, rhs_text: str) -> bool:
    """lhs == rhs exactly, or rhs is a decimal literal equal to lhs rounded to its shown places.

    >>> holds(parse("10 / 3"), parse("3.33"), "3.33"), holds(parse("10 / 3"), parse("3.3"), "3.3")
    (True, True)
    >>> holds(parse("10 / 3"), parse("3.4"), "3.4"), holds(parse("1 / 0"), parse("1"), "1")
    (False, False)
    """
    try:
        a, b = evaluate(lhs), evaluate(rhs)
    except ZeroDivisionError:
        return False
    if a == b:
        return True
    places = re.fullmatch(r"-?\d+\.(\d+)", rhs_text)
    return bool(places) and abs(a - b) <= Fraction(1, 2 * 10 ** len(places.group(1)))


def equations(line: str) -> list[tuple[ast.Expression, ast.Expression, str]]:
    """(lhs, rhs, rhs text) for each '=' of a line, read on its own: both sides arithmetic (:func:`left_side`,
    :func:`right_side`) and at least one side has an operator. The line is normalised first.

    >>> [text for _, _, text in equations("Total: 3 * 4 = 12, and 12 = 12; then 12 + 1 = 13.")]
    ['12', '13']
    """
    line = normalize_step(line)
    found = []
    for m in _RELATION.finditer(line):
        lhs, rhs = left_side(line, m.start()), right_side(line, m.end())
        if lhs and rhs and (not isinstance(lhs[0].body, ast.Constant) or not isinstance(rhs[0].body, ast.Constant)):
            found.append((lhs[0], rhs[0], rhs[1]))
    return found


def chains(line: str) -> list[list[tuple[ast.Expression, str]]]:
    """The chains ``e0 = e1 = ... = em`` of a line, left to right, each as its (AST, text) expressions (m >= 1).

    The text between two '=' that is one expression continues the chain; other text ends it (``3 + 4 = 7 and
    7 * 2 = 14`` is two chains); the ends are :func:`left_side` / :func:`right_side`. Expressions are read strictly
    (:func:`parse`). The line is normalised first.

    >>> [[text for _, text in chain] for chain in chains("So 3 + 4 = 7 and 7 * 2 = 14 = 14.")]
    [['3 + 4', '7'], ['7 * 2', '14', '14']]
    """
    line = normalize_step(line)
    marks = list(_RELATION.finditer(line))
    found: list[list[tuple[ast.Expression, str]]] = []
    current: list[tuple[ast.Expression, str]] = []  # the expressions of the chain being read
    for k, mark in enumerate(marks):
        after = line[mark.end() : marks[k + 1].start()] if k + 1 < len(marks) else None
        whole = None if after is None else parse(after, strict=True)  # an inner segment that is one expression
        lhs = current[-1] if current else left_side(line, mark.start(), strict=True)
        rhs = (whole, after.strip()) if whole is not None else right_side(line, mark.end(), strict=True)
        if lhs is None or rhs is None:
            if len(current) > 1:
                found.append(current)
            current = []
            continue
        current = (current or [lhs]) + [rhs]
        if whole is None:  # the chain ends at this '='
            found.append(current)
            current = []
    return found

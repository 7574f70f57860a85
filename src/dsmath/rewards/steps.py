"""Rule-based process supervision: split a chain of thought into steps and check each step's arithmetic.

DeepSeekMath sec. 4.1.3 (process supervision) gives a reward at the end token of each reasoning step; the
normalised step rewards are summed from each token onward to form the advantage. Here the "reward model" is exact
arithmetic: a step is one non-empty line (docs/formats.md); each ``lhs = rhs`` in it whose sides are arithmetic over
numbers (``+ - * /``, parentheses; LaTeX ``\\times \\cdot \\div \\frac{a}{b}`` too) is evaluated with Fractions.

Rewards: a checked step scores +1.0 when every equation in it holds and -1.0 otherwise; a step with no checkable
equation is neutral (``checked=False``, reward 0.0). Normalising over checked steps only, {+1, -1} and {1, 0} give the
same normalised rewards ((r - mean) / std is affine-invariant); -1 is chosen so that a caller that also normalises
over unchecked steps still ranks them between right and wrong instead of lumping them with wrong ones. The final
answer line is checked against the gold answer when one is given. A decimal right-hand side may be rounded:
``10 / 3 = 3.33`` holds (|10/3 - 3.33| <= 0.005).
"""

from __future__ import annotations

import ast
import re
from bisect import bisect_left
from dataclasses import dataclass
from fractions import Fraction

from dsmath.rewards.equivalence import is_equivalent
from dsmath.rewards.extract import last_boxed

RIGHT_STEP_REWARD = 1.0
WRONG_STEP_REWARD = -1.0
NEUTRAL_STEP_REWARD = 0.0  # no checkable equation
MAX_EXPR_CHARS = 200  # longer arithmetic spans are not checked (bounds the evaluation cost)
MAX_NUMBER_DIGITS = 30

_REPLACEMENTS = (("\\times", "*"), ("\\cdot", "*"), ("×", "*"), ("·", "*"), ("\\div", "/"), ("÷", "/"),
                 ("−", "-"), ("–", "-"), ("\\left", ""), ("\\right", ""), ("\\$", ""), ("$", ""))  # fmt: skip
_LATEX_FRAC = re.compile(r"\\[dt]?frac\{([\d.\s+\-*/()]+)\}\{([\d.\s+\-*/()]+)\}")
_THOUSANDS = re.compile(r"(?<=\d),(?=\d{3}(?!\d))")
_SPAN_CHARS = frozenset("0123456789.+-*/() ")
_TOKEN = re.compile(r"\d+(?:\.\d+)?|[-+*/()]")
_LONG_NUMBER = re.compile(rf"\d{{{MAX_NUMBER_DIGITS + 1},}}")
_RELATION = re.compile(r"(?<![<>!=])=(?!=)")
_ANSWER_LINE = re.compile(r"answer is|\\boxed", re.IGNORECASE)


@dataclass(frozen=True)
class StepResult:
    """One reasoning step: text[char_start:char_end] (the line without its newline) and its process reward."""

    char_start: int
    char_end: int
    checked: bool  # the step had an equation (or was the answer line and a gold answer was given)
    correct: bool | None  # None when not checked
    reward: float


def _evaluate(node: ast.AST) -> Fraction:
    """Exact value of an arithmetic AST of number literals, + - * / and unary minus (ZeroDivisionError possible)."""
    if isinstance(node, ast.Expression):
        return _evaluate(node.body)
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        return Fraction(repr(node.value)) if isinstance(node.value, float) else Fraction(node.value)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        value = _evaluate(node.operand)
        return -value if isinstance(node.op, ast.USub) else value
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub, ast.Mult, ast.Div)):
        a, b = _evaluate(node.left), _evaluate(node.right)
        ops = {ast.Add: a.__add__, ast.Sub: a.__sub__, ast.Mult: a.__mul__, ast.Div: a.__truediv__}
        return ops[type(node.op)](b)
    raise ValueError("not arithmetic")


def _parse(expr: str) -> ast.Expression | None:
    """AST of an arithmetic expression; None unless it parses and has no number longer than MAX_NUMBER_DIGITS."""
    expr = expr.strip()
    if not expr or len(expr) > MAX_EXPR_CHARS or _LONG_NUMBER.search(expr):
        return None
    if expr[0] == "-" and (len(expr) < 2 or expr[1] == " "):  # "- 3 + 4" is a bullet, not a negative number
        return None
    try:
        tree = ast.parse(expr, mode="eval")
        _evaluate(tree)
    except ZeroDivisionError:
        return tree
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    return tree


def _side(span: str, left: bool, at_line_start: bool = False) -> tuple[ast.Expression, str] | None:
    """The longest arithmetic expression ending (left side) or starting (right side) at the '=', with its text.

    A shorter piece is taken only where the text it leaves out cannot continue it (a list number "1.", an opening
    parenthesis, a bullet "-" at the start of the line): in "2 * 3 ** 2 = 18" the piece "2" is not checked.
    """
    if len(span) > MAX_EXPR_CHARS + 8:  # too long to check (and keeps the search over cuts linear)
        return None
    cuts = [m.start() for m in _TOKEN.finditer(span)] if left else [m.end() for m in _TOKEN.finditer(span)]
    for cut in cuts if left else reversed(cuts):
        text, rest = (span[cut:], span[:cut].strip()) if left else (span[:cut], span[cut:].strip())
        if rest and not (rest[-1] in ".(" if left else rest[0] in ".)") and not (
                left and at_line_start and rest in ("-", "*", "+")):
            continue
        if (tree := _parse(text)) is not None:
            return tree, text.strip()
    return None


def _equations(line: str) -> list[tuple[ast.Expression, ast.Expression, str]]:
    """(lhs, rhs, rhs text) for each '=' whose both sides are arithmetic and at least one side has an operator."""
    found = []
    for m in _RELATION.finditer(line):
        i = m.start()
        while i > 0 and line[i - 1] in _SPAN_CHARS:
            i -= 1
        j = m.end()
        while j < len(line) and line[j] in _SPAN_CHARS:
            j += 1
        lhs = _side(line[i : m.start()], left=True, at_line_start=not line[:i].strip())
        rhs = _side(line[m.end() : j], left=False)
        if lhs and rhs and (not isinstance(lhs[0].body, ast.Constant) or not isinstance(rhs[0].body, ast.Constant)):
            found.append((lhs[0], rhs[0], rhs[1]))
    return found


def _holds(lhs: ast.Expression, rhs: ast.Expression, rhs_text: str) -> bool:
    """lhs == rhs exactly, or rhs is a decimal literal equal to lhs rounded to its shown places."""
    try:
        a, b = _evaluate(lhs), _evaluate(rhs)
    except ZeroDivisionError:
        return False
    if a == b:
        return True
    places = re.fullmatch(r"-?\d+\.(\d+)", rhs_text)
    return bool(places) and abs(a - b) <= Fraction(1, 2 * 10 ** len(places.group(1)))


def normalize_step(line: str) -> str:
    """A step line in plain arithmetic notation: LaTeX/unicode operators, \\frac{a}{b} -> (a)/(b), no 1,000 commas."""
    for old, new in _REPLACEMENTS:
        line = line.replace(old, new)
    line = _LATEX_FRAC.sub(r"(\1)/(\2)", line)
    return _THOUSANDS.sub("", line)


def check_step(line: str, gold: str | None = None) -> bool | None:
    """True/False if the step can be checked (all its equations hold / the answer equals gold), else None."""
    if gold is not None and _ANSWER_LINE.search(line) and (boxed := last_boxed(line)) is not None:
        return is_equivalent(boxed, gold)
    equations = _equations(normalize_step(line))
    return all(_holds(*eq) for eq in equations) if equations else None


def verify_steps(text: str | None, gold: str | None = None) -> list[StepResult]:
    """Per-step process rewards of a chain-of-thought completion, one StepResult per non-empty line (S,)."""
    if not isinstance(text, str):
        return []
    results, offset = [], 0
    for raw in text.split("\n"):
        line = raw.removesuffix("\r")
        if line.strip():
            ok = check_step(line, gold)
            reward = NEUTRAL_STEP_REWARD if ok is None else (RIGHT_STEP_REWARD if ok else WRONG_STEP_REWARD)
            results.append(StepResult(offset, offset + len(line), ok is not None, ok, reward))
        offset += len(raw) + 1
    return results


def token_ends(char_ends: list[int], offsets: list[tuple[int, int]]) -> list[int]:
    """Index of the last token of each step: the token covering char position char_end - 1.

    `offsets`: (T,) (start, end) character spans of the completion tokens (a tokenizer's offset_mapping), sorted.
    Returns (S,) token indices, clipped to the last token when a step ends beyond the tokenised text.
    """
    ends = [end for _, end in offsets]
    return [min(bisect_left(ends, c), len(offsets) - 1) for c in char_ends] if offsets else []

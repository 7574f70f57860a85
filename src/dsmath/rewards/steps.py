"""Rule-based process supervision: split a completion into steps and judge each step against the problem's solution.

DeepSeekMath sec. 4.1.3 (process supervision) gives a reward at the end token of each reasoning step; the
normalised step rewards are summed from each token onward to form the advantage. Here the "reward model" is exact
arithmetic plus the reference solution's step values (Math-Shepherd-style labels without rollouts): a step is
right when it computes correctly a number the solution computes.

What a step is (:func:`solution_steps`, by mode, docs/formats.md):
- a prose line (every non-empty line in ``cot``; the lines outside code fences in ``pot`` / ``tool``). Its
  equations ``lhs = rhs`` whose sides are arithmetic over numbers (``+ - * /``, parentheses; LaTeX ``\\times \\cdot
  \\div \\frac{a}{b}`` too) are evaluated with Fractions. A chain ``47 + 36 = 40 + 30 + 7 + 6 = 70 + 13 = 83`` is one
  equation per ``=``; the line's value is its last equation's right side (83); the chain's intermediate values are
  not judged against the solution. A decimal right side may be rounded: ``10 / 3 = 3.33`` holds.
- an assignment of a ```python block (``pot`` / ``tool``): the program is evaluated statically (``ast``, never run;
  :func:`program_assignments`), names to exact Fractions; the step is the assignment's line(s) in the completion.
  Lines of ```output blocks (the interpreter's) are no steps.

How a step is judged, given the reference quantities (``dsmath.rewards.solution.reference_quantities``):
- prose line with equations: RIGHT (+1) when every equation holds and its value is an unused reference quantity
  (numeric equivalence, 0.5 == 1/2); WRONG (-1) when an equation is false, or all hold but the value is no quantity
  of the solution ("irrelevant"); a right value whose quantities are all used already is a REPEAT (neutral: a step
  is paid once). Without reference quantities (MATH-500, SVAMP): truth only, +1 when all equations hold, -1 when
  one is false, and a line repeating the equations of an earlier right line is a repeat.
- program assignment: a number written as a literal (``apples = 20``, ``-3``, ``0.7``, ``3 / 4``,
  ``Fraction(3, 4)``: a given number) is neutral; a computed value is RIGHT / WRONG / REPEAT as above; one the
  evaluator cannot follow (a call it does not know, a loop, a name it lost) is neutral, as are those depending on it.
  Without reference quantities, assignments are neutral.
- anything else (a line with no equation, the answer line) is neutral: unchecked, no process signal.
A value is matched against the pool of quantities in text order; each quantity is used by one step.

The terminal step: every completion ends with a step at its last token that carries the outcome,
``terminal_reward(accuracy, format) = (+accuracy_weight if the answer is right else -accuracy_weight) + (+format_weight
if well formed else -format_weight)``. It replaces the check of the answer line, so a completion that stops early
(no answer: not right and not well formed, -1.1 with the default weights) scores strictly below one with a wrong
but well-formed answer (-0.9) whenever format_weight > 0.

Rewards: +1 / -1 / 0 and the terminal term are on one scale. Normalising over checked steps only, {+1, -1} and {1, 0}
give the same normalised rewards ((r - mean) / std is affine-invariant); -1 is chosen so that a caller that also
normalises over unchecked steps still ranks them between right and wrong.

:func:`verify_steps` is the earlier truth-only judge: every non-empty line, +1 / -1 by its equations alone, and the
answer line against the gold answer instead of a terminal step.
"""

from __future__ import annotations

import ast
import math
import re
from bisect import bisect_left
from dataclasses import dataclass
from fractions import Fraction

from dsmath.rewards.equivalence import is_equivalent
from dsmath.rewards.extract import last_boxed
from dsmath.rewards.solution import QuantityPool

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
    checked: bool  # the step carries a process signal (right, wrong or terminal)
    correct: bool | None  # None when not checked
    reward: float
    kind: str = ""  # solution_steps: right | false | irrelevant | repeat | given | unchecked | terminal


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


# ----------------------------------------------------------------------------------------------------------------
# judging steps against the reference solution

_FENCE_LINE = re.compile(r"^```[ \t]*(\w*)[ \t]*$")  # a fence line, as dsmath.rewards.extract reads them
MAX_PROGRAM_CHARS = 20_000  # a longer code block is not evaluated (its assignments are neutral)
MAX_VALUE_BITS = 4096  # a value whose numerator or denominator is longer is not followed
MAX_EXPONENT = 64  # ** with a larger (or non-integer) exponent is not followed


def terminal_reward(accuracy: float, format: float, accuracy_weight: float = 1.0,  # noqa: A002
                    format_weight: float = 0.1) -> float:
    """The outcome as the last step's reward: +-accuracy_weight (answer right / not) +- format_weight (well formed /
    not); accuracy and format are the Scorer's 0/1 values (params rewards.accuracy_weight, rewards.format_weight)."""
    return (accuracy_weight if accuracy > 0 else -accuracy_weight) + (format_weight if format > 0 else -format_weight)


@dataclass(frozen=True)
class LineCheck:
    """The equations of one prose line: whether all hold, the ways the line shows its value (the last equation's
    right side, and its left side when the right one is a rounded decimal), and a key naming the equations."""

    holds: bool
    values: frozenset[Fraction]
    key: tuple[str, ...]


def line_check(line: str) -> LineCheck | None:
    """LineCheck of a prose line, None when it has no checkable equation."""
    equations = _equations(normalize_step(line))
    if not equations:
        return None
    holds = all(_holds(*eq) for eq in equations)
    lhs, rhs, _ = equations[-1]
    values = set()
    for side in (lhs, rhs):
        try:
            values.add(_evaluate(side))
        except ZeroDivisionError:
            pass
    return LineCheck(holds, frozenset(values), tuple(f"{ast.dump(a)}={ast.dump(b)}" for a, b, _ in equations))


@dataclass(frozen=True)
class Assignment:
    """One assignment statement of a program: lines first..last (1-based, of the code), its value (None: not
    followed) and whether it only writes down a number (a given, not a computation)."""

    first: int
    last: int
    value: Fraction | None
    literal: bool


class _Unknown(Exception):
    """An expression the static evaluator does not follow."""


def _bounded(x: Fraction) -> Fraction:
    if x.numerator.bit_length() > MAX_VALUE_BITS or x.denominator.bit_length() > MAX_VALUE_BITS:
        raise _Unknown
    return x


def _number(node: ast.AST) -> Fraction:
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return _bounded(Fraction(node.value))
    if isinstance(node, ast.Constant) and type(node.value) is float and math.isfinite(node.value):
        return _bounded(Fraction(repr(node.value)))  # the decimal as written: 0.7 is 7/10
    raise _Unknown


def _call(name: str, args: list[Fraction]) -> Fraction:
    if name == "Fraction" and len(args) in (1, 2):
        if len(args) == 2 and args[1] == 0:
            raise _Unknown
        return args[0] / args[1] if len(args) == 2 else args[0]
    if name in ("float", "abs", "int") and len(args) == 1:
        return {"float": args[0], "abs": abs(args[0]), "int": Fraction(int(args[0]))}[name]
    if name == "round" and len(args) in (1, 2):
        if len(args) == 1:
            return Fraction(round(args[0]))
        if args[1].denominator != 1 or abs(args[1]) > 30:
            raise _Unknown
        return Fraction(round(args[0], int(args[1])))
    if name in ("min", "max") and len(args) >= 2:
        return min(args) if name == "min" else max(args)
    raise _Unknown


_BINOPS = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.FloorDiv: "//", ast.Mod: "%", ast.Pow: "**"}


def _binop(op: str, a: Fraction, b: Fraction) -> Fraction:
    if op in ("/", "//", "%") and b == 0:
        raise _Unknown
    if op == "**":
        if b.denominator != 1 or abs(b) > MAX_EXPONENT or (b < 0 and a == 0):
            raise _Unknown
        return a ** int(b)
    if op == "/":
        return a / b
    if op == "//":
        return Fraction(a // b)
    if op == "%":
        return a % b
    return a + b if op == "+" else a - b if op == "-" else a * b


def program_value(node: ast.AST, env: dict[str, Fraction | None]) -> Fraction:
    """Exact value of a program expression over the names of `env` (raises _Unknown when not followed): number
    literals, names, + - * / // % ** (integer exponent up to MAX_EXPONENT), unary + -, Fraction(a[, b]), int, float,
    round(x[, n]), abs, min, max. float(x) is x exactly (matching is numeric)."""
    if isinstance(node, ast.Constant):
        return _number(node)
    if isinstance(node, ast.Name):
        if env.get(node.id) is None:
            raise _Unknown
        return env[node.id]
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        value = program_value(node.operand, env)
        return -value if isinstance(node.op, ast.USub) else value
    if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
        return _bounded(_binop(_BINOPS[type(node.op)], program_value(node.left, env), program_value(node.right, env)))
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and not node.keywords
            and not any(isinstance(a, ast.Starred) for a in node.args)):
        return _bounded(_call(node.func.id, [program_value(a, env) for a in node.args]))
    raise _Unknown


def _is_literal(node: ast.AST) -> bool:
    """A number written down rather than computed: 20, -3, 0.7, 3 / 4, Fraction(3, 4), float(0.7)."""
    if isinstance(node, ast.Constant):
        return type(node.value) in (int, float)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        return _is_literal(node.operand)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
        return all(isinstance(n, ast.Constant) and type(n.value) is int for n in (node.left, node.right)) and bool(
            node.right.value)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and not node.keywords:
        return node.func.id in ("Fraction", "float", "int") and 1 <= len(node.args) <= 2 and all(
            _is_literal(a) for a in node.args)
    return False


def _assigned_names(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}


def _walk(body: list[ast.stmt], env: dict[str, Fraction | None], out: list[Assignment]) -> None:
    """Follow straight-line statements; a compound statement's names become unknown (its assignments unjudged),
    except a function without parameters, whose body is followed in a scope of its own."""
    for st in body:
        target, value_node = None, None
        if isinstance(st, ast.Assign) and all(isinstance(t, ast.Name) for t in st.targets):
            target, value_node = [t.id for t in st.targets], st.value
        elif isinstance(st, ast.AnnAssign) and isinstance(st.target, ast.Name) and st.value is not None:
            target, value_node = [st.target.id], st.value
        elif isinstance(st, ast.AugAssign) and isinstance(st.target, ast.Name):
            target = [st.target.id]
            value_node = ast.BinOp(ast.Name(st.target.id, ast.Load()), st.op, st.value)
        if target is not None:
            try:
                value = program_value(value_node, env)
            except (_Unknown, ZeroDivisionError, OverflowError, ValueError, TypeError, RecursionError):
                value = None
            out.append(Assignment(st.lineno, st.end_lineno or st.lineno, value, _is_literal(value_node)))
            env.update(dict.fromkeys(target, value))
        elif isinstance(st, (ast.FunctionDef, ast.AsyncFunctionDef)):
            a = st.args
            if not (a.posonlyargs or a.args or a.vararg or a.kwonlyargs or a.kwarg):
                _walk(st.body, dict(env), out)
            env[st.name] = None
        else:
            env.update(dict.fromkeys(_assigned_names(st)))


def program_assignments(code: str) -> list[Assignment]:
    """The assignments of a program in order, statically evaluated (never run). A program cut off mid-statement is
    read up to the line before its syntax error; one that does not parse even so has none."""
    if len(code) > MAX_PROGRAM_CHARS:
        return []
    lines = code.split("\n")
    for attempt in range(2):
        try:
            tree = ast.parse("\n".join(lines))
            break
        except SyntaxError as e:
            if attempt or not e.lineno or e.lineno < 2:
                return []
            lines = lines[: e.lineno - 1]
        except (ValueError, RecursionError, MemoryError):
            return []
    out: list[Assignment] = []
    try:
        _walk(tree.body, {}, out)
    except RecursionError:
        return []
    return out


def _segments(text: str, mode: str) -> tuple[list[tuple[int, str]], list[list[tuple[int, str]]]]:
    """(prose lines, python blocks) of `text` as (start offset, line without newline); blocks are lists of lines.

    cot: every line is prose. pot / tool: lines of ```python blocks form programs (a block left open runs to the
    end), ```output blocks (to their bare closing fence; fence lines with a language inside are output text) and
    other fenced blocks are skipped, fence lines are no steps, the rest is prose.
    """
    prose: list[tuple[int, str]] = []
    blocks: list[list[tuple[int, str]]] = []
    fenced = mode != "cot"
    state, offset = None, 0  # state: None (prose) or the open block's language
    for raw in text.split("\n"):
        line = raw.removesuffix("\r")
        m = _FENCE_LINE.match(line) if fenced else None
        if m:
            lang = m.group(1)
            if state is None:
                state = lang
                if lang == "python":
                    blocks.append([])
            elif state != "output" and lang == "output":
                state = "output"  # the interpreter opens an output block after any closed code block
            elif not lang:
                state = None
        elif state is None:
            if line.strip():
                prose.append((offset, line))
        elif state == "python":
            blocks[-1].append((offset, line))
        offset += len(raw) + 1
    return prose, blocks


def _judge(ok_values: frozenset[Fraction], pool: QuantityPool) -> tuple[bool | None, float, str]:
    """(correct, reward, kind) of a step that computed right-looking arithmetic with value(s) `ok_values`."""
    if pool.take(ok_values):
        return True, RIGHT_STEP_REWARD, "right"
    if pool.known(ok_values):
        return None, NEUTRAL_STEP_REWARD, "repeat"
    return False, WRONG_STEP_REWARD, "irrelevant"


def solution_steps(text: str | None, quantities: list[str] | tuple[str, ...] = (), mode: str = "cot",
                   outcome: float | None = None) -> list[StepResult]:
    """Process rewards of one completion judged against the solution's step values (see the module docstring).

    quantities: the reference quantities (``reference_quantities(problem)``; empty: truth-only prose checks, programs
    unjudged). mode: cot | pot | tool (which lines are steps). outcome: the terminal step's reward
    (``terminal_reward``), appended as a step at the end of the text (char_start = char_end = len(text)); None: no
    terminal step. Returns the steps in text order, neutral ones included (checked False), the terminal last; the
    pool of quantities is used up in that order.
    """
    if not isinstance(text, str):
        return []
    if mode not in ("cot", "pot", "tool"):
        raise ValueError(f"mode: must be one of cot, pot, tool (got {mode!r})")
    prose, blocks = _segments(text, mode)
    found: list[tuple[int, int, LineCheck | Assignment | None]] = [
        (start, start + len(line), line_check(line)) for start, line in prose]
    for block in blocks:
        for a in program_assignments("\n".join(line for _, line in block)):
            (start, _), (last_start, last_line) = block[a.first - 1], block[a.last - 1]
            found.append((start, last_start + len(last_line), a))
    found.sort(key=lambda f: f[0])  # stable: statements sharing a line keep their order
    pool, seen, steps = QuantityPool(quantities), set(), []
    for start, end, what in found:
        if what is None:  # a prose line without equations
            verdict = None, NEUTRAL_STEP_REWARD, "unchecked"
        elif isinstance(what, Assignment):
            if what.value is None or not pool:
                verdict = None, NEUTRAL_STEP_REWARD, "unchecked"
            elif what.literal:
                verdict = None, NEUTRAL_STEP_REWARD, "given"
            else:
                verdict = _judge(frozenset([what.value]), pool)
        elif not what.holds:
            verdict = False, WRONG_STEP_REWARD, "false"
        elif pool:
            verdict = _judge(what.values, pool)
        else:  # truth only: a right line pays once
            verdict = (None, NEUTRAL_STEP_REWARD, "repeat") if what.key in seen else (True, RIGHT_STEP_REWARD, "right")
            seen.add(what.key)
        steps.append(StepResult(start, end, verdict[0] is not None, *verdict))
    if outcome is not None:
        steps.append(StepResult(len(text), len(text), True, outcome > 0, float(outcome), "terminal"))
    return steps


def token_ends(char_ends: list[int], offsets: list[tuple[int, int]]) -> list[int]:
    """Index of the last token of each step: the token covering char position char_end - 1.

    `offsets`: (T,) (start, end) character spans of the completion tokens (a tokenizer's offset_mapping), sorted.
    Returns (S,) token indices, clipped to the last token when a step ends beyond the tokenised text.
    """
    ends = [end for _, end in offsets]
    return [min(bisect_left(ends, c), len(offsets) - 1) for c in char_ends] if offsets else []

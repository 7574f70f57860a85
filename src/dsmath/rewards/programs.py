"""The assignments of a model-written program, evaluated statically: what a ```python block computes, step by step.

A program's assignments are its steps (``pot`` / ``tool`` modes; judged in :mod:`dsmath.rewards.solution`). The
program is read with ``ast``, never run: straight-line statements are followed, names bound to exact Fractions
(:func:`program_value`: number literals, names, ``+ - * / // % **``, ``Fraction``, ``int``, ``float``, ``round``,
``abs``, ``min``, ``max``). A value the evaluator cannot follow (a call it does not know, a loop, a name it lost) is
None, as are those depending on it. A number written down rather than computed (``apples = 20``, ``-3``, ``0.7``,
``3 / 4``, ``Fraction(3, 4)``: a given number) is marked ``literal``.

    >>> code = "a = 20\\nb = a / 8\\nfor i in range(2):\\n    a += 1\\nc = a"
    >>> [(a.first, a.value, a.literal) for a in program_assignments(code)]
    [(1, Fraction(20, 1), True), (2, Fraction(5, 2), False), (5, None, False)]
"""

from __future__ import annotations

import ast
import math
from dataclasses import dataclass
from fractions import Fraction

MAX_PROGRAM_CHARS = 20_000  # a longer code block is not evaluated (its assignments are neutral)
MAX_VALUE_BITS = 4096  # a value whose numerator or denominator is longer is not followed
MAX_EXPONENT = 64  # ** with a larger (or non-integer) exponent is not followed


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

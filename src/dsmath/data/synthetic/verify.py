"""Checks of a synthetic record: every CoT equation with sympy, the boxed answer, and the programs actually run.

The equation parser is shared with anything that scores reasoning steps: :func:`extract_equation` finds the one
`<arithmetic expression> = <number>` of a CoT line (docs/formats.md) and :func:`sympy_value` evaluates either side
exactly (`sympy.Rational`, so `1/3` and `2.5` are exact).
"""

from __future__ import annotations

import ast
import json
import operator
import re
import subprocess
import sys
from collections.abc import Callable

import sympy

FIELDS = ("id", "source", "family", "level", "key", "question", "answer", "solution", "cot", "pot", "tool",
          "quantities")
_EXPR_CHARS = frozenset("0123456789+-*/(). ")
_NUMBER = re.compile(r"\s*(\d+(?:\.\d+)?(?:/\d+)?)(?![\d/])")
_BOXED = re.compile(r"^The answer is \\boxed\{([^{}]*)\}\.$")
_POT = re.compile(r"^```python\n(.*)\n```$", re.S)
_TOOL = re.compile(r"^([^`\n][^\n]*)\n```python\n(.*?)\n```\n```output\n(.*?)\n```\n(The answer is [^\n]*)$", re.S)
_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv}


def sympy_value(text: str) -> sympy.Rational:
    """Exact value of an arithmetic expression (numbers, `+ - * /`, parentheses); ValueError on anything else."""
    src = text.strip()
    try:
        tree = ast.parse(src, mode="eval")
    except SyntaxError as err:
        raise ValueError(f"not an arithmetic expression: {text!r}") from err
    return _eval(tree.body, src)


def _eval(node: ast.AST, src: str) -> sympy.Rational:
    if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
        return _OPS[type(node.op)](_eval(node.left, src), _eval(node.right, src))
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
        value = _eval(node.operand, src)
        return -value if isinstance(node.op, ast.USub) else value
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        return sympy.Rational(ast.get_source_segment(src, node))  # from the digits as written: exact
    raise ValueError(f"not an arithmetic expression: {src!r}")


def extract_chain(line: str) -> list[str] | None:
    """The expressions of the line's equation chain `<expr> = <expr> = ... = <number>`, or None if it has none.

    One operation is `[lhs, number]`; a place-value scratchpad (`dsmath.data.synthetic.scratch`) adds the links.
    >>> extract_chain("Sam has 47 + 36 = 40 + 30 + 7 + 6 = 70 + 13 = 83 pens.")
    ['47 + 36', '40 + 30 + 7 + 6', '70 + 13', '83']
    """
    parts = line.split("=")
    if len(parts) < 2:
        return None
    left = parts[0]
    i = len(left)
    while i > 0 and left[i - 1] in _EXPR_CHARS:
        i -= 1
    lhs = re.sub(r"^[^0-9(]+", "", left[i:]).strip()
    middle = [p.strip() for p in parts[1:-1]]
    m = _NUMBER.match(parts[-1])
    if not lhs or m is None or any(not p or set(p) - _EXPR_CHARS for p in middle):
        return None
    return [lhs, *middle, m.group(1)]


def extract_equation(line: str) -> tuple[str, str] | None:
    """`(lhs, result)` of the line's equation (chain), or None if it has none.

    >>> extract_equation("Sam buys 3 boxes of 12 pencils: 3 * 12 = 36.")
    ('3 * 12', '36')
    """
    chain = extract_chain(line)
    return None if chain is None else (chain[0], chain[-1])


def count_steps(cot: str) -> int:
    """Number of CoT lines that carry an equation."""
    return sum(1 for line in cot.splitlines() if extract_equation(line))


def check_cot(cot: str, answer: str) -> list[str]:
    """Problems of a CoT: false or unparsable equations (every link of a chain), a last line that is not
    `The answer is \\boxed{answer}.`"""
    lines, problems, results = cot.splitlines(), [], []
    if not lines:
        return ["cot: empty"]
    m = _BOXED.match(lines[-1])
    if m is None or m.group(1) != answer:
        problems.append(f"cot: last line {lines[-1]!r} is not the boxed answer {answer!r}")
    for line in lines[:-1]:
        if "=" not in line:
            continue
        chain = extract_chain(line)
        if chain is None:
            problems.append(f"cot: no checkable equation in {line!r}")
            continue
        try:
            values = [sympy_value(x) for x in chain]
        except (ValueError, ZeroDivisionError) as err:
            problems.append(f"cot: {err} in {line!r}")
            continue
        for (x, vx), (y, vy) in zip(zip(chain, values), zip(chain[1:], values[1:])):
            if vx != vy:
                problems.append(f"cot: false equation {x} = {y} ({x} is {vx}) in {line!r}")
        results.append(values[-1])
    try:
        if sympy_value(answer) not in results:
            problems.append(f"cot: no step computes the answer {answer}")
    except ValueError as err:
        problems.append(f"answer: {err}")
    return problems


def run_python(code: str, timeout: float = 10.0) -> str:
    """Stdout of `code` run by this interpreter in a fresh process (errors appended, so they never match)."""
    try:
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return "<timeout>"
    return done.stdout + (f"<exit {done.returncode}: {done.stderr.strip()[-200:]}>" if done.returncode else "")


_BATCH = """
import contextlib, io, json, sys
outs = []
for code in json.load(sys.stdin):
    buf = io.StringIO()
    try:
        with contextlib.redirect_stdout(buf):
            exec(compile(code, "<program>", "exec"), {"__name__": "__main__"})
    except Exception as err:
        buf.write(f"<error {type(err).__name__}: {err}>")
    outs.append(buf.getvalue())
json.dump(outs, sys.stdout)
"""


def run_programs(codes: list[str], timeout: float = 60.0) -> list[str]:
    """Stdout of each program, all run in one fresh process (each in its own namespace): fast for many."""
    done = subprocess.run([sys.executable, "-c", _BATCH], input=json.dumps(codes), capture_output=True, text=True,
                          timeout=timeout, check=True)
    return json.loads(done.stdout)


def program_of(pot: str) -> str | None:
    """The code inside a PoT fence, or None if the text is not one python fence."""
    m = _POT.match(pot)
    return m.group(1) if m else None


def tool_parts(tool: str) -> tuple[str, str, str, str] | None:
    """(reasoning, code, output, answer line) of a tool-integrated solution, or None if malformed."""
    m = _TOOL.match(tool)
    return m.groups() if m else None


def verify_record(record: dict, runner: Callable[[str], str] | None = run_python) -> list[str]:
    """Everything wrong with a synthetic record (empty list: ok). `runner=None` skips running the programs.

    Checks: fields; solution == cot; every CoT equation true (sympy, exact); boxed answer == `answer`;
    the PoT program prints exactly the answer; the tool block's output equals what its code prints.
    """
    missing = [f for f in FIELDS if f not in record]
    if missing:
        return [f"fields missing: {', '.join(missing)}"]
    answer, problems = record["answer"], []
    if record["solution"] != record["cot"]:
        problems.append("solution: differs from cot")
    problems += check_cot(record["cot"], answer)
    pot, tool = program_of(record["pot"]), tool_parts(record["tool"])
    if pot is None:
        problems.append("pot: not one fenced python block")
    if tool is None:
        problems.append("tool: not reasoning, python block, output block, answer line")
    elif tool[3] != f"The answer is \\boxed{{{answer}}}.":
        problems.append(f"tool: answer line {tool[3]!r} does not box {answer!r}")
    if runner is not None and pot is not None:
        out = runner(pot)
        if out.strip() != answer:
            problems.append(f"pot: prints {out.strip()!r}, answer is {answer!r}")
    if runner is not None and tool is not None:
        out = runner(tool[1])
        if out.rstrip("\n") != tool[2]:
            problems.append(f"tool: output block {tool[2]!r} but the code prints {out.rstrip()!r}")
    return problems

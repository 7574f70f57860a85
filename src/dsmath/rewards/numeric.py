"""Floating-point value of a constant LaTeX answer (``3\\sqrt{13}``, ``\\frac{20000}{\\pi}``, ``6-5i``), fast path only.

A recursive-descent parser over normalised answers (see :func:`normalize_answer`) with complex floats, so every
evaluation is bounded in time (no big integers, exponents capped). Grammar, with implicit multiplication:

    expr := term (('+' | '-') term)*         term := unary (('*' | '/' | <implicit>) unary)*
    unary := ('-' | '+') unary | power       power := atom ('^' atom)?
    atom := number | '(' expr ')' | '{' expr '}' | \\frac atom atom | \\sqrt ('[' expr ']')? atom | \\pi | e | i

Anything else (variables, \\sin, sets, intervals) gives None and the caller falls back to sympy.
"""

from __future__ import annotations

import cmath
import re

MAX_EXPONENT = 1000.0  # |exponent| above this: not evaluated (overflow or sympy territory)
_TOKEN = re.compile(r"\d+\.?\d*|\.\d+|\\[a-zA-Z]+|\S")
_CONSTANTS = {"\\pi": complex(cmath.pi), "e": complex(cmath.e), "i": 1j}
_MULTIPLY = {"*", "\\cdot", "\\times"}
_DIVIDE = {"/", "\\div"}
_ATOM_START = re.compile(r"\d|\.|\(|\{|\\frac$|\\sqrt$|\\pi$|e$|i$")


class _Unsupported(Exception):
    """The answer is not a constant expression this parser understands."""


class _Parser:
    def __init__(self, text: str):
        self.tokens = _TOKEN.findall(text)
        self.pos = 0

    def peek(self) -> str | None:
        return self.tokens[self.pos] if self.pos < len(self.tokens) else None

    def take(self, expected: str | None = None) -> str:
        tok = self.peek()
        if tok is None or (expected is not None and tok != expected):
            raise _Unsupported(f"expected {expected!r}, got {tok!r}")
        self.pos += 1
        return tok

    def expr(self) -> complex:
        value = self.term()
        while self.peek() in ("+", "-"):
            value = value + self.term() if self.take() == "+" else value - self.term()
        return value

    def term(self) -> complex:
        value = self.unary()
        while (tok := self.peek()) is not None:
            if tok in _MULTIPLY or tok in _DIVIDE:
                self.take()
                rhs = self.unary()
                value = value * rhs if tok in _MULTIPLY else value / rhs
            elif _ATOM_START.match(tok):
                value = value * self.power()
            else:
                break
        return value

    def unary(self) -> complex:
        if self.peek() in ("-", "+"):
            return -self.unary() if self.take() == "-" else self.unary()
        return self.power()

    def power(self) -> complex:
        base = self.atom()
        if self.peek() != "^":
            return base
        self.take()
        exponent = self.unary() if self.peek() in ("-", "+") else self.atom()
        if abs(exponent) > MAX_EXPONENT:
            raise _Unsupported("exponent too large")
        return base**exponent

    def atom(self) -> complex:
        tok = self.take()
        if tok[0].isdigit() or tok[0] == ".":
            return complex(float(tok))
        if tok in ("(", "{"):
            value = self.expr()
            self.take(")" if tok == "(" else "}")
            return value
        if tok == "\\frac":
            return self.atom() / self.atom()
        if tok == "\\sqrt":
            degree = 2.0
            if self.peek() == "[":
                self.take()
                degree = self.expr()
                self.take("]")
            return _root(self.atom(), degree)
        if tok in _CONSTANTS:
            return _CONSTANTS[tok]
        raise _Unsupported(f"unsupported token {tok!r}")


def _root(x: complex, degree: complex) -> complex:
    """The degree-th root; the real one for a real radicand and an odd integer degree (cube root of -8 is -2)."""
    if degree == 2:
        return cmath.sqrt(x)
    if x.imag == 0 and degree.imag == 0 and degree.real == int(degree.real) and int(degree.real) % 2:
        return complex((1 if x.real >= 0 else -1) * abs(x.real) ** (1 / degree.real))
    return x ** (1 / degree)


def evaluate_latex(s: str) -> complex | None:
    """Value of a constant expression as a complex float, or None when unsupported, non-finite or ill-formed."""
    parser = _Parser(s)
    try:
        value = parser.expr()
        if parser.peek() is not None:
            return None
    except (_Unsupported, ZeroDivisionError, OverflowError, ValueError, RecursionError):
        return None
    return value if cmath.isfinite(value) else None

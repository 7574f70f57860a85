"""The problem builder shared by every template: exact quantities rendered as CoT, PoT and tool text at once.

A template draws numbers, writes question sentences (:meth:`Ctx.say`) and computes with :class:`E` values.
Each :meth:`Ctx.step` is one reasoning step: one CoT line with a checkable equation (`3 * 12 = 36`), one
assignment in the program (`pencils = boxes * per_box`) and one in the tool-integrated code (`pencils = 3 * 12`).
Values are :class:`fractions.Fraction`, so every result is exact; the programs use ints, `//` where a division is
exact, and `fractions.Fraction` only where a value is not an integer, so what they print is the canonical answer.
"""

from __future__ import annotations

import hashlib
import operator
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import NamedTuple

from dsmath.data.synthetic.scratch import decimal_chain, fraction_chain, place_value_chain
from dsmath.data.synthetic.words import PEOPLE, Person

ADD, MUL, ATOM = 1, 2, 3  # operator precedence of a rendered expression (ATOM: never needs parentheses)
STYLES = ("int", "decimal", "fraction")  # how a non-integer value is written: decimal `2.5` or fraction `5/2`


class Template(NamedTuple):
    """A problem template: `fn(ctx, n)` builds an n-step problem and returns (answer, goal phrase)."""

    fn: Callable[[Ctx, int], tuple[E, str]]
    steps: Sequence[int]  # the step counts it can build
    style: str = "int"  # how non-integers are written (see STYLES)


class Reject(Exception):
    """The drawn numbers break a constraint (divisibility, bound, sign); the caller draws a new problem."""


def _terminates(value: Fraction) -> bool:
    d = value.denominator
    for p in (2, 5):
        while d % p == 0:
            d //= p
    return d == 1


def fmt_number(value: Fraction | int, style: str = "int") -> str:
    """Canonical text of an exact value: `36`; `2.5` in decimal style when it terminates; else `3/4`."""
    value = Fraction(value)
    if value.denominator == 1:
        return str(value.numerator)
    if style == "decimal" and _terminates(value):
        digits = 0
        while (value * 10**digits).denominator != 1:
            digits += 1
        scaled = str(abs((value * 10**digits).numerator)).rjust(digits + 1, "0")
        sign = "-" if value < 0 else ""
        return f"{sign}{scaled[:-digits]}.{scaled[-digits:]}"
    return f"{value.numerator}/{value.denominator}"


@dataclass(frozen=True, slots=True)
class E:
    """An exact value with its three renderings: `cot` (numbers), `pot` (variable names), `tool` (literals).

    `frac` says whether the value is a `fractions.Fraction` at run time in the programs (else an int).
    """

    value: Fraction
    cot: str
    pot: str
    tool: str
    cot_prec: int = ATOM
    code_prec: int = ATOM
    frac: bool = False
    op: str = ""  # the last operation of a computed value ("" for a number) ...
    kids: tuple[E, ...] = ()  # ... and its two operands: the tree a CoT step reduces one operation at a time

    def __str__(self) -> str:
        return self.cot

    def __add__(self, other: E) -> E:
        return _binop(self, "+", other)

    def __sub__(self, other: E) -> E:
        return _binop(self, "-", other)

    def __mul__(self, other: E) -> E:
        return _binop(self, "*", other)

    def __truediv__(self, other: E) -> E:
        return _binop(self, "/", other)


def _wrap(text: str, prec: int, op_prec: int, right: bool, op: str) -> str:
    """Parenthesize an operand whose precedence is lower (or equal, on the right of a non-associative op)."""
    if prec < op_prec or (right and prec == op_prec and op != "+"):
        return f"({text})"
    return text


def _join(a: str, a_prec: int, op: str, b: str, b_prec: int) -> str:
    p = MUL if op in "*/" or op == "//" else ADD
    return f"{_wrap(a, a_prec, p, False, op)} {op} {_wrap(b, b_prec, p, True, op)}"


_APPLY = {"+": operator.add, "-": operator.sub, "*": operator.mul, "/": operator.truediv}


def _binop(a: E, op: str, b: E) -> E:
    if op == "/" and b.value == 0:
        raise Reject("division by zero")
    value = _APPLY[op](a.value, b.value)
    prec = MUL if op in "*/" else ADD
    cot = _join(a.cot, a.cot_prec, op, b.cot, b.cot_prec)
    frac, code_op = a.frac or b.frac, op
    if op == "/" and not frac:
        if value.denominator != 1:  # int / int that is not whole: build the Fraction explicitly
            return E(value, cot, f"Fraction({a.pot}, {b.pot})", f"Fraction({a.tool}, {b.tool})", prec, ATOM, True,
                     op, (a, b))
        code_op = "//"  # exact integer division keeps the program in ints (`/` would print 9.0)
    pot = _join(a.pot, a.code_prec, code_op, b.pot, b.code_prec)
    tool = _join(a.tool, a.code_prec, code_op, b.tool, b.code_prec)
    return E(value, cot, pot, tool, prec, prec, frac, op, (a, b))


def _shown(value: Fraction, style: str) -> E:
    """A computed value as the CoT writes it after reducing an operation (a fraction binds like a division)."""
    text = fmt_number(value, style)
    return E(value, text, text, text, MUL if "/" in text else ATOM)


def _reduce_once(e: E, style: str) -> E:
    """`e` with its leftmost innermost operation (both operands numbers) replaced by its value."""
    a, b = e.kids
    if not a.op and not b.op:
        return _shown(e.value, style)
    if a.op:
        a = _reduce_once(a, style)
    else:
        b = _reduce_once(b, style)
    prec = MUL if e.op in "*/" else ADD
    return E(e.value, _join(a.cot, a.cot_prec, e.op, b.cot, b.cot_prec), "", "", prec, op=e.op, kids=(a, b))


def working(expr: E, style: str, decimals: bool = False) -> list[str]:
    """The CoT expressions between `expr` and its value: a compound expression reduced one operation at a time,
    then the last operation's place-value scratchpad (`dsmath.data.synthetic.scratch`) when its operands are whole,
    or its common-denominator chain when it is a sum or difference with a fraction written `a/b` (not decimal style),
    or (`decimals`, decimal style) its whole parts and decimal parts apart when an operand is a decimal.

    >>> a, b, c = (E(Fraction(n), str(n), "", "") for n in (9, 2, 1))
    >>> working(a * b + c, "int")
    ['18 + 1', '10 + 8 + 1', '10 + 9']
    """
    out, e = [], expr
    while e.op and any(k.op for k in e.kids):
        e = _reduce_once(e, style)
        out.append(e.cot)
    if e.op and all(k.value.denominator == 1 for k in e.kids) and e.value.denominator == 1:
        a, b = (int(k.value) for k in e.kids)
        out += place_value_chain(a, e.op, b)
    elif e.op in ("+", "-") and style != "decimal" and any(k.value.denominator != 1 for k in e.kids):
        a, b = (k.value for k in e.kids)
        out += [x for x in fraction_chain(a, e.op, b) if x != e.cot]
    elif decimals and style == "decimal" and e.op and any(k.value.denominator != 1 for k in e.kids):
        a, b = (k.value for k in e.kids)
        out += [x for x in decimal_chain(a, e.op, b) if x != e.cot]
    return out


class Ctx:
    """Accumulates one problem: question sentences, steps, program inputs, key numbers."""

    def __init__(self, rng: random.Random, max_number: int, template: str, style: str = "int",
                 scratchpad: bool = False, decimals: bool = False):
        self.rng, self.max_number, self.style, self.scratchpad = rng, max_number, style, scratchpad
        self.decimals = decimals  # decimal operations split into whole and decimal parts (`decimal_scratchpad`)
        self.cap = max(max_number**2, 1000)  # bound on intermediate results
        self.tags = [template]
        self.sentences: list[str] = []
        self.cot: list[str] = []
        self.decls: list[str] = []
        self.pot: list[str] = []
        self.tool: list[str] = []
        self.key_numbers: list[str] = []
        self.quantities: list[str] = []  # the value of every step, in order (process supervision's reference)
        self.steps = 0
        self._names: set[str] = set()
        self._people: list[str] = []

    # -- drawing -----------------------------------------------------------------------------------------------
    def int(self, lo: int, hi: int | None = None) -> int:
        """A uniform integer in [lo, min(hi, max_number)]; Reject if that range is empty."""
        hi = self.max_number if hi is None else min(hi, self.max_number)
        if hi < lo:
            raise Reject(f"empty range [{lo}, {hi}]")
        return self.rng.randint(lo, hi)

    def pick(self, seq):
        """A uniform choice from a sequence."""
        return seq[self.rng.randrange(len(seq))]

    def person(self) -> Person:
        """A character not used yet in this problem."""
        while True:
            p = self.pick(PEOPLE)
            if p.name not in self._people:
                self._people.append(p.name)
                return p

    def tag(self, tag: str) -> None:
        """Record a structural choice (operation, variant) in the problem identity."""
        self.tags.append(tag)

    def mark(self) -> tuple:
        """A snapshot to :meth:`rollback` to when an optional operation turns out not to apply."""
        lists = (self.tags, self.sentences, self.cot, self.decls, self.pot, self.tool, self.key_numbers,
                 self.quantities, self._people)
        return tuple(len(x) for x in lists), self.steps, set(self._names)

    def rollback(self, mark: tuple) -> None:
        """Undo everything built since `mark`."""
        lengths, self.steps, names = mark
        self._names = set(names)
        lists = (self.tags, self.sentences, self.cot, self.decls, self.pot, self.tool, self.key_numbers,
                 self.quantities, self._people)
        for x, n in zip(lists, lengths, strict=True):
            del x[n:]

    # -- building ----------------------------------------------------------------------------------------------
    def _name(self, base: str) -> str:
        name, i = base, 2
        while name in self._names:
            name, i = f"{base}{i}", i + 1
        self._names.add(name)
        return name

    def num(self, value: int | Fraction, name: str) -> E:
        """A number given in the question: part of the key, an input of the program, at most `max_number`."""
        value = Fraction(value)
        if value < 0 or max(value.numerator, value.denominator) > self.max_number:
            raise Reject(f"given number {value} out of bounds")
        name = self._name(name)
        self.key_numbers.append(fmt_number(value, "fraction"))
        if value.denominator == 1:
            self.decls.append(f"{name} = {value.numerator}")
            return E(value, str(value.numerator), name, str(value.numerator))
        literal = f"Fraction({value.numerator}, {value.denominator})"
        self.decls.append(f"{name} = {literal}")
        return E(value, fmt_number(value, "fraction"), name, literal, MUL, ATOM, True)

    @staticmethod
    def lit(value: int) -> E:
        """A constant of the template itself (the whole `1`, `100` percent): not an input, not in the key."""
        return E(Fraction(value), str(value), str(value), str(value))

    def say(self, sentence: str) -> None:
        """Append a sentence to the question."""
        self.sentences.append(sentence)

    def step(self, text: str, expr: E, name: str, code: bool = True) -> E:
        """One reasoning step `text: expr = value.`; `code=False` for a check that the programs skip."""
        if expr.value < 0 or expr.value > self.cap:
            raise Reject(f"intermediate {expr.value} out of bounds")
        shown = fmt_number(expr.value, self.style)
        chain = working(expr, self.style, self.decimals) if self.scratchpad else []
        self.cot.append(f"{text}: {' = '.join([expr.cot, *chain, shown])}.")
        self.quantities.append(shown)
        self.steps += 1
        if not code:
            return expr
        name = self._name(name)
        self.pot.append(f"{name} = {expr.pot}")
        self.tool.append(f"{name} = {expr.tool}")
        prec = MUL if "/" in shown else ATOM
        return E(expr.value, shown, name, name, prec, ATOM, expr.frac)

    def note(self, line: str) -> None:
        """A CoT line without an equation."""
        self.cot.append(line)

    # -- output ------------------------------------------------------------------------------------------------
    def answer_text(self, answer: E) -> str:
        """The canonical answer string."""
        return fmt_number(answer.value, self.style)

    def _print(self, code: str, value: Fraction) -> str:
        if value.denominator != 1 and self.style == "decimal":
            return f"print(float({code}))"  # exact: one correctly rounded conversion of a short decimal
        return f"print({code})"

    def record(self, family: str, level: int, answer: E, goal: str) -> dict:
        """The finished problem record (`id` from the key, so it is stable and unique)."""
        ans = self.answer_text(answer)
        key = "+".join(self.tags) + ":" + ",".join(self.key_numbers)
        cot = "\n".join([*self.cot, f"The answer is \\boxed{{{ans}}}."])
        pot_body = [*self.decls, *self.pot, self._print(answer.pot, answer.value)]
        tool_body = [*self.tool, self._print(answer.tool, answer.value)]
        pot = _fence(pot_body)
        tool = (f"Let me use Python to find {goal}.\n{_fence(tool_body)}\n```output\n{ans}\n```\n"
                f"The answer is \\boxed{{{ans}}}.")
        return {
            "id": "syn-" + hashlib.blake2b(key.encode(), digest_size=6).hexdigest(),
            "source": "synthetic", "family": family, "level": level, "key": key,
            "question": " ".join(self.sentences), "answer": ans, "solution": cot,
            "cot": cot, "pot": pot, "tool": tool, "quantities": list(self.quantities),
        }


def _fence(lines: list[str]) -> str:
    """A fenced python block, importing Fraction only when the code uses it."""
    if any("Fraction(" in line for line in lines):
        lines = ["from fractions import Fraction", *lines]
    return "```python\n" + "\n".join(lines) + "\n```"

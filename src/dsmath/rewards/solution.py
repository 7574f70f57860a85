"""The reference solution of a problem as the numbers it computes, and the judge of a completion's steps against it.

A problem record (docs/formats.md) names the value of each step of its solution, in order, as canonical number
strings ("24", "2", "3/4", "0.7"): a synthetic record in its ``quantities`` field; a GSM8K record in the calculator
annotations of its ``solution`` text (``48/2 = <<48/2=24>>24 clips``), read by :func:`gsm8k_quantities`. Other records
(MATH-500, SVAMP) name none: their steps can only be checked for true arithmetic (``dsmath.rewards.steps``).

    reference_quantities(problem) -> list[str]    the solution's step values, plus the gold answer; [] when unknown
    gsm8k_quantities(solution) -> list[str]       the results of a GSM8K solution's <<expr=result>> annotations
    canonical_number(value) -> str                "24", "-3", "2.5", "1/3"
    QuantityPool(quantities)                      matches step values, each quantity used once (a multiset)
    solution_steps(text, quantities, mode, outcome) -> list[StepResult]   per-step process rewards (below)

Process supervision (Math-Shepherd-style labels without rollouts): a step is right when it computes correctly a number
the solution computes. What a step is (:func:`solution_steps`, by mode, docs/formats.md):
- a prose line (every non-empty line in ``cot``; the lines outside code fences in ``pot`` / ``tool``), its equations
  read and checked by :func:`dsmath.rewards.steps.line_check`; the line's value is its last equation's right side,
  the chain's intermediate values are not judged against the solution.
- an assignment of a ```python block (``pot`` / ``tool``), evaluated statically (:mod:`dsmath.rewards.programs`);
  the step is the assignment's line(s) in the completion. Lines of ```output blocks (the interpreter's) are no steps.

How a step is judged, given the reference quantities:
- prose line with equations: RIGHT (+1) when every equation holds and its value is an unused reference quantity
  (numeric equivalence, 0.5 == 1/2); WRONG (-1) when an equation is false, or all hold but the value is no quantity
  of the solution ("irrelevant"); a right value whose quantities are all used already is a REPEAT (neutral: a step
  is paid once). Without reference quantities (MATH-500, SVAMP): truth only, +1 when all equations hold, -1 when
  one is false, and a line repeating the equations of an earlier right line is a repeat.
- program assignment: a given number (a literal: ``apples = 20``, ``3 / 4``) is neutral; a computed value is RIGHT /
  WRONG / REPEAT as above; one the evaluator cannot follow is neutral. Without reference quantities, all are neutral.
- anything else (a line with no equation, the answer line) is neutral: unchecked, no process signal.
A value is matched against the pool of quantities in text order; each quantity is used by one step. The completion
ends with the terminal step (:func:`dsmath.rewards.steps.terminal_reward`), which carries the outcome.

    >>> [s.kind for s in solution_steps("20 + 4 = 24.\\n24 / 12 = 2.\\n24 / 12 = 2.", ["24", "2"], "cot", 1.1)]
    ['right', 'right', 'repeat', 'terminal']
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from fractions import Fraction

from dsmath.rewards.normalize import normalize_answer, parse_number
from dsmath.rewards.programs import Assignment, program_assignments
from dsmath.rewards.steps import (
    NEUTRAL_STEP_REWARD,
    RIGHT_STEP_REWARD,
    WRONG_STEP_REWARD,
    LineCheck,
    StepResult,
    line_check,
)

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


# ----------------------------------------------------------------------------------------------------------------
# judging a completion's steps against the solution

_FENCE_LINE = re.compile(r"^```[ \t]*(\w*)[ \t]*$")  # a fence line, as dsmath.rewards.extract reads them


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

"""Steps of a completion and their process rewards: the truth of a line's arithmetic, the terminal step, token ends.

DeepSeekMath sec. 4.1.3 (process supervision) gives a reward at the end token of each reasoning step; the
normalised step rewards are summed from each token onward to form the advantage. Here the "reward model" is exact
arithmetic (this module) plus the reference solution's step values (:func:`dsmath.rewards.solution.solution_steps`,
which judges each step of a completion by mode and ends it with the terminal step).

A prose line's equations ``lhs = rhs`` whose sides are arithmetic over numbers (``+ - * /``, parentheses; LaTeX
``\\times \\cdot \\div \\frac{a}{b}`` too) are read and evaluated with Fractions by :mod:`dsmath.rewards.chains`. A
chain ``47 + 36 = 40 + 30 + 7 + 6 = 70 + 13 = 83`` is one equation per ``=``; the line's value is its last
equation's right side (83). A decimal right side may be rounded: ``10 / 3 = 3.33`` holds.

    check_step(line, gold=None) -> bool | None          all equations hold / the answer line equals gold; None: none
    line_check(line) -> LineCheck | None                whether all hold, the line's value(s), a key of its equations
    verify_steps(text, gold=None) -> list[StepResult]   truth-only per-line checks, the answer line against gold
    terminal_reward(accuracy, format, aw, fw) -> float  the terminal step's reward: +-aw (right) +- fw (well formed)
    token_ends(char_ends, offsets) -> list[int]         the last token of each step

    >>> [(s.char_start, s.char_end, s.reward) for s in verify_steps("20 + 4 = 24.\\n24 / 12 = 3.\\nSo.")]
    [(0, 12, 1.0), (13, 25, -1.0), (26, 29, 0.0)]

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
import re
from bisect import bisect_left
from dataclasses import dataclass
from fractions import Fraction

from dsmath.rewards.chains import equations, evaluate, holds
from dsmath.rewards.equivalence import is_equivalent
from dsmath.rewards.extract import last_boxed

RIGHT_STEP_REWARD = 1.0
WRONG_STEP_REWARD = -1.0
NEUTRAL_STEP_REWARD = 0.0  # no checkable equation

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


def check_step(line: str, gold: str | None = None) -> bool | None:
    """True/False if the step can be checked (all its equations hold / the answer equals gold), else None."""
    if gold is not None and _ANSWER_LINE.search(line) and (boxed := last_boxed(line)) is not None:
        return is_equivalent(boxed, gold)
    found = equations(line)
    return all(holds(*eq) for eq in found) if found else None


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
    found = equations(line)
    if not found:
        return None
    all_hold = all(holds(*eq) for eq in found)
    lhs, rhs, _ = found[-1]
    values = set()
    for side in (lhs, rhs):
        try:
            values.add(evaluate(side))
        except ZeroDivisionError:
            pass
    return LineCheck(all_hold, frozenset(values), tuple(f"{ast.dump(a)}={ast.dump(b)}" for a, b, _ in found))


def token_ends(char_ends: list[int], offsets: list[tuple[int, int]]) -> list[int]:
    """Index of the last token of each step: the token covering char position char_end - 1.

    `offsets`: (T,) (start, end) character spans of the completion tokens (a tokenizer's offset_mapping), sorted.
    Returns (S,) token indices, clipped to the last token when a step ends beyond the tokenised text.
    """
    ends = [end for _, end in offsets]
    return [min(bisect_left(ends, c), len(offsets) - 1) for c in char_ends] if offsets else []

"""Answer equivalence: is a predicted final answer the same mathematical object as the gold answer?

Two paths:
- fast (in process, microseconds, no sympy): identical strings; equal after :func:`normalize_answer` (LaTeX
  spelling, units, currency, degrees, percent signs, thousands separators, ``x =``); or both plain numbers, decided
  exactly with Fractions (``14/3`` = ``\\frac{14}{3}`` = ``4\\frac{2}{3}``; ``2`` = ``2.0``; ``0.5`` != ``0.6``).
- slow (math-verify, LaTeX -> sympy: ``\\sqrt``, ``\\pi``, intervals, tuples, sets, matrices, symbolic equality) in
  worker processes of :mod:`dsmath.rewards.mathverify_worker`, killed at `timeout_s`. A killed or unparsable
  comparison counts as not equivalent. This works from any thread: the deadline is a `select` on the worker's pipe,
  not a signal (math-verify's own `signal.alarm` timeout only works in the main thread and cannot interrupt a long
  C-level big-integer operation; killing a process can).

Numbers that are close but not equal (``0.333333`` vs ``1/3``) go to math-verify, which rounds to 6 decimals.
"""

from __future__ import annotations

import atexit
import os
import re
import sys
from concurrent.futures import ThreadPoolExecutor
from fractions import Fraction

from dsmath.config import Rewards
from dsmath.core.workers import WorkerPool
from dsmath.rewards.normalize import normalize_answer, parse_number
from dsmath.rewards.numeric import evaluate_latex

MATHVERIFY_WORKERS = 2  # slow-path worker processes (~60-100 MB each with sympy); bounds parallel slow calls
MAX_FAST_CHARS = 1000  # longer answers skip the regex fast path and go straight to the time-limited slow path
CLEARLY_DIFFERENT = Fraction(1, 10**4)  # relative gap above which two numbers are unequal without asking sympy
FLOAT_EQUAL = 1e-12  # relative gap below which two evaluated constants are equal (3\sqrt{13} vs \sqrt{117})
DEFAULT_TIMEOUT_S = Rewards().equivalence_timeout_s

_STRUCTURE = re.compile(  # what no plain number can equal: lists, matrices, relations, sets, infinity, +-, bases
    r",|\\begin|=|<|>|\\(?:leq?|geq?|neq|cup|cap|in|infty|pm|mp)(?![a-z])|_"
)
_COMMAND = re.compile(r"\\[a-zA-Z]+")
_VARIABLE = re.compile(r"[a-df-hj-zA-Z]")
_WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "mathverify_worker.py")
_POOL = WorkerPool([sys.executable, _WORKER], MATHVERIFY_WORKERS)
atexit.register(_POOL.close)


def fast_verdict(pred: str, gold: str) -> bool | None:
    """True/False when string normalisation or exact numbers settle it; None when sympy has to decide."""
    if len(pred) > MAX_FAST_CHARS or len(gold) > MAX_FAST_CHARS:
        return None
    p, g = normalize_answer(pred), normalize_answer(gold)
    if p and p == g:
        return True
    a, b = parse_number(p), parse_number(g)
    if a is not None and b is not None:
        if a == b:
            return True
        return False if abs(a - b) > CLEARLY_DIFFERENT * max(abs(a), abs(b)) else None
    if (a is None) != (b is None):  # one side is a plain number, the other is not
        other = p if a is None else g
        if _cannot_be_a_number(other) or not any(ch.isalnum() for ch in other):
            return False  # structure or a variable, or no digit and no letter at all (a cut-off "\\", "{}")
    x, y = evaluate_latex(p), evaluate_latex(g)
    if x is None or y is None:
        return None
    gap, scale = abs(x - y), max(abs(x), abs(y))
    if gap <= FLOAT_EQUAL * scale:
        return True
    return False if gap > CLEARLY_DIFFERENT * scale else None


def _cannot_be_a_number(s: str) -> bool:
    """A normalised answer no plain number equals: a list, tuple, interval, matrix, relation, infinity, a +-, a base
    subscript, or an expression in a variable (a letter other than e and i outside LaTeX commands)."""
    return bool(_STRUCTURE.search(s) or _VARIABLE.search(_COMMAND.sub("", s)))


def slow_verdict(pred: str, gold: str, timeout_s: float) -> bool:
    """math-verify's verdict (gold first: its comparison is not symmetric); False if it fails or misses the deadline."""
    answer = _POOL.call({"pred": pred, "gold": gold}, timeout_s)
    return bool(answer and answer.get("equal") is True)


def _prepare(pred: object, gold: object) -> tuple[str, str] | None:
    if not isinstance(pred, str) or not isinstance(gold, str) or not pred.strip() or not gold.strip():
        return None
    return pred.strip(), gold.strip()


def is_equivalent(pred: str | None, gold: str | None, timeout_s: float | None = None) -> bool:
    """Whether `pred` denotes the same answer as `gold` (both answer strings, not whole completions). Never raises.

    `timeout_s` bounds the sympy comparison (default: params ``rewards.equivalence_timeout_s``); None/blank -> False.
    """
    pair = _prepare(pred, gold)
    if pair is None:
        return False
    if pair[0] == pair[1]:
        return True
    verdict = fast_verdict(*pair)
    return verdict if verdict is not None else slow_verdict(*pair, timeout_s or DEFAULT_TIMEOUT_S)


def are_equivalent(preds: list[str | None], golds: list[str], timeout_s: float | None = None) -> list[bool]:
    """:func:`is_equivalent` over pairs, (B,) -> (B,): repeated pairs are decided once, slow ones in parallel."""
    if len(preds) != len(golds):
        raise ValueError(f"preds and golds differ in length ({len(preds)} != {len(golds)})")
    verdicts: dict[tuple[str, str], bool | None] = {}
    for pair in {p for p in map(_prepare, preds, golds) if p is not None}:
        verdicts[pair] = True if pair[0] == pair[1] else fast_verdict(*pair)
    slow = [pair for pair, v in verdicts.items() if v is None]
    if slow:
        with ThreadPoolExecutor(max_workers=min(MATHVERIFY_WORKERS, len(slow))) as ex:
            results = ex.map(lambda pair: slow_verdict(*pair, timeout_s or DEFAULT_TIMEOUT_S), slow)
            verdicts.update(zip(slow, results, strict=True))
    return [bool(verdicts.get(pair)) if pair is not None else False for pair in map(_prepare, preds, golds)]

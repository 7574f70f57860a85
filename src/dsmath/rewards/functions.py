"""Outcome reward functions for GRPO / PPO / RFT: pure callables (completions (B,), golds (B,)) -> rewards (B,).

DeepSeekMath sec. 4.1.2 (outcome supervision) gives every completion one scalar reward at its last token; GRPO
normalises the rewards within each group of G completions of one question, (r - mean) / std. Here:
- accuracy: 1.0 when the final answer is equivalent to the gold answer, else 0.0. Modes (docs/formats.md): `cot` and
  `tool` read the last \\boxed{} (extract_answer; `tool` only in the model's own text, outside the interpreter's
  ```output blocks); `pot` runs the last ```python block in the sandbox and reads the last non-empty line of its
  stdout (a program that fails, times out or prints nothing scores 0).
- format: 1.0 when the text has the expected shape for its mode, else 0.0 (R1 sec. 2.2.2 format reward).
- combined: accuracy_weight * accuracy + format_weight * format.
- random: 1.0 with probability `rewards.random_p`, else 0.0, independent of the output (Spurious Rewards 2025
  control), drawn from a hash of (seed, the output's position, gold, completion): reproducible and seeded.
"""

from __future__ import annotations

import ast
import hashlib
import re
from collections.abc import Callable
from functools import partial

from dsmath.config import Rewards, Sandbox
from dsmath.rewards.equivalence import are_equivalent
from dsmath.rewards.extract import code_blocks, extract_answer, fenced_blocks, last_boxed, strip_output_blocks
from dsmath.sandbox.pool import RESULTS, run_python_batch

RewardFn = Callable[[list[str], list[str]], list[float]]
MODES = ("cot", "pot", "tool")
_ANSWER_LINE = re.compile(r"^\s*The answer is \\boxed\{.*\}\.?\s*$")


def _check_lengths(completions: list[str], golds: list[str]) -> None:
    if len(completions) != len(golds):
        raise ValueError(f"completions and golds differ in length ({len(completions)} != {len(golds)})")


def own_text(text: str, mode: str) -> str:
    """The part of a completion the model wrote: in tool mode without the interpreter's ```output blocks."""
    return strip_output_blocks(text) if mode == "tool" else text


def accuracy_reward(completions: list[str], golds: list[str], timeout_s: float | None = None,
                    mode: str = "cot") -> list[float]:
    """(B,) 1.0 where extract_answer(completion) is equivalent to gold, else 0.0 (cot and tool modes). In tool mode
    the answer is read from the model's own text (`own_text`): what a program prints does not count."""
    _check_lengths(completions, golds)
    answers = [extract_answer(own_text(c, mode)) for c in completions]
    return [float(ok) for ok in are_equivalent(answers, golds, timeout_s)]


def program_answer(stdout: str) -> str | None:
    """The answer a program-of-thought program printed: its last non-empty stdout line."""
    lines = [line.strip() for line in stdout.splitlines() if line.strip()]
    return lines[-1] if lines else None


def pot_accuracy_reward(completions: list[str], golds: list[str], *, timeout_s: float, memory_mb: int,
                        max_output_bytes: int, workers: int, equivalence_timeout_s: float | None = None) -> list[float]:
    """(B,) 1.0 where the last ```python block runs cleanly in the sandbox and prints an answer equal to gold (a
    program run before in this process is answered from its first run: :class:`dsmath.sandbox.pool.ResultCache`)."""
    _check_lengths(completions, golds)
    programs = [(code_blocks(c) or [None])[-1] for c in completions]
    runnable = [i for i, p in enumerate(programs) if p is not None]
    results = run_python_batch([programs[i] for i in runnable], timeout_s, memory_mb, max_output_bytes, workers,
                               RESULTS)
    answers: list[str | None] = [None] * len(completions)
    for i, res in zip(runnable, results, strict=True):
        answers[i] = program_answer(res.stdout) if res.ok else None
    return [float(ok) for ok in are_equivalent(answers, golds, equivalence_timeout_s)]


def _answer_line_ok(text: str) -> bool:
    """The last non-empty line is `The answer is \\boxed{X}.` with a balanced, non-empty X."""
    lines = [line for line in text.splitlines() if line.strip()]
    return bool(lines) and bool(_ANSWER_LINE.match(lines[-1])) and last_boxed(lines[-1]) is not None


def cot_format_ok(text: str) -> bool:
    """Chain of thought: ends with the answer line and has no code fences."""
    return isinstance(text, str) and _answer_line_ok(text) and "```" not in text


def pot_format_ok(text: str) -> bool:
    """Program of thought: exactly one closed ```python block, which parses and calls print()."""
    blocks = fenced_blocks(text)
    if not blocks or len(blocks) != 1 or blocks[0].lang != "python":
        return False
    try:
        tree = ast.parse(blocks[0].content)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return False
    return any(isinstance(n, ast.Call) and getattr(n.func, "id", None) == "print" for n in ast.walk(tree))


def tool_format_ok(text: str) -> bool:
    """Tool-integrated: >= 1 ```python block, each followed (only whitespace between) by an ```output block, no
    other fences, no fence left open; ends with the answer line."""
    blocks = fenced_blocks(text)
    if not blocks or not _answer_line_ok(text):
        return False
    langs = [b.lang for b in blocks]
    if langs != ["python", "output"] * (len(langs) // 2) or len(langs) % 2:
        return False
    return all(not text[code.end : out.start].strip() for code, out in zip(blocks[::2], blocks[1::2], strict=True))


_FORMAT_CHECKS = {"cot": cot_format_ok, "pot": pot_format_ok, "tool": tool_format_ok}


def format_reward(completions: list[str], golds: list[str], mode: str = "cot") -> list[float]:
    """(B,) 1.0 where the completion has the shape of `mode` (docs/formats.md), else 0.0; golds are not used."""
    _check_lengths(completions, golds)
    check = _FORMAT_CHECKS[_valid("mode", mode, MODES)]
    return [float(isinstance(c, str) and check(c)) for c in completions]


def combined_reward(completions: list[str], golds: list[str], *, accuracy: RewardFn, fmt: RewardFn,
                    accuracy_weight: float, format_weight: float) -> list[float]:
    """(B,) accuracy_weight * accuracy(completions, golds) + format_weight * fmt(completions, golds)."""
    acc = accuracy(completions, golds) if accuracy_weight else [0.0] * len(completions)
    form = fmt(completions, golds) if format_weight else [0.0] * len(completions)
    return [accuracy_weight * a + format_weight * f for a, f in zip(acc, form, strict=True)]


def random_reward(completions: list[str], golds: list[str], *, p: float, seed: int, offset: int = 0) -> list[float]:
    """(B,) 1.0 with probability p, else 0.0, independent of correctness (Spurious Rewards 2025 control).

    Output i's draw is a uniform number from blake2b(seed, offset + i, gold, completion): deterministic for the same
    inputs, and independent across outputs as long as their positions `offset + i` differ (two identical completions
    of one group get different draws). The RL trainer sets `offset` to the output's position in the whole stream of
    training outputs (:class:`RandomReward`), so that no two steps reuse a draw."""
    _check_lengths(completions, golds)
    out = []
    for i, (c, g) in enumerate(zip(completions, golds, strict=True)):
        key = "\x1f".join((str(int(seed)), str(offset + i), str(g), str(c)))
        u = int.from_bytes(hashlib.blake2b(key.encode("utf-8", "surrogatepass"), digest_size=8).digest(), "big") / 2**64
        out.append(float(u < p))
    return out


class RandomReward:
    """`random_reward` with probability p and seed, as a RewardFn. `offset` (default 0) is the position of the next
    call's first output in the run's stream of outputs: the RL trainer sets it before each scored rollout batch
    (global row (cursor + first prompt of this rank) * group_size), so draws differ across steps, sampling rounds and
    ranks, and a resumed run (the cursor is checkpointed) draws what the uninterrupted one would have."""

    def __init__(self, p: float, seed: int = 0):
        self.p, self.seed, self.offset = p, seed, 0

    def __call__(self, completions: list[str], golds: list[str]) -> list[float]:
        return random_reward(completions, golds, p=self.p, seed=self.seed, offset=self.offset)


# ----------------------------------------------------------------------------------------------------------------
# registry: reward functions chosen by name from params


def _valid(kind: str, name: str, names: tuple[str, ...]) -> str:
    if name not in names:
        raise ValueError(f"unknown {kind} {name!r}; valid: {', '.join(names)}")
    return name


def _accuracy(mode: str, rewards: Rewards, sandbox: Sandbox) -> RewardFn:
    if mode == "pot":
        return partial(pot_accuracy_reward, timeout_s=sandbox.timeout_s, memory_mb=sandbox.memory_mb,
                       max_output_bytes=sandbox.max_output_bytes, workers=sandbox.workers,
                       equivalence_timeout_s=rewards.equivalence_timeout_s)
    return partial(accuracy_reward, timeout_s=rewards.equivalence_timeout_s, mode=mode)


def _combined(mode: str, rewards: Rewards, sandbox: Sandbox) -> RewardFn:
    return partial(combined_reward, accuracy=_accuracy(mode, rewards, sandbox), fmt=partial(format_reward, mode=mode),
                   accuracy_weight=rewards.accuracy_weight, format_weight=rewards.format_weight)


REWARDS: dict[str, Callable[[str, Rewards, Sandbox], RewardFn]] = {
    "accuracy": _accuracy,
    "format": lambda mode, rewards, sandbox: partial(format_reward, mode=mode),
    "combined": _combined,
    "random": lambda mode, rewards, sandbox: RandomReward(rewards.random_p),
}


def build_reward(name: str, mode: str = "cot", rewards: Rewards | None = None,
                 sandbox: Sandbox | None = None, seed: int | None = None) -> RewardFn:
    """The reward function `name` (accuracy | format | combined | random) for `mode` (cot | pot | tool), as a
    callable (completions (B,), golds (B,)) -> (B,), with weights and limits from the params sections (defaults if
    None). seed: only for `random` (a :class:`RandomReward`; default 0)."""
    factory = REWARDS[_valid("reward", name, tuple(REWARDS))]
    fn = factory(_valid("mode", mode, MODES), rewards or Rewards(), sandbox or Sandbox())
    if isinstance(fn, RandomReward) and seed is not None:
        fn.seed = seed
    return fn

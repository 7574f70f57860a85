"""From a rollout to what the policy update needs: decoded completions, rule-based rewards, per-step rewards.

Rewards come from the reward layer (`dsmath.rewards`): a scalar per output for outcome supervision, and, for process
supervision (DeepSeekMath sec. 4.1.3), one reward per reasoning step placed at the step's last token
(`step_rewards`). The steps and their judgement are `dsmath.rewards.solution.solution_steps`': prose lines whose
equations hold and compute a value of the reference solution +1, false or irrelevant ones -1; in pot / tool mode
also the program's computed assignments, evaluated statically; and a terminal step on the output's last policy token
carrying the outcome (+-accuracy_weight +- format_weight from the Scorer's accuracy and format), so that stopping
early never pays. In tool mode the steps are the model's own lines: those of the interpreter's ```output blocks
(loss_mask 0) get no reward.
"""

from __future__ import annotations

import codecs
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache, partial

import torch

from dsmath.config import Rewards
from dsmath.rewards import (
    StepResult,
    build_reward,
    combined_reward,
    solution_steps,
    terminal_reward,
    token_ends,
    verify_steps,
)


@dataclass
class Scores:
    """Rewards of N = B*G outputs. texts: (N,) decoded completions (tool outputs included)."""

    texts: list[str]
    rewards: torch.Tensor  # (N,) the training reward (params rl.reward)
    accuracy: torch.Tensor  # (N,) 1.0 when the final answer is equivalent to the gold
    format: torch.Tensor  # (N,) 1.0 when the output has the expected form

    def to(self, device) -> Scores:
        """The same scores with their tensors on `device`."""
        return Scores(self.texts, self.rewards.to(device), self.accuracy.to(device), self.format.to(device))


class Scorer:
    """The reward of one mode (params rl.reward: accuracy | format | combined | random), with accuracy and format
    kept apart for the metrics. Each component runs once per output (programs run once in the sandbox).

    random (Spurious Rewards control): seeded by `seed` (the RL run's seed); `offset` is the position of the next
    call's first output in the run's stream of outputs, set by the trainer before each scored rollout batch."""

    def __init__(self, reward: str, mode: str, rewards_cfg, sandbox_cfg, seed: int = 0):
        self.accuracy = build_reward("accuracy", mode, rewards_cfg, sandbox_cfg)
        self.format = build_reward("format", mode, rewards_cfg, sandbox_cfg)
        self.random = build_reward("random", mode, rewards_cfg, sandbox_cfg, seed=seed) if reward == "random" else None
        self.reward_name = reward
        self.weights = (rewards_cfg.accuracy_weight, rewards_cfg.format_weight)
        self.offset = 0

    def __call__(self, texts: list[str], golds: list[str]) -> Scores:
        acc = self.accuracy(texts, golds)
        fmt = self.format(texts, golds)
        train = {"accuracy": acc, "format": fmt}.get(self.reward_name)
        if self.random is not None:
            self.random.offset = self.offset
            train = self.random(texts, golds)
        elif train is None:  # combined: the reward layer's weighting of the two components computed above
            train = combined_reward(texts, golds, accuracy=lambda *_: acc, fmt=lambda *_: fmt,
                                    accuracy_weight=self.weights[0], format_weight=self.weights[1])
        f = lambda x: torch.tensor(x, dtype=torch.float32)  # noqa: E731
        return Scores(texts, f(train), f(acc), f(fmt))


@lru_cache(maxsize=1)
def _byte_of_char() -> dict[str, int]:
    """The byte-level BPE alphabet (GPT-2's bytes_to_unicode, inverted): printable character -> the byte it stands for.

    Printable Latin-1 bytes stand for themselves; the 68 others (controls, space, ...) are shifted to chr(256 + k).
    """
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    shifted = [b for b in range(256) if b not in printable]
    table = {chr(b): b for b in printable}
    table.update({chr(256 + k): b for k, b in enumerate(shifted)})
    return table


def token_bytes(tokenizer, ids: list[int]) -> list[bytes] | None:
    """(T,) the UTF-8 bytes each token adds to the decoded text of a byte-level BPE tokenizer, b"" for special tokens.

    A character outside the byte alphabet (an added token's text) stands for its own UTF-8 bytes, as in the
    ByteLevel decoder. None when a token id is unknown to the tokenizer.
    """
    table, special = _byte_of_char(), set(tokenizer.all_special_ids)
    out = []
    for i, piece in zip(ids, tokenizer.convert_ids_to_tokens(ids), strict=True):
        if piece is None:
            return None
        if i in special:
            out.append(b"")
            continue
        out.append(b"".join(bytes([table[c]]) if c in table else c.encode() for c in piece))
    return out


def _spans_of_bytes(pieces: list[bytes]) -> tuple[str, list[tuple[int, int]]]:
    """(T,) byte pieces -> their UTF-8 text and each piece's (start, end) character span in it.

    A character whose bytes are split over several pieces belongs to the piece that completes it (its first bytes
    add nothing to their pieces' spans); invalid bytes become U+FFFD.
    """
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    chunks, spans, pos = [], [], 0
    for k, piece in enumerate(pieces):
        chunk = decoder.decode(piece, final=k == len(pieces) - 1)
        chunks.append(chunk)
        spans.append((pos, pos + len(chunk)))
        pos += len(chunk)
    return "".join(chunks), spans


def _spans_of_prefixes(tokenizer, ids: list[int], text: str) -> list[tuple[int, int]]:
    """Fallback for any tokenizer, O(T^2): token i ends where decode(ids[:i+1]) stops agreeing with `text`."""
    spans, pos = [], 0
    for prefix in tokenizer.batch_decode([ids[: i + 1] for i in range(len(ids))], skip_special_tokens=True):
        end = pos
        while end < min(len(prefix), len(text)) and prefix[end] == text[end]:
            end += 1
        spans.append((pos, end))
        pos = end
    if spans:
        spans[-1] = (spans[-1][0], len(text))
    return spans


def token_spans(tokenizer, ids: list[int]) -> tuple[str, list[tuple[int, int]]]:
    """Decode (T,) ids once: the text (special tokens dropped, as `decode_completions`) and the (T,) (start, end)
    character span of each token in it, contiguous and sorted. A multi-byte character split over tokens belongs to
    the token that completes it; a special token, or one holding only the first bytes of a character, spans nothing.

    Byte-level BPE tokenizers (ours, GPT-2 style) are mapped back to bytes in linear time; any tokenizer whose text
    those bytes do not reproduce falls back to decoding the prefixes.
    """
    text = tokenizer.decode(ids, skip_special_tokens=True)
    pieces = token_bytes(tokenizer, ids)
    if pieces is not None:
        byte_text, spans = _spans_of_bytes(pieces)
        if byte_text == text:
            return text, spans
    return text, _spans_of_prefixes(tokenizer, ids, text)


def _last_policy_token(spans: list[tuple[int, int]], policy: list[bool], last: int, char_start: int) -> int | None:
    """From token `last` (the one holding a step's last character) back to the step's start at `char_start`: the
    first token the policy chose; None if there is none (the step is interpreter output).

    spans: (K,) contiguous sorted token spans; policy: (K,) True where the policy chose the token (loss_mask 1).
    """
    for k in range(last, -1, -1):
        if spans[k][1] <= char_start:
            return None
        if policy[k]:
            return k
    return None


def _row_steps(tokenizer, ids: torch.Tensor, mask: torch.Tensor, policy: torch.Tensor,
               judge: Callable[[str], list[StepResult]]) -> tuple[list[float], list[int]]:
    """One output's checked steps written by the policy: rewards (S,) and completion positions (S,) of their ends.

    ids, mask, policy: (T,); the text is decoded over `mask`, a step's end is its last token where `policy` is set;
    `judge` turns the text into steps. The terminal step ends on the output's last policy token (EOS when it
    finished); an output without policy tokens has no steps.
    """
    positions = mask.bool().nonzero().squeeze(-1).tolist()
    text, spans = token_spans(tokenizer, ids[positions].tolist())
    chosen = policy.bool()[positions].tolist()
    steps = [s for s in judge(text) if s.checked]  # unchecked steps carry no process signal
    lines = [s for s in steps if s.kind != "terminal"]
    rewards, ends = [], []
    for step, last in zip(lines, token_ends([s.char_end for s in lines], spans), strict=True):
        k = _last_policy_token(spans, chosen, last, step.char_start)
        if k is not None:  # None: the step lies in an interpreter output block, not the model's reasoning
            rewards.append(step.reward)
            ends.append(positions[k])
    last_chosen = [positions[k] for k, c in enumerate(chosen) if c]
    for step in steps:
        if step.kind == "terminal" and last_chosen:
            rewards.append(step.reward)
            ends.append(last_chosen[-1])
    return rewards, ends


def step_rewards(tokenizer, completion_ids: torch.Tensor, completion_mask: torch.Tensor, golds: list[str],
                 loss_mask: torch.Tensor | None = None, *, quantities: list[list[str]] | None = None,
                 scores: Scores | None = None, mode: str = "cot", weights: tuple[float, float] | None = None):
    """Process rewards of each output's reasoning steps, placed at the steps' last tokens.

    completion_ids, completion_mask: (N, T) as in `Rollout`; the steps are read from the text decoded over
    completion_mask (tool output included, so lines keep their shape). loss_mask: (N, T) 1 on the tokens the policy
    chose (None: all of completion_mask); a step with no such token (a line of a tool's ```output block) is dropped,
    and a step ends on its last policy token.

    With `scores` (the Scorer's accuracy and format of each output, (N,)): the steps of `dsmath.rewards.solution.
    solution_steps` in `mode` (cot | pot | tool), judged against each row's reference quantities (`quantities`, (N,)
    lists; None: none known, truth-only), and a terminal step on each output's last policy token rewarded
    ``terminal_reward(accuracy, format, *weights)`` (weights: params rewards.accuracy_weight and format_weight; None:
    their defaults). Without `scores`: the truth-only `verify_steps`, the answer line checked against `golds` (N,)
    and no terminal step (quantities must then be None).

    Returns (rewards (N, S) float, ends (N, S) long completion positions in 0..T-1 of each step's last token,
    step_mask (N, S) bool, which steps exist), S = most checked steps in any output (at least 1).
    """
    n = len(completion_ids)
    if scores is None:
        if quantities is not None:
            raise ValueError("step_rewards: quantities need scores (the terminal step's accuracy and format)")
        judges = [partial(verify_steps, gold=gold) for gold in golds]
    else:
        aw, fw = weights if weights is not None else (Rewards().accuracy_weight, Rewards().format_weight)
        quantities = quantities if quantities is not None else [[] for _ in range(n)]
        if not len(quantities) == len(scores.accuracy) == len(scores.format) == n:
            raise ValueError(f"step_rewards: {n} outputs but {len(quantities)} quantity lists and "
                             f"{len(scores.accuracy)} scores")
        outcomes = [terminal_reward(float(a), float(f), aw, fw)
                    for a, f in zip(scores.accuracy.tolist(), scores.format.tolist(), strict=True)]
        judges = [partial(solution_steps, quantities=q, mode=mode, outcome=o)
                  for q, o in zip(quantities, outcomes, strict=True)]
    policy = (completion_mask if loss_mask is None else loss_mask).cpu()
    rows = [_row_steps(tokenizer, ids, m, p, judge)
            for ids, m, p, judge in zip(completion_ids.cpu(), completion_mask.cpu(), policy, judges, strict=True)]
    s = max([len(r) for r, _ in rows] + [1])
    rewards, ends, step_mask = torch.zeros(n, s), torch.zeros(n, s, dtype=torch.long), torch.zeros(n, s, dtype=bool)
    for i, (r, e) in enumerate(rows):
        rewards[i, : len(r)] = torch.tensor(r, dtype=torch.float32)
        ends[i, : len(e)] = torch.tensor(e, dtype=torch.long)
        step_mask[i, : len(r)] = True
    return rewards, ends, step_mask

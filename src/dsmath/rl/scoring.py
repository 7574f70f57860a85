"""From a rollout to what the policy update needs: decoded completions, rule-based rewards, per-step rewards.

Rewards come from the reward layer (`dsmath.rewards`): a scalar per output for outcome supervision, and, for process
supervision (DeepSeekMath sec. 4.1.3), one reward per reasoning step placed at the step's last token.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from dsmath.rewards import build_reward, combined_reward, token_ends, verify_steps


@dataclass
class Scores:
    """Rewards of N = B*G outputs. texts: (N,) decoded completions (tool outputs included)."""

    texts: list[str]
    rewards: torch.Tensor  # (N,) the training reward (params rl.reward)
    accuracy: torch.Tensor  # (N,) 1.0 when the final answer is equivalent to the gold
    format: torch.Tensor  # (N,) 1.0 when the output has the expected form


def decode_completions(tokenizer, completion_ids: torch.Tensor, mask: torch.Tensor) -> list[str]:
    """(N, T) ids and mask -> N strings (special tokens such as EOS dropped)."""
    return [tokenizer.decode(ids[m.bool()].tolist(), skip_special_tokens=True)
            for ids, m in zip(completion_ids, mask, strict=True)]


class Scorer:
    """The reward of one mode (params rl.reward: accuracy | format | combined), with accuracy and format kept apart
    for the metrics. Each component runs once per output (programs run once in the sandbox)."""

    def __init__(self, reward: str, mode: str, rewards_cfg, sandbox_cfg):
        self.accuracy = build_reward("accuracy", mode, rewards_cfg, sandbox_cfg)
        self.format = build_reward("format", mode, rewards_cfg, sandbox_cfg)
        self.reward_name = reward
        self.weights = (rewards_cfg.accuracy_weight, rewards_cfg.format_weight)

    def __call__(self, texts: list[str], golds: list[str]) -> Scores:
        acc = self.accuracy(texts, golds)
        fmt = self.format(texts, golds)
        train = {"accuracy": acc, "format": fmt}.get(self.reward_name)
        if train is None:  # combined: the reward layer's weighting of the two components computed above
            train = combined_reward(texts, golds, accuracy=lambda *_: acc, fmt=lambda *_: fmt,
                                    accuracy_weight=self.weights[0], format_weight=self.weights[1])
        f = lambda x: torch.tensor(x, dtype=torch.float32)  # noqa: E731
        return Scores(texts, f(train), f(acc), f(fmt))


def token_char_ends(tokenizer, ids: list[int]) -> list[tuple[int, int]]:
    """(start, end) character span of each token in the decoded text (cumulative per-token decoding)."""
    spans, pos = [], 0
    for piece in tokenizer.batch_decode([[i] for i in ids], skip_special_tokens=False):
        spans.append((pos, pos + len(piece)))
        pos += len(piece)
    return spans


def step_rewards(tokenizer, completion_ids: torch.Tensor, mask: torch.Tensor, golds: list[str]):
    """Process rewards of each output's steps, aligned to tokens.

    Returns (rewards (N, S), ends (N, S) long token index of each step's last token, step_mask (N, S) bool),
    S = most checked steps in any output. Steps are lines; only checkable ones count (an equation scores +1 right,
    -1 wrong; the answer line is checked against the gold answer; see `dsmath.rewards.steps`).
    """
    rows = []
    for ids, m, gold in zip(completion_ids, mask, golds, strict=True):
        toks = ids[m.bool()].tolist()
        spans = token_char_ends(tokenizer, toks)
        text = "".join(tokenizer.batch_decode([[i] for i in toks], skip_special_tokens=False))
        steps = [s for s in verify_steps(text, gold) if s.checked]  # unchecked steps carry no process signal
        ends = token_ends([s.char_end for s in steps], spans)
        rows.append(([s.reward for s in steps], ends))
    s = max([len(r) for r, _ in rows] + [1])
    n = len(rows)
    rewards, ends, step_mask = torch.zeros(n, s), torch.zeros(n, s, dtype=torch.long), torch.zeros(n, s, dtype=bool)
    for i, (r, e) in enumerate(rows):
        rewards[i, : len(r)] = torch.tensor(r, dtype=torch.float32)
        ends[i, : len(e)] = torch.tensor(e, dtype=torch.long)
        step_mask[i, : len(r)] = True
    return rewards, ends, step_mask

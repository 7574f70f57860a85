"""The PPO baseline of DeepSeekMath (eq. 1-2): a learned value model (critic) of the policy's size, per-token KL
penalty in the reward, and generalised advantage estimation (GAE).

Pure functions on tensors plus a small value model wrapper; the shared trainer (`dsmath.rl.trainer`) calls them when
`rl.algorithm == "ppo"`.
"""

from __future__ import annotations

import torch
from torch import nn


def last_token_index(mask: torch.Tensor) -> torch.Tensor:
    """(N, T) mask -> (N,) position of the last 1 in each row (0 for an empty row).

    Not ``mask.sum() - 1``: in tool mode the policy-token mask has a hole where the interpreter's output sits, so
    the count of ones is not the position of the last one.
    """
    pos = torch.arange(1, mask.shape[1] + 1, device=mask.device)
    return ((mask != 0) * pos).amax(dim=1).clamp(min=1) - 1


def kl_penalised_rewards(scores: torch.Tensor, logprobs: torch.Tensor, ref_logprobs: torch.Tensor,
                         mask: torch.Tensor, kl_coef: float) -> torch.Tensor:
    """DeepSeekMath eq. 2: r_t = r_phi(q, o_<=t) 1[t = last] - beta * log(pi_theta(o_t) / pi_ref(o_t)).

    scores: (N,) outcome reward of each output; logprobs, ref_logprobs, mask: (N, T), mask 1 on the policy's own
    tokens (tool-output holes and padding 0). The score goes on the last policy token. Returns (N, T), 0 off-mask.
    """
    m = mask.to(logprobs.dtype)
    rewards = -kl_coef * (logprobs - ref_logprobs) * m
    has = m.sum(dim=1) > 0
    rows = has.nonzero().squeeze(-1)
    rewards[rows, last_token_index(mask)[rows]] += scores[rows].to(rewards.dtype)
    return rewards


def gae(rewards: torch.Tensor, values: torch.Tensor, mask: torch.Tensor, gamma: float, lam: float):
    """Generalised advantage estimation over the policy tokens of each row; returns (advantages, returns), (N, T).

    The recursion runs over the masked-in positions only, as if the row were compacted: a masked-out position
    (padding, or a tool-output hole in the middle of the row) neither resets nor advances it, so the value and the
    advantage of the first policy token after a hole carry back to the token before it. With t+1 the next policy
    token: delta_t = r_t + gamma * V_{t+1} - V_t (V after the last policy token is 0);
    A_t = delta_t + gamma * lam * A_{t+1}; returns_t = A_t + V_t. Off-mask positions are 0.
    """
    m = mask.to(values.dtype)
    on = mask != 0
    n, t = rewards.shape
    adv = torch.zeros_like(rewards)
    next_value = torch.zeros(n, dtype=values.dtype, device=values.device)
    next_adv = torch.zeros_like(next_value)
    for i in reversed(range(t)):
        delta = rewards[:, i] + gamma * next_value - values[:, i]
        a = delta + gamma * lam * next_adv
        adv[:, i] = a * m[:, i]
        next_adv = torch.where(on[:, i], a, next_adv)
        next_value = torch.where(on[:, i], values[:, i], next_value)
    return adv, (adv + values) * m


def whiten(x: torch.Tensor, mask: torch.Tensor, eps: float = 1e-8, reduce=None) -> torch.Tensor:
    """(x - mean) / std over masked entries (PPO's advantage normalisation); off-mask entries become 0.

    reduce: sums a list of floats over the ranks of a data-parallel batch (None: this batch is the whole batch);
    the moments are then those of every rank's entries."""
    m = mask.to(x.dtype)
    if reduce is None:
        n = m.sum().clamp(min=1)
        mean = (x * m).sum() / n
        var = ((x - mean) ** 2 * m).sum() / n
        return (x - mean) / (var.sqrt() + eps) * m
    count, total = reduce([float(m.sum()), float((x * m).sum())])
    mean = total / max(count, 1.0)
    var = reduce([float(((x - mean) ** 2 * m).sum())])[0] / max(count, 1.0)
    return (x - mean) / (var**0.5 + eps) * m


def value_loss(values: torch.Tensor, old_values: torch.Tensor, returns: torch.Tensor, mask: torch.Tensor,
               clip: float) -> torch.Tensor:
    """Clipped value loss 0.5 * max((V - R)^2, (clip(V, V_old +- c) - R)^2), mean over masked tokens."""
    clipped = old_values + (values - old_values).clamp(-clip, clip)
    loss = torch.maximum((values - returns) ** 2, (clipped - returns) ** 2)
    m = mask.to(values.dtype)
    return 0.5 * (loss * m).sum() / m.sum().clamp(min=1)


class ValueModel(nn.Module):
    """Critic of the policy's size: a copy of the policy's transformer body with a scalar head per token."""

    def __init__(self, causal_lm):
        super().__init__()
        self.body = causal_lm.model  # Llama-style: .model is the decoder stack, .lm_head is dropped
        self.head = nn.Linear(causal_lm.config.hidden_size, 1)
        nn.init.zeros_(self.head.weight)
        nn.init.zeros_(self.head.bias)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, position_ids: torch.Tensor):
        """(N, L) ids -> (N, L) values."""
        h = self.body(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids).last_hidden_state
        return self.head(h).squeeze(-1)

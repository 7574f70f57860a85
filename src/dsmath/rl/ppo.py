"""The PPO baseline of DeepSeekMath (eq. 1-2): a learned value model (critic) of the policy's size, per-token KL
penalty in the reward, and generalised advantage estimation (GAE).

Pure functions on tensors plus a small value model wrapper; the shared trainer (`dsmath.rl.trainer`) calls them when
`rl.algorithm == "ppo"`.
"""

from __future__ import annotations

import torch
from torch import nn


def kl_penalised_rewards(scores: torch.Tensor, logprobs: torch.Tensor, ref_logprobs: torch.Tensor,
                         mask: torch.Tensor, kl_coef: float) -> torch.Tensor:
    """DeepSeekMath eq. 2: r_t = r_phi(q, o_<=t) 1[t = last] - beta * log(pi_theta(o_t) / pi_ref(o_t)).

    scores: (N,) outcome reward of each output; logprobs, ref_logprobs, mask: (N, T). Returns (N, T), zero off-mask.
    """
    m = mask.to(logprobs.dtype)
    rewards = -kl_coef * (logprobs - ref_logprobs) * m
    last = (m.sum(dim=1).long() - 1).clamp(min=0)  # completions are right-padded: last valid index
    has = m.sum(dim=1) > 0
    rewards[has, last[has]] += scores[has].to(rewards.dtype)
    return rewards


def gae(rewards: torch.Tensor, values: torch.Tensor, mask: torch.Tensor, gamma: float, lam: float):
    """Generalised advantage estimation over right-padded sequences; returns (advantages, returns), both (N, T).

    delta_t = r_t + gamma * V_{t+1} - V_t (V beyond the last valid token is 0);
    A_t = delta_t + gamma * lam * A_{t+1}; returns_t = A_t + V_t. Off-mask positions are 0.
    """
    m = mask.to(values.dtype)
    n, t = rewards.shape
    adv = torch.zeros_like(rewards)
    next_value = torch.zeros(n, dtype=values.dtype, device=values.device)
    next_adv = torch.zeros_like(next_value)
    for i in reversed(range(t)):
        delta = rewards[:, i] + gamma * next_value - values[:, i]
        next_adv = (delta + gamma * lam * next_adv) * m[:, i]
        adv[:, i] = next_adv
        next_value = values[:, i] * m[:, i]
    return adv, (adv + values) * m


def whiten(x: torch.Tensor, mask: torch.Tensor, eps: float = 1e-8) -> torch.Tensor:
    """(x - mean) / std over masked entries (PPO's advantage normalisation); off-mask entries become 0."""
    m = mask.to(x.dtype)
    n = m.sum().clamp(min=1)
    mean = (x * m).sum() / n
    var = ((x - mean) ** 2 * m).sum() / n
    return (x - mean) / (var.sqrt() + eps) * m


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

"""Advantage estimators: the group-relative ones of DeepSeekMath's GRPO (sec. 4.1.2 outcome, 4.1.3 process), RLOO,
PPO's GAE and RFT's coefficient, as tensor functions and as the estimators the trainer calls.

An estimator takes the batch's :class:`Signals` (tensors) and the ``rl`` params section and returns the (N, T)
per-token advantages and a dict of extras (PPO: the values and returns its critic trains on). GRPO's are chosen by
``rl.advantage`` in :data:`dsmath.rl.registry.ADVANTAGES`; the other algorithms name theirs in
:mod:`dsmath.rl.algorithms`. Groups are laid out consecutively: rows ``g*G .. g*G+G-1`` of a ``(B*G, ...)`` tensor are
the G sampled outputs of question g.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property

import torch

from dsmath.rl import ppo as ppo_math


def equal_reward_groups(rewards: torch.Tensor, group_size: int) -> torch.Tensor:
    """(B*G,) rewards -> (B,) bool: every output of the group got exactly the same reward (no learning signal).

    An exact equality test, not ``std == 0``: the float std of 8 x 0.1 is ~8e-9, not 0.
    """
    if rewards.dim() != 1 or rewards.numel() % group_size:
        raise ValueError(f"rewards: expected shape (B*G,) with G={group_size}, got {tuple(rewards.shape)}")
    r = rewards.view(-1, group_size)
    return (r == r[:, :1]).all(dim=1)


def group_advantages(rewards: torch.Tensor, group_size: int, scale: bool = True, eps: float = 1e-6) -> torch.Tensor:
    """Outcome supervision: ``A_i = (r_i - mean(r)) / (std(r) + eps)`` within each group (DeepSeekMath eq. in 4.1.2).

    rewards: (B*G,) one scalar reward per output. Returns (B*G,). ``std`` is the sample std (Bessel-corrected, as
    ``torch.std`` and the paper's reference code); ``scale=False`` gives Dr. GRPO's unscaled ``r_i - mean(r)``.
    A group whose rewards are all equal gets advantage 0 (not NaN): it carries no learning signal.
    """
    if rewards.dim() != 1 or rewards.numel() % group_size:
        raise ValueError(f"rewards: expected shape (B*G,) with G={group_size}, got {tuple(rewards.shape)}")
    r = rewards.view(-1, group_size).to(torch.float32)
    centred = r - r.mean(dim=1, keepdim=True)
    if scale:
        centred = centred / (r.std(dim=1, keepdim=True) + eps)
    # exactly 0 for equal rewards: the float mean of G copies of 0.1 is not 0.1, and the rounding residue divided
    # by (0 + eps) would be a spurious advantage (and keep the group from being dropped as signal-free)
    return centred.masked_fill(equal_reward_groups(rewards, group_size)[:, None], 0.0).reshape(-1)


def leave_one_out_advantages(rewards: torch.Tensor, group_size: int) -> torch.Tensor:
    """RLOO (Ahmadian et al., 2024): ``A_i = r_i - mean_{j != i} r_j`` within each group, = G/(G-1) (r_i - mean(r)).

    rewards: (B*G,). Returns (B*G,); exactly 0 for a group of equal rewards.
    """
    if group_size < 2:
        raise ValueError(f"leave-one-out needs group_size >= 2 (got {group_size})")
    r = rewards.view(-1, group_size).to(torch.float32)
    others = (r.sum(dim=1, keepdim=True) - r) / (group_size - 1)
    return (r - others).masked_fill(equal_reward_groups(rewards, group_size)[:, None], 0.0).reshape(-1)


def overlong_penalty(lengths: torch.Tensor, max_tokens: int, buffer: int, factor: float = 1.0) -> torch.Tensor:
    """DAPO's soft overlong punishment (Yu et al., 2025, eq. 13), added to the reward of each output.

    lengths: (N,) output lengths in tokens. 0 up to ``max_tokens - buffer``; then falls linearly to ``-factor`` at
    ``max_tokens`` (``((max_tokens - buffer) - length) / buffer * factor``); ``-factor`` beyond. buffer 0: no penalty.
    """
    if buffer == 0:
        return torch.zeros_like(lengths, dtype=torch.float32)
    if not 0 < buffer < max_tokens:
        raise ValueError(f"overlong buffer must be in (0, max_tokens) (got {buffer}, max_tokens {max_tokens})")
    over = (lengths.to(torch.float32) - (max_tokens - buffer)).clamp(min=0)
    return -factor * (over / buffer).clamp(max=1.0)


def process_advantages(step_rewards: torch.Tensor, step_ends: torch.Tensor, step_mask: torch.Tensor,
                       group_size: int, seq_len: int, eps: float = 1e-6) -> torch.Tensor:
    """Process supervision (sec. 4.1.3): normalise every step reward over all steps of the group's G outputs, then
    give token t of output i the sum of the normalised rewards of the steps of output i that end at or after t.

    step_rewards: (B*G, S) reward of each reasoning step (padded); step_ends: (B*G, S) long, index of the last
    token of each step (0 <= end < seq_len); step_mask: (B*G, S) bool, which steps exist. Returns (B*G, seq_len).
    A group whose step rewards are all equal gets 0 everywhere; tokens after the last step get 0.
    """
    n, s = step_rewards.shape
    r = step_rewards.to(torch.float32).view(-1, group_size * s)
    m = step_mask.view(-1, group_size * s).to(torch.float32)
    count = m.sum(dim=1, keepdim=True).clamp(min=1)
    mean = (r * m).sum(dim=1, keepdim=True) / count
    var = ((r - mean) ** 2 * m).sum(dim=1, keepdim=True) / (count - 1).clamp(min=1)
    norm = (r - mean) / (var.sqrt() + eps) * m
    big = torch.finfo(torch.float32).max
    high = r.masked_fill(m == 0, -big).amax(dim=1, keepdim=True)
    spread = high - r.masked_fill(m == 0, big).amin(dim=1, keepdim=True)
    norm = norm.masked_fill(spread <= 0, 0.0).view(n, s)  # all steps equal (or none): exactly 0, as outcome
    # scatter each step's normalised reward at its end token, then a reversed cumulative sum over time
    at_end = torch.zeros(n, seq_len, dtype=torch.float32, device=step_rewards.device)
    at_end.scatter_add_(1, step_ends.clamp(0, seq_len - 1).long(), norm)
    return at_end.flip(1).cumsum(1).flip(1)


# ----------------------------------------------------------------------------------------------------------------
# the estimators: Signals and the rl section in, (N, T) advantages and extras out


@dataclass(eq=False)
class Signals:
    """What an estimator reads of one batch of N = B*G outputs (group by group) and T completion positions.

    ``steps`` (process supervision's step rewards) and ``values`` (the critic's, for an algorithm with a critic) are
    computed when an estimator first reads them. ``all_sum`` sums a list of floats over the ranks of a data-parallel
    batch (None in one process), for statistics of the whole batch (PPO's whitening).
    """

    rewards: torch.Tensor  # (N,) the training reward of each output
    accuracy: torch.Tensor  # (N,) 1.0 where the final answer is right
    mask: torch.Tensor  # (N, T) 1 on the policy's own tokens (0 on padding and tool-output holes)
    logprobs: torch.Tensor  # (N, T) log pi_old of the sampled tokens
    ref_logprobs: torch.Tensor  # (N, T) log pi_ref of the same tokens
    steps_of: Callable[[], tuple[torch.Tensor, torch.Tensor, torch.Tensor]] | None = None
    values_of: Callable[[], torch.Tensor] | None = None
    all_sum: Callable[[list[float]], list[float]] | None = None

    @cached_property
    def steps(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(rewards, ends, mask), each (N, S): every reasoning step's reward, last token and existence."""
        if self.steps_of is None:
            raise ValueError("these signals carry no step rewards")
        return self.steps_of()

    @cached_property
    def values(self) -> torch.Tensor:
        """(N, T) the critic's value of the state before each completion token."""
        if self.values_of is None:
            raise ValueError("these signals carry no values: the algorithm has no critic")
        return self.values_of()


Estimator = Callable[[Signals, object], tuple[torch.Tensor, dict]]


def per_token(a: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """(N,) one advantage per output -> (N, T), the same on each of its tokens."""
    return a[:, None].expand(mask.shape)


def outcome(x: Signals, cfg) -> tuple[torch.Tensor, dict]:
    """GRPO outcome supervision (sec. 4.1.2): A_{i,t} = (r_i - mean(r)) / std(r) over output i's group, every t."""
    return per_token(group_advantages(x.rewards, cfg.group_size, scale=cfg.scale_rewards), x.mask), {}


def process(x: Signals, cfg) -> tuple[torch.Tensor, dict]:
    """GRPO process supervision (sec. 4.1.3): A_{i,t} = sum over the steps j of output i ending at or after t of
    (r_j - mean) / std, the moments over every step of the group."""
    rewards, ends, steps = x.steps
    return process_advantages(rewards, ends, steps, cfg.group_size, x.mask.shape[1]), {}


def rloo(x: Signals, cfg) -> tuple[torch.Tensor, dict]:
    """RLOO: A_{i,t} = r_i - mean_{j != i} r_j over output i's group, every t."""
    return per_token(leave_one_out_advantages(x.rewards, cfg.group_size), x.mask), {}


def gae_whitened(x: Signals, cfg) -> tuple[torch.Tensor, dict]:
    """PPO (eq. 1-2): token rewards r_t = score 1[t = last] - beta log(pi_old / pi_ref), GAE with the critic's values,
    whitened over the batch; extras: the values and the returns the critic trains on."""
    c, values = cfg.ppo, x.values
    rewards = ppo_math.kl_penalised_rewards(x.rewards, x.logprobs, x.ref_logprobs, x.mask, c.kl_coef)
    adv, returns = ppo_math.gae(rewards, values, x.mask, c.gamma, c.lam)
    return ppo_math.whiten(adv, x.mask, reduce=x.all_sum), {"values": values, "returns": returns}


def correct_only(x: Signals, cfg) -> tuple[torch.Tensor, dict]:
    """(Online) RFT: gradient coefficient 1 on the tokens of correct outputs, 0 on the others."""
    return per_token(x.accuracy, x.mask), {}

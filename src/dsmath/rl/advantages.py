"""Advantage estimators of DeepSeekMath's GRPO (sec. 4.1.2 outcome, 4.1.3 process); the trainer picks one by
`rl.advantage` (`dsmath.rl.algorithms.GRPO_ADVANTAGES`).

All functions are tensor in / tensor out. Groups are laid out consecutively: rows ``g*G .. g*G+G-1`` of a ``(B*G, ...)``
tensor are the G sampled outputs of question g.
"""

from __future__ import annotations

import torch


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

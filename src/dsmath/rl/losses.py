"""GRPO / PPO policy loss (DeepSeekMath eq. 3): the loss variants, KL estimators and aggregations it picks by name.

Per token:  ratio = pi_theta / pi_old  (old = the snapshot that sampled the batch, NOT the reference),
            surrogate = min(ratio * A, clip(ratio, 1 - eps, 1 + eps) * A)   (the loss variant, rl.importance_ratio),
            loss_t = -(surrogate - beta * KL_t(pi_theta || pi_ref))          (the KL estimator, rl.kl),
and the per-token losses are aggregated over the completion mask (rl.aggregation). Each choice is a registry of
:mod:`dsmath.rl.registry` whose entries are the functions here.
"""

from __future__ import annotations

import torch

from dsmath.rl.registry import AGGREGATIONS, KL_ESTIMATORS, LOSSES

# ----------------------------------------------------------------------------------------------------------------
# KL estimators of KL(pi_theta || pi_ref) from samples o_t ~ pi_theta (Schulman, "Approximating KL divergence")


def kl_k1(logprobs: torch.Tensor, ref_logprobs: torch.Tensor) -> torch.Tensor:
    """k1 = log(pi_theta / pi_ref): unbiased, high variance, can be negative."""
    return logprobs - ref_logprobs


def kl_k2(logprobs: torch.Tensor, ref_logprobs: torch.Tensor) -> torch.Tensor:
    """k2 = 0.5 * log(pi_theta / pi_ref)^2: biased, low variance, >= 0."""
    return 0.5 * (logprobs - ref_logprobs) ** 2


def kl_k3(logprobs: torch.Tensor, ref_logprobs: torch.Tensor) -> torch.Tensor:
    """k3 = pi_ref/pi_theta - log(pi_ref/pi_theta) - 1 (DeepSeekMath eq. 4): unbiased and >= 0, 0 when equal."""
    log_ratio = (ref_logprobs - logprobs).clamp(-20.0, 20.0)  # guards exp() against overflow on outlier tokens
    return torch.exp(log_ratio) - log_ratio - 1.0


# ----------------------------------------------------------------------------------------------------------------
# aggregation of per-token values (N, T) under a mask (N, T) into one scalar


def seq_mean_token_mean(values: torch.Tensor, mask: torch.Tensor, *, rows: float | None = None,
                        tokens: float | None = None, max_tokens: int | None = None) -> torch.Tensor:
    """DeepSeekMath / GRPO: mean over each output's tokens, then mean over outputs (1/G sum_i 1/|o_i| sum_t).

    rows: the number of outputs the outer mean divides by (default: the rows of `values` that have tokens); the
    trainer passes the whole batch's count when it leaves zero-advantage rows out of the forward pass.
    """
    m = mask.to(values.dtype)
    per_seq = (values * m).sum(-1) / m.sum(-1).clamp(min=1)
    has_tokens = (m.sum(-1) > 0).to(values.dtype)
    denom = has_tokens.sum().clamp(min=1) if rows is None else max(rows, 1)
    return (per_seq * has_tokens).sum() / denom


def token_mean(values: torch.Tensor, mask: torch.Tensor, *, rows: float | None = None,
               tokens: float | None = None, max_tokens: int | None = None) -> torch.Tensor:
    """DAPO: mean over all completion tokens of the batch (long outputs weigh in proportion to their length).

    tokens: the token count to divide by (default: the mask's sum).
    """
    m = mask.to(values.dtype)
    denom = m.sum().clamp(min=1) if tokens is None else max(tokens, 1)
    return (values * m).sum() / denom


def seq_mean_token_sum_norm(values: torch.Tensor, mask: torch.Tensor, *, rows: float | None = None,
                            tokens: float | None = None, max_tokens: int | None = None) -> torch.Tensor:
    """Dr. GRPO: each output's token sum divided by a constant, the generation budget `max_tokens` (not the padded
    width, which changes from batch to batch), then the mean over outputs (all rows, or `rows`)."""
    if max_tokens is None or max_tokens < 1:
        raise ValueError("seq-mean-token-sum-norm needs max_tokens >= 1 (the generation budget, rl.max_new_tokens)")
    m = mask.to(values.dtype)
    denom = values.shape[0] if rows is None else rows
    return (values * m).sum() / max_tokens / max(denom, 1)


# ----------------------------------------------------------------------------------------------------------------
# loss variants: (logprobs, old_logprobs, advantages, mask) (N, T) -> per-token loss and ratio (N, T), by name


def clipped_surrogate(ratio: torch.Tensor, advantages: torch.Tensor, clip_low: float, clip_high: float):
    """-min(ratio * A, clip(ratio, 1 - clip_low, 1 + clip_high) * A), per token (PPO's pessimistic bound)."""
    unclipped = ratio * advantages
    clipped = ratio.clamp(1.0 - clip_low, 1.0 + clip_high) * advantages
    return -torch.minimum(unclipped, clipped)


def token_clip(logprobs: torch.Tensor, old_logprobs: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor, *,
               clip_low: float, clip_high: float) -> tuple[torch.Tensor, torch.Tensor]:
    """PPO / GRPO (eq. 3): one ratio pi_theta / pi_old per token, clipped token by token."""
    ratio = torch.exp(logprobs - old_logprobs)
    return clipped_surrogate(ratio, advantages, clip_low, clip_high), ratio


def sequence_ratio(logprobs: torch.Tensor, old_logprobs: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """(N, T) each output's length-normalised sequence ratio ``exp(sum_t m_t (logp_t - old_t) / sum_t m_t)``,
    repeated over its tokens (GSPO, Zheng et al., 2025)."""
    m = mask.to(logprobs.dtype)
    seq = ((logprobs - old_logprobs) * m).sum(-1) / m.sum(-1).clamp(min=1)
    return torch.exp(seq)[:, None].expand_as(logprobs)


def sequence_clip(logprobs: torch.Tensor, old_logprobs: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor,
                  *, clip_low: float, clip_high: float) -> tuple[torch.Tensor, torch.Tensor]:
    """GSPO: one ratio per output (:func:`sequence_ratio`), clipped as a whole and shared by its tokens."""
    ratio = sequence_ratio(logprobs, old_logprobs, mask)
    return clipped_surrogate(ratio, advantages, clip_low, clip_high), ratio


# ----------------------------------------------------------------------------------------------------------------


def policy_loss(logprobs: torch.Tensor, old_logprobs: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor, *,
                clip_eps: float, ref_logprobs: torch.Tensor | None = None, beta: float = 0.0, kl: str = "k3",
                aggregation: str = "seq-mean-token-mean", clip_eps_high: float | None = None,
                max_tokens: int | None = None, rows: float | None = None, tokens: float | None = None,
                importance_ratio: str = "token"):
    """Clipped surrogate with an in-loss KL penalty (DeepSeekMath eq. 3); returns (loss, stats).

    logprobs, old_logprobs, ref_logprobs: (N, T) log-probs of the sampled tokens under the current, old and reference
    policies (N = B*G outputs); advantages: (N, T), or (N,) broadcast over tokens; mask: (N, T) 1 on completion
    tokens. ``clip_eps_high`` (DAPO's clip-higher) defaults to ``clip_eps``. max_tokens: the generation budget, the
    constant normaliser of ``seq-mean-token-sum-norm``; rows / tokens: denominators of the aggregation when the
    batch is a subset of the objective's (see the aggregation functions; default: this batch's own counts).
    importance_ratio: the loss variant (``LOSSES``): ``token`` (PPO / GRPO: one ratio per token) or ``sequence``
    (GSPO: one ratio per output, ``exp(mean_t log(pi_theta / pi_old))`` over its masked tokens, clipped as a whole).
    stats: kl (aggregated like the loss; 0 without a reference), clip_frac_low / clip_frac_high (fraction of tokens
    where the clipped branch is active with A < 0 / A > 0), clip_frac, ratio_mean/min/max over masked tokens.
    """
    if advantages.dim() == 1:
        advantages = advantages[:, None].expand_as(logprobs)
    agg = AGGREGATIONS[aggregation]
    high = clip_eps if clip_eps_high is None else clip_eps_high
    per_token, ratio = LOSSES[importance_ratio](logprobs, old_logprobs, advantages, mask, clip_low=clip_eps,
                                                clip_high=high)
    kl_tokens = torch.zeros_like(per_token)
    if ref_logprobs is not None:
        kl_tokens = KL_ESTIMATORS[kl](logprobs, ref_logprobs)
        if beta != 0.0:
            per_token = per_token + beta * kl_tokens
    norm = {"rows": rows, "tokens": tokens, "max_tokens": max_tokens}
    loss = agg(per_token, mask, **norm)
    return loss, _stats(ratio.detach(), advantages, mask, clip_eps, high, agg(kl_tokens.detach(), mask, **norm))


def _stats(ratio, advantages, mask, low, high, kl) -> dict[str, float]:
    m = mask.bool()
    n = m.sum().clamp(min=1)
    clip_low = ((ratio < 1.0 - low) & (advantages < 0) & m).sum() / n
    clip_high = ((ratio > 1.0 + high) & (advantages > 0) & m).sum() / n
    r = ratio[m] if m.any() else torch.ones(1)
    return {
        "kl": float(kl),
        "clip_frac_low": float(clip_low),
        "clip_frac_high": float(clip_high),
        "clip_frac": float(clip_low + clip_high),
        "ratio_mean": float(r.mean()),
        "ratio_min": float(r.min()),
        "ratio_max": float(r.max()),
    }

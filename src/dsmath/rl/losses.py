"""GRPO / PPO policy loss (DeepSeekMath eq. 3), KL estimators and loss aggregation, chosen by name.

Per token:  ratio = pi_theta / pi_old  (old = the snapshot that sampled the batch, NOT the reference),
            surrogate = min(ratio * A, clip(ratio, 1 - eps, 1 + eps) * A),
            loss_t = -(surrogate - beta * KL_t(pi_theta || pi_ref)),
and the per-token losses are aggregated over the completion mask by the named rule.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

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


KL_ESTIMATORS: dict[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = {"k1": kl_k1, "k2": kl_k2, "k3": kl_k3}

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


AGGREGATIONS: dict[str, Callable[..., torch.Tensor]] = {
    "seq-mean-token-mean": seq_mean_token_mean,
    "token-mean": token_mean,
    "seq-mean-token-sum-norm": seq_mean_token_sum_norm,
}


def _pick(table: dict, kind: str, name: str):
    if name not in table:
        raise ValueError(f"unknown {kind} {name!r}; valid: {', '.join(table)}")
    return table[name]


# ----------------------------------------------------------------------------------------------------------------


def policy_loss(logprobs: torch.Tensor, old_logprobs: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor, *,
                clip_eps: float, ref_logprobs: torch.Tensor | None = None, beta: float = 0.0, kl: str = "k3",
                aggregation: str = "seq-mean-token-mean", clip_eps_high: float | None = None,
                max_tokens: int | None = None, rows: float | None = None, tokens: float | None = None,
                ratio_level: str = "token"):
    """Clipped surrogate with an in-loss KL penalty (DeepSeekMath eq. 3); returns (loss, stats).

    logprobs, old_logprobs, ref_logprobs: (N, T) log-probs of the sampled tokens under the current, old and reference
    policies (N = B*G outputs); advantages: (N, T), or (N,) broadcast over tokens; mask: (N, T) 1 on completion
    tokens. ``clip_eps_high`` (DAPO's clip-higher) defaults to ``clip_eps``. max_tokens: the generation budget, the
    constant normaliser of ``seq-mean-token-sum-norm``; rows / tokens: denominators of the aggregation when the
    batch is a subset of the objective's (see the aggregation functions; default: this batch's own counts).
    ratio_level: ``token`` (PPO / GRPO: one ratio per token) or ``sequence`` (GSPO, Zheng et al., 2025: one ratio per
    output, ``exp(mean_t log(pi_theta / pi_old))`` over its masked tokens, clipped as a whole and shared by its tokens).
    stats: kl (aggregated like the loss; 0 without a reference), clip_frac_low / clip_frac_high (fraction of tokens
    where the clipped branch is active with A < 0 / A > 0), clip_frac, ratio_mean/min/max over masked tokens.
    """
    if advantages.dim() == 1:
        advantages = advantages[:, None].expand_as(logprobs)
    agg = _pick(AGGREGATIONS, "aggregation", aggregation)
    high = clip_eps if clip_eps_high is None else clip_eps_high
    ratio = importance_ratio(logprobs, old_logprobs, mask, ratio_level)
    unclipped = ratio * advantages
    clipped = ratio.clamp(1.0 - clip_eps, 1.0 + high) * advantages
    per_token = -torch.minimum(unclipped, clipped)
    kl_tokens = torch.zeros_like(per_token)
    if ref_logprobs is not None and beta != 0.0:
        kl_tokens = _pick(KL_ESTIMATORS, "kl estimator", kl)(logprobs, ref_logprobs)
        per_token = per_token + beta * kl_tokens
    elif ref_logprobs is not None:
        kl_tokens = _pick(KL_ESTIMATORS, "kl estimator", kl)(logprobs, ref_logprobs).detach()
    norm = {"rows": rows, "tokens": tokens, "max_tokens": max_tokens}
    loss = agg(per_token, mask, **norm)
    return loss, _stats(ratio.detach(), advantages, mask, clip_eps, high, agg(kl_tokens.detach(), mask, **norm))


def importance_ratio(logprobs: torch.Tensor, old_logprobs: torch.Tensor, mask: torch.Tensor,
                     level: str = "token") -> torch.Tensor:
    """(N, T) pi_theta / pi_old per token (``token``), or each output's length-normalised sequence ratio
    ``exp(sum_t m_t (logp_t - old_t) / sum_t m_t)`` repeated over its tokens (``sequence``, GSPO)."""
    log_ratio = logprobs - old_logprobs
    if level == "token":
        return torch.exp(log_ratio)
    if level != "sequence":
        raise ValueError(f"unknown ratio level {level!r}; valid: token, sequence")
    m = mask.to(logprobs.dtype)
    seq = (log_ratio * m).sum(-1) / m.sum(-1).clamp(min=1)
    return torch.exp(seq)[:, None].expand_as(logprobs)


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

"""The metrics of one RL step (namespaced ``rl/...``), over the rows of every rank."""

from __future__ import annotations

import math

import torch

from dsmath.rl.advantages import equal_reward_groups
from dsmath.rl.batch import Batch
from dsmath.rl.ranks import gather_rows
from dsmath.rl.registry import KL_ESTIMATORS
from dsmath.rl.scoring import Scores
from dsmath.runtime.distributed import World


def step_metrics(cfg, world: World, batch: Batch, sampled: Scores, ref_lp: torch.Tensor, keep: torch.Tensor,
                 stats: dict[str, float], *, lr: float, skipped: int, times: tuple[float, float, float],
                 step_s: float) -> dict[str, float]:
    """Reward, accuracy, format and flat groups over every output sampled this step; the rest over the batch;
    across ranks, over the rows of every rank (times are this rank's: generate, score, train). NaN values are left
    out; `stats` are the update's (:meth:`RLTrainer.update`), empty when nothing was trained.

    rl/kl: the configured estimator between the sampling policy and the reference, token mean over every
    policy token of the batch (the same quantity on every step); rl/kl_loss: the in-loss value of the update.
    """
    ro, g = batch.rollout, cfg.group_size
    m = ro.loss_mask.float()
    kl = KL_ESTIMATORS[cfg.kl](ro.logprobs, ref_lp)
    per_row = gather_rows(world, {  # (rows,): what the metrics are computed from
        "rewards": sampled.rewards, "accuracy": sampled.accuracy, "format": sampled.format,
        "lengths": ro.completion_mask.sum(dim=1).float(), "kl": (kl * m).sum(-1), "logp": (ro.logprobs * m).sum(-1),
        "tokens": m.sum(-1), "tool_calls": ro.tool_calls.float(), "keep": keep.float(),
        "cut": (~ro.finished.bool()).float(),
    })
    r, lengths, tokens = per_row["rewards"], per_row["lengths"], per_row["tokens"].sum().clamp(min=1)
    out = {
        "reward_mean": float(r.mean()),
        "reward_std": float(r.std()),
        "accuracy": float(per_row["accuracy"].mean()),
        "format_rate": float(per_row["format"].mean()),
        "zero_std_groups": float(equal_reward_groups(r, g).float().mean()),
        "sampled_groups": float(len(r) // g),
        "kl": float(per_row["kl"].sum() / tokens),
        "entropy": float(-per_row["logp"].sum() / tokens),  # sampled-token estimate
        "response_len_mean": float(lengths.mean()),
        "response_len_max": float(lengths.max()),
        "truncated_rate": float(per_row["cut"].mean()),  # rows cut by max_new_tokens (no EOS)
        "trained_rows": float(per_row["keep"].sum()) if stats else 0.0,
        "lr": lr,
        "skipped_steps": float(skipped),
        "rollout_tokens_per_s": float(lengths.sum()) / max(times[0], 1e-9),
        "time_generate_s": times[0],
        "time_score_s": times[1],
        "time_train_s": times[2],
        "time_step_s": step_s + times[2],
        "tool_calls": float(per_row["tool_calls"].mean()),
    }
    return {f"rl/{k}": v for k, v in (out | stats).items() if not (isinstance(v, float) and math.isnan(v))}

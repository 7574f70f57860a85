"""The RL methods of DeepSeekMath's unified paradigm (sec. 5.2.1) as data: each algorithm is a data source, an
advantage rule and loss settings, looked up in ``ALGORITHMS`` by ``rl.algorithm`` (GRPO's advantage rule in
``GRPO_ADVANTAGES`` by ``rl.advantage``); and the batch one RL step trains on. The engine that runs them is
:class:`dsmath.rl.trainer.RLTrainer`; a rule reads the trainer's config, tokenizer, critic and world.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from dsmath.distributed import all_sum
from dsmath.generation.rollout import Rollout, concat_rollouts
from dsmath.rl import ppo as ppo_math
from dsmath.rl.advantages import group_advantages, leave_one_out_advantages, process_advantages
from dsmath.rl.scoring import Scores, step_rewards

if TYPE_CHECKING:
    from dsmath.rl.trainer import RLTrainer


@dataclass
class Batch:
    """One step's training data: B groups of G outputs, laid out group by group (rows g*G .. g*G+G-1)."""

    problems: list[dict]  # (B,) the questions
    rollout: Rollout  # (N = B*G rows)
    golds: list[str]  # (N,)
    scores: Scores  # (N,)

    def select_groups(self, groups: Sequence[int], g: int) -> Batch:
        rows = [i * g + j for i in groups for j in range(g)]
        sc = self.scores
        return Batch([self.problems[i] for i in groups], self.rollout.select(rows), [self.golds[r] for r in rows],
                     Scores([sc.texts[r] for r in rows], sc.rewards[rows], sc.accuracy[rows], sc.format[rows]))


def concat_batches(parts: Sequence[Batch], pad_token_id: int) -> Batch:
    cat = lambda xs: torch.cat(xs) if xs else torch.zeros(0)  # noqa: E731
    return Batch([p for b in parts for p in b.problems], concat_rollouts([b.rollout for b in parts], pad_token_id),
                 [x for b in parts for x in b.golds],
                 Scores([t for b in parts for t in b.scores.texts], cat([b.scores.rewards for b in parts]),
                        cat([b.scores.accuracy for b in parts]), cat([b.scores.format for b in parts])))


# ----------------------------------------------------------------------------------------------------------------
# the algorithms: each a data source + an advantage rule + loss settings (DeepSeekMath sec. 5.2.1, unified paradigm)

AdvantageRule = Callable[["RLTrainer", Batch, torch.Tensor], tuple[torch.Tensor, dict]]


def outcome_rule(tr: RLTrainer, b: Batch, ref_lp: torch.Tensor):
    """GRPO outcome supervision (sec. 4.1.2): the output's group-normalised reward on every token."""
    n, t = b.rollout.completion_ids.shape
    return group_advantages(b.scores.rewards, tr.cfg.group_size, scale=tr.cfg.scale_rewards)[:, None].expand(n, t), {}


def process_rule(tr: RLTrainer, b: Batch, ref_lp: torch.Tensor):
    """GRPO process supervision (sec. 4.1.3): group-normalised step rewards, summed from each token on."""
    ro = b.rollout
    r, ends, smask = step_rewards(tr.tok, ro.completion_ids, ro.completion_mask, b.golds, loss_mask=ro.loss_mask)
    return process_advantages(r, ends, smask, tr.cfg.group_size, ro.completion_ids.shape[1]), {}


def rloo_rule(tr: RLTrainer, b: Batch, ref_lp: torch.Tensor):
    """RLOO: the reward minus the mean reward of the group's other outputs, on every token."""
    n, t = b.rollout.completion_ids.shape
    return leave_one_out_advantages(b.scores.rewards, tr.cfg.group_size)[:, None].expand(n, t), {}


GRPO_ADVANTAGES: dict[str, AdvantageRule] = {"outcome": outcome_rule, "process": process_rule, "rloo": rloo_rule}


def grpo_rule(tr: RLTrainer, b: Batch, ref_lp: torch.Tensor):
    return GRPO_ADVANTAGES[tr.cfg.advantage](tr, b, ref_lp)


def ppo_rule(tr: RLTrainer, b: Batch, ref_lp: torch.Tensor):
    """PPO (eq. 1-2): KL-penalised token rewards (score on the last policy token), GAE with the critic, whitened."""
    ro, c = b.rollout, tr.cfg.ppo
    with torch.no_grad():
        values = tr.values(ro)
    rewards = ppo_math.kl_penalised_rewards(b.scores.rewards, ro.logprobs, ref_lp, ro.loss_mask, c.kl_coef)
    adv, returns = ppo_math.gae(rewards, values, ro.loss_mask, c.gamma, c.lam)
    reduce = (lambda xs: all_sum(tr.world, xs)) if tr.world.distributed else None  # noqa: E731
    return ppo_math.whiten(adv, ro.loss_mask, reduce=reduce), {"values": values, "returns": returns}


def rft_rule(tr: RLTrainer, b: Batch, ref_lp: torch.Tensor):
    """(Online) RFT: gradient coefficient 1 on correct outputs, 0 on the others."""
    n, t = b.rollout.completion_ids.shape
    return b.scores.accuracy[:, None].expand(n, t), {}


@dataclass(frozen=True)
class Algorithm:
    advantages: AdvantageRule
    kl_in_loss: bool  # beta * KL(pi_theta || pi_ref) in the loss (GRPO); PPO has it in the reward, RFT has none
    ratio: bool  # clipped ratio pi_theta / pi_old; False: the plain log-likelihood gradient (ratio fixed at 1)
    sample_from_reference: bool = False  # offline RFT: outputs of the frozen SFT model
    critic: bool = False  # a learned value model (PPO)


ALGORITHMS: dict[str, Algorithm] = {
    "grpo": Algorithm(grpo_rule, kl_in_loss=True, ratio=True),
    "ppo": Algorithm(ppo_rule, kl_in_loss=False, ratio=True, critic=True),
    "online_rft": Algorithm(rft_rule, kl_in_loss=False, ratio=False),
    "rft": Algorithm(rft_rule, kl_in_loss=False, ratio=False, sample_from_reference=True),
}

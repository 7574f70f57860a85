"""The batch one RL step trains on: B questions, G sampled outputs each, their rollout and scores."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from dsmath.generation.rollout import Rollout, concat_rollouts
from dsmath.rewards import reference_quantities
from dsmath.rl.advantages import equal_reward_groups
from dsmath.rl.scoring import Scores


@dataclass
class Batch:
    """One step's training data: B groups of G outputs, laid out group by group (rows g*G .. g*G+G-1)."""

    problems: list[dict]  # (B,) the questions
    rollout: Rollout  # (N = B*G rows)
    golds: list[str]  # (N,)
    scores: Scores  # (N,)

    def quantities(self) -> list[list[str]]:
        """(N,) each row's reference quantities (`dsmath.rewards.reference_quantities` of its question, row r of
        question r // G), for process rewards judged against the solution."""
        g = len(self.golds) // max(len(self.problems), 1)
        per_problem = [reference_quantities(p) for p in self.problems]
        return [q for q in per_problem for _ in range(g)]

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


def spread_first(rounds: Sequence[Batch], b: int, g: int, pad_token_id: int) -> Batch:
    """DAPO's dynamic sampling: the first `b` groups of the sampling `rounds` (in sampling order) whose rewards are
    not all equal, filled up with flat groups (in sampling order) when too few were found."""
    flat = [equal_reward_groups(r.scores.rewards, g) for r in rounds]
    pick = lambda r, groups: r.select_groups(groups.nonzero().squeeze(-1).tolist(), g)  # noqa: E731
    spread = [pick(r, ~f) for r, f in zip(rounds, flat, strict=True)]
    rest = [pick(r, f) for r, f in zip(rounds, flat, strict=True)]
    pool = concat_batches([x for x in spread + rest if x.problems], pad_token_id)
    return pool.select_groups(list(range(b)), g)

"""The cross-rank bookkeeping of a data-parallel RL step (:mod:`dsmath.runtime.distributed`), kept out of the trainer so
that
:meth:`dsmath.rl.trainer.RLTrainer.update` reads as the objective. In one process every helper is the plain thing
(one rank: its own counts, its own statistics).

Across ranks each minibatch is the union of every rank's share; the aggregation's denominators are that union's (the
objective's), and each rank's loss is multiplied by the world size, which the gradient *average* over ranks undoes,
so the averaged gradient is the one-process gradient up to floating-point summation order.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

import torch

from dsmath.runtime.distributed import World, all_sum, any_rank, gather_objects


@dataclass
class Minibatch:
    """This rank's share of one minibatch."""

    rows: torch.Tensor  # (M,) long: rows of the batch; one stand-in row when this rank has none this time
    weight: float  # 1.0, or 0.0 for the stand-in (it trains nothing but still joins the gradient all-reduce)
    norm: dict  # the aggregation's denominators (policy_loss's max_tokens, rows, tokens): the objective's
    scale: float  # what this rank's loss is multiplied by: weight x world size


def minibatches(world: World, cfg, rows: torch.Tensor, keep: torch.Tensor, mask: torch.Tensor, seed: int,
                step: int) -> Iterator[Minibatch]:
    """`cfg.mu` passes over the kept `rows` (this rank's), each shuffled by (seed, step, pass) and cut into
    `cfg.minibatches` minibatches; a minibatch no rank has a row of is skipped on every rank.

    Denominators: with `skip_zero_advantage` those of the whole batch (every rank's rows, kept or not), a minibatch's
    share of them, so that leaving zero-advantage rows out changes no policy-gradient term; otherwise this
    minibatch's own rows and tokens, counted over every rank (one process: the aggregation counts them itself).
    """
    base: dict = {"max_tokens": cfg.max_new_tokens}
    if cfg.skip_zero_advantage:
        total_rows, total_tokens = all_sum(world, [float(len(keep)), float(mask.sum())])
        base |= {"rows": total_rows / cfg.minibatches, "tokens": total_tokens / cfg.minibatches}
    for epoch in range(cfg.mu):
        shuffle = torch.Generator().manual_seed(seed * 1_000_003 + step * cfg.mu + epoch)
        order = rows[torch.randperm(len(rows), generator=shuffle).to(rows.device)]
        for mb in order.tensor_split(cfg.minibatches):
            if not any_rank(world, len(mb) > 0):
                continue
            norm = dict(base)
            if world.distributed and not cfg.skip_zero_advantage:
                m = mask[mb]
                n_rows, n_tokens = all_sum(world, [float((m.sum(-1) > 0).sum()), float(m.sum())])
                norm |= {"rows": n_rows, "tokens": n_tokens}
            weight = 1.0 if len(mb) else 0.0
            yield Minibatch(mb if len(mb) else _stand_in(rows), weight, norm, weight * world.size)


def _stand_in(rows: torch.Tensor) -> torch.Tensor:
    """A row for a rank with none in this minibatch: its first kept row, else row 0."""
    return rows[:1] if len(rows) else torch.zeros(1, dtype=torch.long, device=rows.device)


def mean_stats(world: World, trained: list[dict[str, float]]) -> dict[str, float]:
    """The update's statistics: each the mean over the minibatches this rank trained, then over the ranks that
    trained any; loss and kl_loss are each rank's partial sums of the objective, so those are added up."""
    acc: dict[str, list[float]] = {}
    for stats in trained:
        for k, v in stats.items():
            acc.setdefault(k, []).append(v)
    local = {k: sum(v) / len(v) for k, v in acc.items()}
    if not world.distributed:
        return local
    ranks = [r for r in gather_objects(world, local) if r]
    return {k: sum(r[k] for r in ranks if k in r) / (1 if k in ("loss", "kl_loss") else
                                                      sum(k in r for r in ranks)) for k in ranks[0]}


def gather_rows(world: World, per_row: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """{name: (rows,) tensor} of this rank -> the same on the CPU for every rank's rows, in rank order."""
    per_row = {k: v.detach().cpu() for k, v in per_row.items()}
    if not world.distributed:
        return per_row
    parts = gather_objects(world, per_row)
    return {k: torch.cat([p[k] for p in parts]) for k in per_row}


def summer(world: World) -> Callable[[list[float]], list[float]] | None:
    """Sums a list of floats over the ranks (for moments of the whole batch); None in one process."""
    return (lambda xs: all_sum(world, xs)) if world.distributed else None

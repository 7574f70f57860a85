"""Held-out scoring used at the end of the training stages: `heldout_nll` gives the mean next-token NLL
(perplexity = exp of it) of packed blocks or padded SFT batches. (Generation goes through the fast sampler:
:mod:`dsmath.train.probe`.)
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import torch
from tqdm.auto import tqdm

from dsmath.train.loop import batch_nll


@torch.no_grad()
def heldout_nll(model, batches: Iterable[dict[str, torch.Tensor]], desc: str = "heldout") -> tuple[float, int]:
    """(mean NLL per target token, number of target tokens) over right-padded `batches` ({input_ids, labels, ...})."""
    model.eval()
    device = next(model.parameters()).device
    total, count = 0.0, 0
    for b in tqdm(list(batches), desc=desc, leave=False):
        nll, n = batch_nll(model, {k: v.to(device) for k, v in b.items()})
        total, count = total + float(nll), count + int(n)
    return total / max(count, 1), count


def perplexity(mean_nll: float) -> float:
    return math.exp(min(mean_nll, 50.0))


def block_batches(blocks: torch.Tensor, batch_size: int) -> list[dict[str, torch.Tensor]]:
    """Packed blocks (N, T) -> list of causal-LM batches of at most `batch_size` rows."""
    return [
        {"input_ids": blocks[i : i + batch_size], "labels": blocks[i : i + batch_size]}
        for i in range(0, len(blocks), batch_size)
    ]

"""The token sampler of :func:`dsmath.generation.rollout.sample`: temperature and nucleus (top-p) sampling from a
row's logits, with per-row noise keyed by (seed, row key, step) so that a row's draws do not depend on its batch."""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F


class RowNoise:
    """The uniforms of inverse-CDF sampling, keyed by (seed, decoding step, row key).

    Row k's draw at step t is element ``key_k`` of ``rand(width)`` from a generator seeded by (seed, t): it depends
    on nothing but the seed, the step and the row's key, never on which other rows share the batch, how finished
    rows were compacted away, or how a global batch is split over processes (give each row its global index).
    keys: (N,) distinct non-negative ints, one per prompt of the batch.
    """

    def __init__(self, seed: int, keys: Sequence[int] | torch.Tensor):
        self.seed = int(seed)
        self.keys = torch.as_tensor(keys, dtype=torch.long).cpu()
        self.width = int(self.keys.max()) + 1 if len(self.keys) else 0

    def uniform(self, t: int, rows: torch.Tensor) -> torch.Tensor:
        """(n, 1) float32 uniforms in [0, 1) for the batch rows `rows` (prompt indices, (n,)) at step t, on CPU."""
        g = torch.Generator().manual_seed((self.seed * 1_000_003 + t) % 2**63)
        return torch.rand(self.width, generator=g)[self.keys[rows.cpu()]][:, None]


def sample_next(logits: torch.Tensor, temperature: float, top_p: float,
                uniforms: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    """One token per row and its log-prob; logits: (N, V) -> tokens (N,), logprobs (N,).

    The log-prob is that of the sampled token under ``log_softmax(logits / temperature)`` over the full vocabulary,
    *before* top-p truncation (the distribution a training forward at the same temperature reproduces; greedy,
    ``temperature == 0``, records temperature 1). The draw is by inverse CDF with one uniform per row,
    `uniforms` (N, 1) in [0, 1) (:class:`RowNoise`; unused when greedy).
    """
    if temperature == 0.0:
        tokens = logits.argmax(-1)
        return tokens, F.log_softmax(logits.float(), -1).gather(-1, tokens[:, None]).squeeze(-1)
    logits = logits.float()
    logp = F.log_softmax(logits if temperature == 1.0 else logits / temperature, -1)
    probs = logp.exp()
    if top_p < 1.0:
        probs = _nucleus(probs, top_p)
    cdf = probs.cumsum(-1)  # inverse-CDF draw: one uniform per row
    u = uniforms.to(device=cdf.device, dtype=cdf.dtype) * cdf[:, -1:]
    tokens = torch.searchsorted(cdf, u, right=True).clamp_(max=cdf.shape[-1] - 1)  # right: skips zero-prob tokens
    return tokens.squeeze(-1), logp.gather(-1, tokens).squeeze(-1)


def _nucleus(probs: torch.Tensor, top_p: float) -> torch.Tensor:
    """Zero every token outside the smallest top set whose mass reaches top_p (the top token always stays)."""
    sorted_p, order = probs.sort(-1, descending=True)
    outside = (sorted_p.cumsum(-1) - sorted_p) >= top_p  # mass strictly before this token already covers top_p
    return probs.scatter(-1, order, sorted_p.masked_fill(outside, 0.0))

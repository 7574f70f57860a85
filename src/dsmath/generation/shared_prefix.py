"""Cascade attention for :class:`dsmath.generation.engines.FastLlama`: the decoding attention of rows that share a
prompt (a GRPO group, the maj@k samples of one question), reading that prompt's keys and values once per group."""

from __future__ import annotations

import torch


class SharedPrefix:
    """The prompts' keys and values kept once per distinct prompt, and the decoding attention that reads them once
    per group of rows (cascade attention): for a GRPO group or the samples of one question, the G rows' queries
    against their common prompt are one (G, D) x (D, P) matmul instead of G matrix-vector products over G copies.

    A decoding step is memory-bound on the cache reads (at 256 rows and ~100 cached tokens a layer's keys and values
    are ~30 MB); the prompt is about half of what a row attends to, so reading it once per group takes most of that
    half away. Rows sit in a (U, kv_heads, Gmax, q heads per kv head) grid, group u at row ``u`` and column ``j``
    (its rank in the group); grid cells no row holds are computed and never read. Scores over the prompt and over
    the row's own tokens share one softmax, so the result is the full attention up to floating-point order.
    """

    @classmethod
    def over(cls, layers: int, mask: torch.Tensor, inverse: torch.Tensor, kv_heads: int,
             dtype) -> SharedPrefix | None:
        """The shared prompts of a batch: `mask` (U, P) of the distinct prompts, `inverse` (N,) each row's prompt;
        None when the groups are lopsided (a (U, Gmax) grid over twice the rows: its empty cells would cost more
        than the copies save)."""
        u = mask.shape[0]
        counts = torch.bincount(inverse, minlength=u)
        if u * int(counts.max()) > 2 * len(inverse):
            return None
        return cls(layers, mask, inverse, counts, kv_heads, dtype)

    def __init__(self, layers: int, mask: torch.Tensor, inverse: torch.Tensor, counts: torch.Tensor,
                 kv_heads: int, dtype):
        u, p = mask.shape
        self.length, self.kv = p, kv_heads
        self.k = [torch.empty(0)] * layers  # per layer: (U * kv_heads, P, D)
        self.v = [torch.empty(0)] * layers
        self.group = inverse.clone()  # (N,) each row's prompt
        order = torch.argsort(inverse, stable=True)  # a row's column: its rank among the rows of its prompt
        starts = torch.cumsum(counts, 0) - counts
        self.col = torch.empty_like(inverse)
        self.col[order] = torch.arange(len(inverse), device=inverse.device) - starts[inverse[order]]
        self.width = int(counts.max())  # Gmax
        bias = torch.zeros(u, p, dtype=dtype, device=mask.device).masked_fill_(~mask.bool(), float("-inf"))
        self.bias = bias[:, None, None].expand(u, kv_heads, 1, p).reshape(u * kv_heads, 1, p)

    def store(self, i: int, k: torch.Tensor, v: torch.Tensor) -> None:
        """Layer i's prompt keys and values, k, v: (U, kv_heads, P, D)."""
        self.k[i] = k.reshape(-1, *k.shape[2:])
        self.v[i] = v.reshape(-1, *v.shape[2:])

    def attend(self, i: int, q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
        """Layer i's attention output (N, heads * D) of queries q (N * kv_heads, G, D) over the prompt and the
        rows' own keys / values (N * kv_heads, S, D)."""
        nkv, g, d = q.shape
        n, u, w, p = nkv // self.kv, self.k[i].shape[0] // self.kv, self.width, self.length
        grid = q.new_zeros(u, self.kv, w, g, d)
        grid[self.group, :, self.col] = q.view(n, self.kv, g, d)
        prompt = torch.baddbmm(self.bias, grid.view(u * self.kv, w * g, d), self.k[i].transpose(1, 2))
        prompt = prompt.view(u, self.kv, w, g, p)[self.group, :, self.col]  # (N, kv, G, P)
        own = torch.bmm(q, keys.transpose(1, 2)).view(n, self.kv, g, -1)  # (N, kv, G, S)
        probs = torch.softmax(torch.cat([prompt, own], dim=-1), dim=-1)
        grid = probs.new_zeros(u, self.kv, w, g, p)
        grid[self.group, :, self.col] = probs[..., :p]
        out = torch.bmm(grid.view(u * self.kv, w * g, p), self.v[i]).view(u, self.kv, w, g, d)[self.group, :, self.col]
        own = torch.bmm(probs[..., p:].reshape(nkv, g, -1), values)  # (N * kv, G, D)
        return out.reshape(n, -1).add_(own.view(n, -1))

    def keep(self, rows: torch.Tensor) -> None:
        """Only the batch rows `rows` stay (as ``FastLlama.keep``); the prompts stay as they are."""
        self.group, self.col = self.group[rows], self.col[rows]

"""Decoding engines behind :func:`dsmath.generation.rollout.sample` (the token sampler:
:mod:`dsmath.generation.sampling`).

Two engines share one interface (``prefill`` -> ``step`` -> ... with ``keep`` to drop finished rows; ``prefill`` can
take the distinct prompts only, with the row -> prompt map, so the G rows of a group run their prompt once):

- :class:`FastLlama`: a compact Llama decoding forward of our own (RMSNorm, RoPE, GQA attention, SwiGLU) over the
  weights of an HF ``LlamaForCausalLM``, keys/values in one preallocated cache
  ``(layers, 2, N, kv_heads, max_len, head_dim)`` written in place. Per step, HF's own forward copies the whole
  ``DynamicCache`` (``torch.cat``), builds a 4D mask, runs q, k, v, gate, up as separate matmuls and CPU SDPA
  (slow for one query per row); what this engine is left with is the matmuls, the attention reads and ~165 small
  eager ops.
- :class:`HFDecoder`: the generic path for any causal LM (``DynamicCache``, an explicit 2D padding mask and
  position ids, ``logits_to_keep=1``), used when :func:`fast_path_unsupported` names a reason.

A decoding step is bound by reading the cache (every row's keys and values at every layer), not by its matmuls;
when the rows of a group share a prompt (GRPO groups, maj@k samples), the fast engine reads that prompt once per
group (cascade attention, :class:`SharedPrefix`).

Both lay the batch out the same way: prompts left-padded to a common length P, so every row writes its step-t key
into cache slot ``P + t``; a row's *position id* counts only its real tokens (pads are skipped), which is what makes
a prompt's continuation independent of how much padding its batch needed (exactly so for absolute position
embeddings; RoPE is shift-invariant anyway).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from itertools import pairwise

import torch
import torch.nn.functional as F

from dsmath.generation.shared_prefix import SharedPrefix

FAST_ROPE_TYPES = ("default", "linear", "llama3")  # static inv_freq / scaling, read from the HF rotary module


def position_ids(mask: torch.Tensor) -> torch.Tensor:
    """Position ids of a left-padded batch: real tokens count 0, 1, 2, ...; pads get 0. mask: (N, L) -> (N, L)."""
    return (mask.long().cumsum(-1) - 1).clamp(min=0)


# ----------------------------------------------------------------------------------------------------------------
# the fast engine


def fast_path_unsupported(model) -> str | None:
    """Why :class:`FastLlama` cannot run `model` (None when it can): Llama architecture with static RoPE only."""
    cfg = model.config
    if type(model).__name__ != "LlamaForCausalLM" or getattr(cfg, "model_type", None) != "llama":
        return f"model type {type(model).__name__}"
    if getattr(cfg, "hidden_act", None) != "silu":
        return f"hidden_act {cfg.hidden_act!r}"
    rope_type = getattr(model.model.rotary_emb, "rope_type", None)
    if rope_type not in FAST_ROPE_TYPES:
        return f"rope type {rope_type!r}"
    return None


class FastLlama:
    """Batched Llama decoding over a preallocated KV cache, with the weights of an HF ``LlamaForCausalLM``.

    The weights are rearranged once at construction (a copy: build a new engine after an optimizer step):
    q|k|v and gate|up are concatenated (one matmul each); the gains of the two RMSNorms inside each layer are folded
    into the matmul that follows them (``W (g * x) == (W diag g) x``; the final norm's is not, as its matmul may be
    the large tied embedding); and the rows of q and k are permuted so that the pairs RoPE rotates together (dims j
    and j + D/2, HF's ``rotate_half``) sit next to each other: RoPE becomes one complex multiply. q and k are
    permuted alike, so every score q.k, hence the output, is unchanged; only the cached keys differ from HF's.

    ``prefill(ids, mask)`` fills cache slots ``[0, P)``; each ``step(tokens)`` appends one slot. The cache is
    ``(layers, 2, N, kv_heads, max_len, D)``; a decoding step attends with two batched matmuls over the
    ``(N * kv_heads, length, D)`` views of one layer's keys and values (faster than CPU SDPA for one query per
    row). Only slots ``[0, length)`` are ever read, all of them written (pads too), so it starts uninitialised.
    ``prefill(ids, mask, inverse)`` over the distinct prompts keeps each prompt's keys and values once
    (:class:`SharedPrefix`) and the rows' cache holds only what they generate (slot ``length - P``).
    ``bias`` (N, max_len) is 0 on the slots a row may attend to (its real prompt tokens and all it generated),
    -inf elsewhere; ``pos`` (N,) is the position id of each row's next token. q is pre-scaled by 1/sqrt(D).
    """

    def __init__(self, model, batch: int, max_len: int, dtype: torch.dtype | None = None):
        cfg, inner = model.config, model.model
        self.heads, self.kv_heads = cfg.num_attention_heads, cfg.num_key_value_heads
        self.head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
        self.eps = cfg.rms_norm_eps
        cast = _caster(dtype)  # the engine's own copy of the weights, in the decoding dtype (default: the model's)
        self.embed = cast(inner.embed_tokens.weight.detach())
        self.layers = [_Fused(*(cast(w) for w in _fields_of(_fuse(layer, self.heads, self.kv_heads,
                                                                         self.head_dim))))
                       for layer in inner.layers[: cfg.num_hidden_layers]]
        self.final_gain = cast(inner.norm.weight.detach())  # not folded: the LM head may be the large tied embedding
        self.lm_head = (cast(model.lm_head.weight.detach()), cast(_bias(model.lm_head)))
        w = self.embed
        self.upcast = w.dtype != torch.float32  # RMSNorm and RoPE run in float32, as in HF
        # the attention (cached keys and values, scores, softmax) in float32 on a CPU whatever the weights' dtype:
        # there the batched bf16 matmuls over the cache's slices copy their operands first (1.5x slower decoding
        # steps than float32 on an AMX Xeon), while the weights' matmuls are where bf16 gains; natively elsewhere
        self.att = torch.float32 if w.device.type == "cpu" else w.dtype
        self._use_cache(torch.empty(len(self.layers), 2, batch, self.kv_heads, max_len, self.head_dim,
                                    dtype=self.att, device=w.device))
        self.bias = torch.full((batch, max_len), float("-inf"), dtype=self.att, device=w.device)
        self.pos = torch.zeros(batch, dtype=torch.long, device=w.device)
        self.length = 0
        self.shared: SharedPrefix | None = None  # set by a prefill over distinct prompts
        self.cis = _rope_cis(inner.rotary_emb, max_len, w.device)  # (max_len, D/2) complex64

    def prefill(self, ids: torch.Tensor, mask: torch.Tensor, inverse: torch.Tensor | None = None) -> torch.Tensor:
        """Run the left-padded prompts; ids, mask: (N, P) -> next-token logits (N, V). With `inverse` (N,), ids and
        mask hold only the U distinct prompts (U, P) and batch row r starts from prompt ``inverse[r]``: each distinct
        prompt runs once and its keys and values are kept once (:class:`SharedPrefix`); the rows' own cache holds
        only what they generate (lopsided groups: copied to every row that shares them instead)."""
        n, p = ids.shape
        h, kv = self.heads, self.kv_heads
        pos = position_ids(mask)  # (U, P)
        rows = slice(None) if inverse is None else inverse
        if inverse is not None:
            self.shared = SharedPrefix.over(len(self.layers), mask, inverse, kv, self.bias.dtype)
        if self.shared is None:  # every row gets its own copy of its prompt's keys and values
            self.bias[:, :p].masked_fill_(mask.bool()[rows], 0.0)
        causal = torch.ones(p, p, dtype=torch.bool, device=ids.device).tril()
        eye = torch.eye(p, dtype=torch.bool, device=ids.device)
        attn_mask = ((causal & mask.bool()[:, None, :]) | eye)[:, None]  # (N, 1, P, P); eye: pads see themselves
        cis = self.cis[pos][:, :, None]  # (N, P, 1, D/2)
        x = F.embedding(ids, self.embed)  # (N, P, hidden)
        for i, layer in enumerate(self.layers):
            qkv = F.linear(self._norm(x), layer.wqkv, layer.bqkv).view(n, p, -1, self.head_dim)
            self._rotate_(qkv, cis)
            q, k, v = qkv.transpose(1, 2).to(self.att).split((h, kv, kv), dim=1)  # (N, heads | kv_heads, P, D)
            if self.shared is None:
                self.cache[i, 0, :, :, :p] = k[rows]
                self.cache[i, 1, :, :, :p] = v[rows]
            else:
                self.shared.store(i, k, v)
            a = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, enable_gqa=kv != h, scale=1.0)
            x = x + F.linear(a.transpose(1, 2).reshape(n, p, -1).to(x.dtype), layer.wo, layer.bo)
            gate, up = F.linear(self._norm(x), layer.wgu, layer.bgu).chunk(2, dim=-1)
            x = x + F.linear(F.silu(gate).mul_(up), layer.wd, layer.bd)
        self.length, self.pos = p, pos[rows, -1] + 1
        return F.linear(self._norm(x[:, -1]) * self.final_gain, *self.lm_head)[rows]

    def step(self, tokens: torch.Tensor) -> torch.Tensor:
        """Append one token per row; tokens: (N,) -> next-token logits (N, V)."""
        n, t = tokens.shape[0], self.length
        h, kv = self.heads, self.kv_heads
        shared = self.shared
        slot = t if shared is None else t - shared.length  # the cache slot this step writes
        if shared is None:
            self.bias[:, t] = 0.0
            bias = self.bias[:, None, : t + 1].expand(n, kv, t + 1).reshape(n * kv, 1, t + 1)  # one row per kv head
        cis = self.cis[self.pos][:, None]  # (N, 1, D/2)
        # the query heads of one kv head sit next to each other (HF repeat_kv order): treat them as G queries
        group_shape = (n * kv, h // kv, self.head_dim)
        x = F.embedding(tokens, self.embed)  # (N, hidden)
        for i, layer in enumerate(self.layers):
            qkv = F.linear(self._norm(x), layer.wqkv, layer.bqkv).view(n, -1, self.head_dim)  # (N, h + 2 kv, D)
            self._rotate_(qkv, cis)
            keys, values = self.keys[i], self.values[i]  # (N * kv, max_len, D)
            keys.select(1, slot).copy_(qkv[:, h: h + kv].reshape(n * kv, -1))
            values.select(1, slot).copy_(qkv[:, h + kv:].reshape(n * kv, -1))
            q = qkv[:, :h].reshape(group_shape).to(self.att)
            if shared is None:
                scores = torch.baddbmm(bias, q, keys[:, : t + 1].transpose(1, 2))
                a = torch.bmm(torch.softmax(scores, dim=-1), values[:, : t + 1]).view(n, -1)  # (N, h * D)
            else:
                a = shared.attend(i, q, keys[:, : slot + 1], values[:, : slot + 1])
            x = _add_linear(x, a.to(x.dtype), layer.wo_t, layer.bo)
            gate, up = F.linear(self._norm(x), layer.wgu, layer.bgu).chunk(2, dim=-1)
            x = _add_linear(x, F.silu(gate).mul_(up), layer.wd_t, layer.bd)
        self.length, self.pos = t + 1, self.pos + 1
        return F.linear(self._norm(x) * self.final_gain, *self.lm_head)

    def keep(self, rows: torch.Tensor) -> None:
        """Keep only the batch rows `rows` (increasing indices into the current batch), compacting the cache in place:
        row ``rows[i]`` moves to row i (filled slots only), and the cache becomes the first ``len(rows)`` rows of the
        same buffer. In increasing order no row is overwritten before it is read (``rows[j] >= j``). A gather into a
        new buffer was ~3x slower at batch 256 (fresh pages); the values moved are the same."""
        t, order = self.length, rows.tolist()
        if any(b <= a for a, b in pairwise(order)):
            raise ValueError("keep: rows must be strictly increasing")
        if self.shared is not None:
            t -= self.shared.length  # the rows' own slots: what they generated
            self.shared.keep(rows)
        for i, r in enumerate(order):
            if r != i:
                self.cache[:, :, i, :, :t].copy_(self.cache[:, :, r, :, :t])
        self._use_cache(self.cache[:, :, : len(order)])
        self.bias, self.pos = self.bias[rows], self.pos[rows]

    def _use_cache(self, cache: torch.Tensor) -> None:
        """Adopt `cache` (layers, 2, N, kv_heads, max_len, D) and its per-layer (N * kv_heads, max_len, D) views."""
        n, kv, m, d = cache.shape[2:]
        self.cache = cache
        self.keys = [c.view(n * kv, m, d) for c in cache[:, 0].unbind(0)]
        self.values = [c.view(n * kv, m, d) for c in cache[:, 1].unbind(0)]

    def _rotate_(self, qkv, cis) -> None:
        """RoPE on the q and k heads of qkv (..., heads + 2 kv_heads, D), in place: one complex multiply by cis."""
        qk = qkv[..., : self.heads + self.kv_heads, :]
        if not self.upcast:
            torch.view_as_complex(qk.unflatten(-1, (-1, 2))).mul_(cis)
        else:
            turned = torch.view_as_complex(qk.float().unflatten(-1, (-1, 2))) * cis
            qk.copy_(torch.view_as_real(turned).flatten(-2))

    def _norm(self, x):
        """RMSNorm without its gain (folded into the next matmul): x / sqrt(mean(x^2) + eps), in float32 as HF."""
        h = x.float() if self.upcast else x
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True).add_(self.eps))
        return h.to(x.dtype) if self.upcast else h


def _caster(dtype: torch.dtype | None):
    """x -> x in `dtype` (None passes through, as does every x when dtype is None)."""
    return lambda x: x if x is None or dtype is None or x.dtype == dtype else x.to(dtype)


def _fields_of(obj) -> tuple:
    """The fields of a dataclass instance, in order, without copying them (dataclasses.astuple deep-copies)."""
    return tuple(getattr(obj, f.name) for f in fields(obj))


def _add_linear(x: torch.Tensor, a: torch.Tensor, w_t: torch.Tensor, b: torch.Tensor | None) -> torch.Tensor:
    """x + a @ w_t (+ b) with the residual add fused into the matmul; x: (N, out), a: (N, in), w_t: (in, out)."""
    out = torch.addmm(x, a, w_t)
    return out if b is None else out.add_(b)


@dataclass(frozen=True)
class _Fused:
    """One decoder layer's weights for :class:`FastLlama` (biases may be None)."""

    wqkv: torch.Tensor  # (q|k|v out, hidden): RoPE pairs adjacent, q scaled by 1/sqrt(D), input norm gain in
    bqkv: torch.Tensor | None
    wo: torch.Tensor
    bo: torch.Tensor | None
    wgu: torch.Tensor  # (gate|up out, hidden): post-attention RMSNorm gain folded in
    bgu: torch.Tensor | None
    wd: torch.Tensor
    bd: torch.Tensor | None

    @property
    def wo_t(self) -> torch.Tensor:
        return self.wo.t()

    @property
    def wd_t(self) -> torch.Tensor:
        return self.wd.t()


def _fuse(layer, heads: int, kv_heads: int, head_dim: int) -> _Fused:
    att, mlp = layer.self_attn, layer.mlp
    half = head_dim // 2
    pair = torch.stack([torch.arange(half), torch.arange(half) + half], dim=-1).flatten()  # 0, D/2, 1, D/2+1, ...
    q_rows = (torch.arange(heads)[:, None] * head_dim + pair).flatten()
    k_rows = (torch.arange(kv_heads)[:, None] * head_dim + pair).flatten()
    w, b = _cat_linear(att.q_proj, att.k_proj, att.v_proj, rows=(q_rows, k_rows, None))
    scale = torch.ones(w.shape[0], dtype=w.dtype, device=w.device)
    scale[: heads * head_dim] = head_dim**-0.5  # attention's 1/sqrt(D), applied to q once (RoPE is linear)
    w, b = w * scale[:, None], None if b is None else b * scale
    wgu, bgu = _cat_linear(mlp.gate_proj, mlp.up_proj)
    g1, g2 = layer.input_layernorm.weight.detach(), layer.post_attention_layernorm.weight.detach()
    return _Fused(w * g1, b, att.o_proj.weight.detach(), _bias(att.o_proj), wgu * g2, bgu,
                  mlp.down_proj.weight.detach(), _bias(mlp.down_proj))


def _cat_linear(*linears, rows=None) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Weights (and biases, zeros where missing) of `linears` stacked along the output dim, each reindexed by rows."""
    rows = rows or (None,) * len(linears)
    ws, bs = [], []
    for m, r in zip(linears, rows, strict=True):
        w, b = m.weight.detach(), _bias(m)
        b = torch.zeros_like(w[:, 0]) if b is None else b
        ws.append(w if r is None else w[r])
        bs.append(b if r is None else b[r])
    no_bias = all(m.bias is None for m in linears)
    return torch.cat(ws), None if no_bias else torch.cat(bs)


def _bias(linear) -> torch.Tensor | None:
    return None if linear.bias is None else linear.bias.detach()


def _rope_cis(rotary, max_len: int, device) -> torch.Tensor:
    """(max_len, D/2) complex: scaling * exp(i * pos * inv_freq), the cos/sin of HF's rotary module as one number."""
    pos = torch.arange(max_len, device=device, dtype=torch.float32)
    freqs = pos[:, None] * rotary.inv_freq.to(device=device, dtype=torch.float32)[None]
    return torch.complex(freqs.cos() * rotary.attention_scaling, freqs.sin() * rotary.attention_scaling)


# ----------------------------------------------------------------------------------------------------------------
# the generic engine


class HFDecoder:
    """Any HF causal LM through its own forward: ``DynamicCache``, 2D padding mask, explicit position ids."""

    def __init__(self, model, batch: int, max_len: int, dtype: torch.dtype | None = None):
        from transformers import DynamicCache

        self.model, self.cache = model, DynamicCache(config=model.config)
        self.dtype = None if dtype in (None, next(model.parameters()).dtype) else dtype  # else: decode under autocast
        self.mask = torch.zeros(batch, 0, dtype=torch.long, device=model.device)
        self.pos = torch.zeros(batch, dtype=torch.long, device=model.device)

    def prefill(self, ids: torch.Tensor, mask: torch.Tensor, inverse: torch.Tensor | None = None) -> torch.Tensor:
        """ids, mask: (N, P) -> next-token logits (N, V); with `inverse`, the distinct prompts only (as FastLlama)."""
        pos = position_ids(mask)
        self.mask, self.pos = mask.long(), pos[:, -1] + 1
        logits = self._forward(ids, pos)
        if inverse is None:
            return logits
        self.cache.batch_select_indices(inverse)
        self.mask, self.pos = self.mask[inverse], self.pos[inverse]
        return logits[inverse]

    def step(self, tokens: torch.Tensor) -> torch.Tensor:
        """tokens: (N,) -> next-token logits (N, V)."""
        self.mask = torch.cat([self.mask, torch.ones_like(self.mask[:, :1])], dim=1)
        logits = self._forward(tokens[:, None], self.pos[:, None])
        self.pos = self.pos + 1
        return logits

    def keep(self, rows: torch.Tensor) -> None:
        self.cache.batch_select_indices(rows)
        self.mask, self.pos = self.mask[rows], self.pos[rows]

    def _forward(self, ids, pos):
        with autocast(self.model.device, self.dtype):
            out = self.model(input_ids=ids, attention_mask=self.mask, position_ids=pos, cache=self.cache,
                                 use_cache=True, logits_to_keep=1)
        self.cache = out.cache
        return out.logits[:, -1]


ENGINES = {"fast": FastLlama, "hf": HFDecoder}


def autocast(device: torch.device | str, dtype: torch.dtype | None):
    """``torch.autocast`` to `dtype` on `device`'s type; a no-op context for None or float32."""
    import contextlib

    if dtype is None or dtype == torch.float32:
        return contextlib.nullcontext()
    return torch.autocast(torch.device(device).type, dtype=dtype)


def make_engine(model, batch: int, max_len: int, engine: str = "auto", dtype: torch.dtype | None = None):
    """The named engine (``fast`` | ``hf``), or for ``auto`` the fast one when the model supports it.

    dtype: the decoding precision (None: the model's); the fast engine copies the weights in it, the HF one decodes
    under ``torch.autocast``."""
    if engine == "auto":
        engine = "hf" if fast_path_unsupported(model) else "fast"
    if engine not in ENGINES:
        raise ValueError(f"unknown engine {engine!r}; valid: auto, {', '.join(ENGINES)}")
    if engine == "fast" and (why := fast_path_unsupported(model)):
        raise ValueError(f"engine 'fast' does not support this model: {why}")
    return ENGINES[engine](model, batch, max_len, dtype)

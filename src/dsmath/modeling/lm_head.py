"""The language-model head fused with its log-softmax: per-token log-probs of given targets straight from the final
hidden states, a block of rows at a time.

Training and scoring need one number per position, ``log_softmax(h @ W.T / temperature)[target]``, never the whole
(rows, vocab) logits. Computed the plain way, autograd keeps the logits, and forward and backward allocate several
more tensors of that size (the log-softmax, the softmax of its gradient, the zero-filled gather gradient, their sum):
at the default model's vocabulary of 1,536 that is most of the non-matmul time of a training step on a CPU, where each
fresh 50 MB tensor is also ~12k page faults. :func:`token_logprobs` instead walks the rows in blocks of about
``BLOCK_ELEMENTS`` logits (a few MB, reused while cache-warm): per block one matmul, the log-sum-exp, the target's
logit, and the softmax kept for the backward, which is then one elementwise pass and two matmuls per block.

The values equal the plain computation's up to floating-point order. :func:`hidden_states` runs a Hugging Face causal
LM with its output head switched off, so the model's own forward (DDP's hooks included) gives the final hidden states
where it would give logits.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch

BLOCK_ELEMENTS = 1 << 20  # logits per block (4 MB in float32); 2^18 .. 2^22 ran alike on a 2-core CPU


@contextlib.contextmanager
def hidden_states(model: torch.nn.Module) -> Iterator[torch.Tensor]:
    """Within the block, ``model(...).logits`` holds the final hidden states (after the last norm, sliced by
    ``logits_to_keep`` as logits would be) instead of logits; yields the head's weight (V, H), tied or not.

    The output head's ``forward`` is replaced on the instance for the duration (its parameters stay where they are,
    so optimizers, DDP and checkpoints see the same model); ``model`` may be wrapped (DDP, accelerate). Blocks may
    nest (a scoring function falling back to another inside one): the outermost restores the head.
    """
    inner = getattr(model, "module", model)
    head = inner.get_output_embeddings()
    if getattr(head, "bias", None) is not None:
        raise ValueError("the fused head supports bias-free output layers only")
    cfg = inner.config
    if any(getattr(cfg, k, None) not in (None, 1.0) for k in _LOGIT_TRANSFORMS):  # logits != hidden @ W.T
        raise ValueError(f"{type(inner).__name__} transforms its logits after the head ({_LOGIT_TRANSFORMS})")
    if "forward" in vars(head):  # already inside a hidden_states block of this model: leave the outer one to undo it
        yield head.weight
        return
    head.forward = _identity
    try:
        yield head.weight
    finally:
        del head.forward


_LOGIT_TRANSFORMS = ("final_logit_softcapping", "logit_scale", "logits_scaling")  # Gemma 2, Cohere, Granite


def _identity(x: torch.Tensor) -> torch.Tensor:
    return x


def token_logprobs(hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor,
                   temperature: float = 1.0) -> torch.Tensor:
    """``log_softmax(hidden @ weight.T / temperature)[..., targets]``: hidden (..., H), weight (V, H), targets (...)
    -> (...) float32, differentiable in hidden and weight. Temperature 0 counts as 1 (as in sampling).

    Under autocast the matmuls run in the autocast dtype (as the head's own Linear would), the softmax in float32.
    """
    t = 1.0 if temperature in (0.0, 1.0) else float(temperature)
    lead = hidden.shape[:-1]
    dtype = torch.get_autocast_dtype(hidden.device.type) if torch.is_autocast_enabled(hidden.device.type) else None
    out = _FusedLogprob.apply(hidden.reshape(-1, hidden.shape[-1]), weight, targets.reshape(-1), t, dtype)
    return out.view(lead)


class _FusedLogprob(torch.autograd.Function):
    """Row blocks of ``log_softmax(h W^T / t)[y]``; the backward reuses each block's softmax p:
    d/dz = g (onehot(y) - p) / t, dh = dz W, dW = dz^T h."""

    @staticmethod
    def forward(ctx, h, w, y, t, dtype):
        wc = w if dtype is None else w.to(dtype)
        rows = max(1, BLOCK_ELEMENTS // w.shape[0])
        out = torch.empty(h.shape[0], dtype=torch.float32, device=h.device)
        keep = any(ctx.needs_input_grad[:2])  # the softmax is only kept for a backward
        probs = []
        for s in range(0, h.shape[0], rows):
            hc = h[s : s + rows]
            z = (hc if dtype is None else hc.to(dtype)) @ wc.t()
            z = z.float()
            if t != 1.0:
                z = z / t
            lse = z.logsumexp(-1)
            yc = y[s : s + rows, None]
            out[s : s + rows] = z.gather(-1, yc).squeeze(-1) - lse
            if keep:
                probs.append(z.sub_(lse[:, None]).exp_())  # the block's softmax, in place of its logits
        ctx.save_for_backward(h, w, y)
        ctx.probs, ctx.rows, ctx.t, ctx.dtype = probs, rows, t, dtype
        return out

    @staticmethod
    def backward(ctx, g):
        h, w, y = ctx.saved_tensors
        rows, t, dtype = ctx.rows, ctx.t, ctx.dtype
        need_h, need_w = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        wc = w if dtype is None else w.to(dtype)
        dh = torch.empty_like(h) if need_h else None
        dw = torch.zeros(w.shape, dtype=torch.float32, device=w.device) if need_w else None
        for i, s in enumerate(range(0, h.shape[0], rows)):
            gc = g[s : s + rows, None]
            dz = ctx.probs[i].mul_(gc).neg_()  # -g p, then + g at the target: g (onehot(y) - p)
            dz.scatter_add_(-1, y[s : s + rows, None], gc)
            if t != 1.0:
                dz.div_(t)
            if dtype is not None:
                dz = dz.to(dtype)
            if need_h:
                dh[s : s + rows] = dz @ wc
            if need_w:
                hc = h[s : s + rows]
                if dtype is None:
                    dw.addmm_(dz.t(), hc)
                else:
                    dw += (dz.t() @ hc.to(dtype)).float()
        ctx.probs = None
        return dh, (dw.to(w.dtype) if need_w else None), None, None, None

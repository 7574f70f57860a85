"""Scoring given completions: per-token log-probs of the last T tokens of each row under a model, with the autograd
graph kept (the reference and training forwards of RL).

- :func:`sequence_logprobs`: one forward over the padded batch.
- :func:`bucketed_logprobs`: rows grouped by length into several forwards, each cut to its own padding.
- :func:`shared_prefix_logprobs`: each distinct prompt once, the rows of a group attending to one copy of its keys and
  values (a GRPO group's G outputs share their prompt).

All three compute the same (N, T) values up to floating-point order, in the convention of
:mod:`dsmath.generation.rollout` (``log_softmax(logits / temperature)`` over the full vocabulary), through the fused
output head of :mod:`dsmath.modeling.lm_head` (the (N, T, V) logits are never held at once).
"""

from __future__ import annotations

import torch

from dsmath.generation.engines import autocast, position_ids
from dsmath.generation.rollout import unique_prompts
from dsmath.modeling.lm_head import hidden_states, token_logprobs


def sequence_logprobs(model, input_ids: torch.Tensor, attention_mask: torch.Tensor, num_completion: int, *,
                      temperature: float = 1.0, dtype: torch.dtype | None = None) -> torch.Tensor:
    """Log-probs of the last `num_completion` tokens of each row in one forward pass (keeps the autograd graph).

    input_ids, attention_mask: (N, P + T) left-padded prompts followed by right-padded completions (as
    ``Rollout.input_ids`` / ``Rollout.attention_mask``); returns (N, T) ``log_softmax(logits / temperature)`` of
    each completion token (temperature 0 counts as 1, as in :func:`sample`). Values on pads are meaningless: mask them.
    dtype: the forward's autocast precision (None or float32: the weights' own); the log-softmax is in float32.
    Memory: the (N, T, V) softmax in float32 while a backward is pending (none under no_grad).
    """
    t = num_completion
    if t == 0:
        return torch.zeros(input_ids.shape[0], 0, device=input_ids.device)
    with autocast(input_ids.device, dtype), hidden_states(model) as head:
        hidden = model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids(attention_mask),
                       use_cache=False, logits_to_keep=t + 1).logits
        # (N, T, H): the hidden state at position j predicts token j + 1
        return token_logprobs(hidden[:, :-1], head, input_ids[:, -t:], temperature)


def bucketed_logprobs(model, input_ids: torch.Tensor, attention_mask: torch.Tensor, num_completion: int, *,
                      buckets: int = 1, temperature: float = 1.0, dtype: torch.dtype | None = None) -> torch.Tensor:
    """:func:`sequence_logprobs` over rows grouped by real length into `buckets` forwards, each cut to its own
    padding: the rows are sorted by prompt + completion length, split into `buckets` groups, and each group keeps
    only the columns some row of it uses (its longest prompt's left padding, its longest completion's right
    padding). Same (N, T) result up to floating-point order, with less padding computed when lengths vary (tool
    outputs, early EOS). One autograd graph over the groups (several forwards before one backward: not for
    DistributedDataParallel, whose gradient hooks expect one forward per backward). buckets <= 1: one forward."""
    n, t = input_ids.shape[0], num_completion
    if buckets <= 1 or n <= 1 or t == 0:
        return sequence_logprobs(model, input_ids, attention_mask, t, temperature=temperature, dtype=dtype)
    p = input_ids.shape[1] - t
    prompt_len, comp_len = attention_mask[:, :p].sum(-1), attention_mask[:, p:].sum(-1)
    order = torch.argsort(prompt_len + comp_len, stable=True)
    parts, rows = [], []
    for idx in order.tensor_split(min(buckets, n)):
        pp, tt = int(prompt_len[idx].max()), max(int(comp_len[idx].max()), 1)
        lp = sequence_logprobs(model, input_ids[idx, p - pp : p + tt], attention_mask[idx, p - pp : p + tt], tt,
                               temperature=temperature, dtype=dtype)
        parts.append(torch.nn.functional.pad(lp, (0, t - tt)))
        rows.append(idx)
    return _unsort(parts, rows, order)


def _dynamic_layers(cache) -> list | None:
    """The layers of an HF ``DynamicCache`` whose keys/values are plain (batch, heads, length, dim) tensors, or None
    for any other cache (sliding windows, linear attention, ...), where prompt sharing is not attempted."""
    layers = getattr(cache, "layers", None)
    if not layers or any(type(layer).__name__ != "DynamicLayer" for layer in layers):
        return None
    return layers


def _take_rows(x: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """``x[index]`` along dim 0 as a one-hot matmul: its backward is a matmul too, so the gradient summed over the
    rows that read the same row of x is bitwise reproducible (advanced indexing's accumulating backward on CPU is
    not). x: (U, ...), index: (n,) -> (n, ...)."""
    onehot = torch.nn.functional.one_hot(index, x.shape[0]).to(x.dtype)
    return (onehot @ x.flatten(1)).view(len(index), *x.shape[1:])


def shared_prefix_logprobs(model, input_ids: torch.Tensor, attention_mask: torch.Tensor, num_completion: int, *,
                           buckets: int = 1, temperature: float = 1.0,
                           dtype: torch.dtype | None = None) -> torch.Tensor:
    """:func:`bucketed_logprobs` with each distinct prompt run once: rows that share a prompt (the G outputs of a
    GRPO group) attend to one copy of its keys and values, and gradients through them sum over the rows, so the
    result (and its gradient) is that of one forward per row up to floating-point order, for 1/G of the prompt work.

    One forward over the distinct prompts (keeping their KV cache and the logits of their last position, which
    predict each row's first completion token), then `buckets` forwards over the completions, rows sorted by
    completion length, each cut to its longest completion, reading its rows' prompt caches. Falls back to
    :func:`bucketed_logprobs` when no prompt repeats or the model's cache is not a plain ``DynamicCache``.
    """
    from transformers import DynamicCache

    n, t = input_ids.shape[0], num_completion
    p = input_ids.shape[1] - t
    uids, umask, inverse = unique_prompts(input_ids[:, :p], attention_mask[:, :p])
    if t == 0 or len(uids) == n:
        return bucketed_logprobs(model, input_ids, attention_mask, t, buckets=buckets, temperature=temperature,
                                 dtype=dtype)
    with autocast(input_ids.device, dtype), hidden_states(model) as head:
        out = model(input_ids=uids, attention_mask=umask, position_ids=position_ids(umask), use_cache=True,
                    logits_to_keep=1)
    layers = _dynamic_layers(out.cache if hasattr(out, "cache") else out.past_key_values)
    if layers is None:
        return bucketed_logprobs(model, input_ids, attention_mask, t, buckets=buckets, temperature=temperature,
                                 dtype=dtype)
    first = out.logits[:, -1]  # (U, H): the hidden state that predicts each row's completion token 0
    prompt_len, comp_len = umask.sum(-1)[inverse], attention_mask[:, p:].sum(-1)
    order = torch.argsort(comp_len, stable=True)
    parts, rows = [], []
    for idx in order.tensor_split(min(max(buckets, 1), n)):
        tt = max(int(comp_len[idx].max()), 1)
        with autocast(input_ids.device, dtype):
            lp = token_logprobs(_take_rows(first, inverse[idx]), head, input_ids[idx, p], temperature)[:, None]
        if tt > 1:  # completion tokens 0 .. tt-2 predict tokens 1 .. tt-1 (the last token is never an input)
            cache = DynamicCache(config=model.config)
            for i, layer in enumerate(layers):
                cache.update(_take_rows(layer.keys, inverse[idx]), _take_rows(layer.values, inverse[idx]), i)
            ids = input_ids[idx, p : p + tt - 1]
            mask = attention_mask[idx, : p + tt - 1]
            pos = prompt_len[idx, None] + torch.arange(tt - 1, device=ids.device)
            with autocast(input_ids.device, dtype), hidden_states(model):
                hidden = model(input_ids=ids, attention_mask=mask, position_ids=pos, cache=cache, use_cache=True,
                               logits_to_keep=tt - 1).logits
                rest = token_logprobs(hidden, head, input_ids[idx, p + 1 : p + tt], temperature)
            lp = torch.cat([lp, rest], dim=1)
        parts.append(torch.nn.functional.pad(lp, (0, t - tt)))
        rows.append(idx)
    return _unsort(parts, rows, order)


def _unsort(parts: list[torch.Tensor], rows: list[torch.Tensor], order: torch.Tensor) -> torch.Tensor:
    """The bucket results `parts` (rows `rows` of the batch each, together a permutation `order`) back in batch
    order: one (N, T) tensor."""
    where = torch.empty_like(order)
    where[torch.cat(rows)] = torch.arange(len(order), device=order.device)
    return torch.cat(parts)[where]

"""Attention in float32 under bf16 autocast: a Hugging Face model's SDPA attention with its scores, softmax and
weighted values computed in float32, while its projections and MLP stay in the autocast precision.

Under ``torch.autocast`` SDPA is one of the ops cast down, so a bf16 forward computes the attention scores from bf16
queries and keys and mixes bf16 values with bf16 probabilities. :func:`float32_attention` swaps the ``sdpa`` entry of
transformers' attention functions (``ALL_ATTENTION_FUNCTIONS``, looked up by every attention layer on every forward)
for one that casts query, key and value up and runs SDPA with autocast off; the output goes back into the layer's
output projection, which autocast casts down again. The weights, the masks and the models' configs are untouched, so
nothing of it is saved with a model.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch


def sdpa_float32(module, query, key, value, attention_mask, **kwargs):
    """transformers' ``sdpa_attention_forward`` with query, key and value in float32 and autocast off."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    with torch.autocast(query.device.type, enabled=False):
        if attention_mask is not None and attention_mask.is_floating_point():
            attention_mask = attention_mask.float()
        return sdpa_attention_forward(module, query.float(), key.float(), value.float(), attention_mask, **kwargs)


@contextlib.contextmanager
def float32_attention(enabled: bool = True) -> Iterator[None]:
    """Within the block, models whose attention implementation is ``sdpa`` (the default) attend in float32 (see the
    module's text); a no-op when not `enabled`. Blocks nest; the outermost restores the previous function."""
    if not enabled:
        yield
        return
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    local = ALL_ATTENTION_FUNCTIONS._local_mapping
    before = local.get("sdpa")
    local["sdpa"] = sdpa_float32
    try:
        yield
    finally:
        if before is None:
            local.pop("sdpa", None)
        else:
            local["sdpa"] = before

"""Attention in float32 under bf16 autocast: what the attention computes in, what it leaves alone, and the restore."""

from __future__ import annotations

import torch
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

import dsmath.modeling.attention as attention
from dsmath.config import Model
from dsmath.modeling.model import build_scratch


class FakeTokenizer:
    pad_token_id, eos_token_id = 0, 1

    def __len__(self) -> int:
        return 24


def _model():
    cfg = Model(hidden_size=32, intermediate_size=64, num_layers=2, num_heads=4, num_kv_heads=2,
                max_position_embeddings=64)
    return build_scratch(cfg, FakeTokenizer(), seed=0).eval()


def test_under_bf16_autocast_the_attention_runs_in_float32_and_changes_the_forward(monkeypatch):
    model, ids = _model(), torch.randint(0, 24, (2, 10), generator=torch.Generator().manual_seed(0))
    seen = []
    inner = attention.sdpa_float32

    def spy(module, query, key, value, mask, **kw):
        out = inner(module, query, key, value, mask, **kw)
        seen.append((query.dtype, out[0].dtype))
        return out

    monkeypatch.setattr(attention, "sdpa_float32", spy)
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        low = model(ids).logits.float()
        with attention.float32_attention():
            mixed = model(ids).logits.float()
        again = model(ids).logits.float()
    reference = model(ids).logits
    assert len(seen) == 2 and all(out == torch.float32 for _, out in seen)  # one call per layer, float32 out
    assert torch.equal(low, again)  # the block undid itself
    assert not torch.equal(low, mixed)
    assert (mixed - reference).abs().max() < 0.05 and (low - reference).abs().max() < 0.05


def test_in_float32_the_lever_computes_what_plain_sdpa_computes_packed_rows_included():
    model, ids = _model(), torch.randint(0, 24, (1, 12), generator=torch.Generator().manual_seed(1))
    packed = torch.tensor([[0, 1, 2, 3, 4, 0, 1, 2, 3, 4, 5, 6]])  # two examples in one row (attention kept apart)
    with torch.no_grad():
        plain = model(ids, position_ids=packed).logits
        with attention.float32_attention():
            lever = model(ids, position_ids=packed).logits
    assert torch.equal(plain, lever)


def test_blocks_nest_and_restore_the_previous_function():
    before = dict(ALL_ATTENTION_FUNCTIONS._local_mapping)
    with attention.float32_attention():
        with attention.float32_attention():
            assert ALL_ATTENTION_FUNCTIONS["sdpa"] is attention.sdpa_float32
        assert ALL_ATTENTION_FUNCTIONS["sdpa"] is attention.sdpa_float32
        with attention.float32_attention(enabled=False):
            assert ALL_ATTENTION_FUNCTIONS["sdpa"] is attention.sdpa_float32
    assert ALL_ATTENTION_FUNCTIONS._local_mapping == before

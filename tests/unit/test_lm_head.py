"""The fused output head: the values and gradients of the plain log-softmax, block by block, and the model switch."""

from __future__ import annotations

import pytest
import torch

import dsmath.modeling.lm_head as lm_head
from dsmath.config import Model
from dsmath.modeling.lm_head import hidden_states, token_logprobs
from dsmath.modeling.model import build_scratch


class FakeTokenizer:
    pad_token_id, eos_token_id = 0, 1

    def __len__(self) -> int:
        return 24


def plain(h, w, y, temperature=1.0):
    z = h @ w.t()
    if temperature not in (0.0, 1.0):
        z = z / temperature
    return z.log_softmax(-1).gather(-1, y[..., None]).squeeze(-1)


@pytest.mark.parametrize("temperature", [1.0, 0.0, 0.7])
@pytest.mark.parametrize("block", [1 << 20, 37])  # one block; many blocks with a ragged last one (rows of 37 // V)
def test_values_and_gradients_match_the_plain_log_softmax(monkeypatch, temperature, block):
    monkeypatch.setattr(lm_head, "BLOCK_ELEMENTS", block)
    g = torch.Generator().manual_seed(0)
    h0, w0 = torch.randn(3, 7, 5, generator=g), torch.randn(11, 5, generator=g)
    y, upstream = torch.randint(0, 11, (3, 7), generator=g), torch.randn(3, 7, generator=g)
    results = []
    for fn in (plain, token_logprobs):
        h, w = h0.clone().requires_grad_(), w0.clone().requires_grad_()
        out = fn(h, w, y, temperature)
        (out * upstream).sum().backward()
        results.append((out.detach(), h.grad, w.grad))
    assert results[1][0].shape == (3, 7)
    for ref, got in zip(results[0], results[1], strict=True):
        torch.testing.assert_close(got, ref, rtol=1e-5, atol=1e-6)


def test_gradient_for_one_input_only_and_no_grad():
    g = torch.Generator().manual_seed(1)
    h, w, y = torch.randn(6, 4, generator=g), torch.randn(9, 4, generator=g, requires_grad=True), torch.arange(6)
    token_logprobs(h, w, y).sum().backward()  # h needs no gradient
    assert h.grad is None and w.grad is not None
    with torch.no_grad():
        torch.testing.assert_close(token_logprobs(h, w, y), plain(h, w, y))


def test_bfloat16_autocast_runs_the_matmuls_in_bfloat16():
    g = torch.Generator().manual_seed(2)
    h, w, y = torch.randn(8, 16, generator=g), torch.randn(32, 16, generator=g, requires_grad=True), torch.arange(8)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got = token_logprobs(h, w, y)
        ref = plain(h, w, y)  # the plain path's matmul autocasts too; its log-softmax runs in float32 after it
    assert got.dtype == torch.float32
    torch.testing.assert_close(got, ref.float(), rtol=2e-2, atol=2e-2)
    got.sum().backward()
    assert w.grad.dtype == torch.float32 and torch.isfinite(w.grad).all()


def test_hidden_states_gives_the_model_its_logits_back_through_the_head():
    cfg = Model(hidden_size=16, num_layers=1, num_heads=2, num_kv_heads=2, intermediate_size=32)
    model = build_scratch(cfg, FakeTokenizer(), 0).eval()
    ids = torch.randint(2, 24, (2, 6), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        logits = model(input_ids=ids).logits
        with hidden_states(model) as head:
            hidden = model(input_ids=ids, logits_to_keep=4).logits
        assert head is model.get_input_embeddings().weight  # tied embeddings: the one matrix
        assert hidden.shape == (2, 4, 16)
        torch.testing.assert_close(hidden @ head.t(), logits[:, -4:], rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(model(input_ids=ids).logits, logits)  # the head is back after the block
        with hidden_states(model), hidden_states(model):  # nested blocks: the outer one restores the head
            pass
        torch.testing.assert_close(model(input_ids=ids).logits, logits)


def test_hidden_states_refuses_a_model_that_transforms_its_logits():
    cfg = Model(hidden_size=16, num_layers=1, num_heads=2, num_kv_heads=2, intermediate_size=32)
    model = build_scratch(cfg, FakeTokenizer(), 0)
    model.config.final_logit_softcapping = 30.0
    with pytest.raises(ValueError, match="transforms its logits"), hidden_states(model):
        pass

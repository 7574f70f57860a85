"""Scoring given completions (dsmath.generation.logprobs): the sampler's log-probs equal the scoring pass (what lets
them serve as pi_old), and the bucketed and shared-prompt forwards equal one forward, gradients included."""

from __future__ import annotations

import pytest
import torch

from dsmath.generation.logprobs import bucketed_logprobs, sequence_logprobs, shared_prefix_logprobs
from dsmath.generation.rollout import Rollout, left_pad, sample, unique_prompts
from tests.unit.tiny_lm import EOS, PAD, prompts_of
from tests.unit.tiny_lm import gpt2 as gpt2  # noqa: F401  (module fixture)
from tests.unit.tiny_lm import model as model  # noqa: F401  (module fixture)

# ----------------------------------------------------------------------------------------------------------------
# log-probs: sampling pass == scoring pass (what lets the sampler's log-probs serve as pi_old)


@pytest.mark.parametrize(("arch", "engine"), [("llama", "fast"), ("llama", "hf"), ("gpt2", "auto")])
@pytest.mark.parametrize("temperature", [1.0, 0.7, 0.0])
def test_sampled_logprobs_match_scoring_pass(request, arch, engine, temperature):
    model = request.getfixturevalue({"llama": "model", "gpt2": "gpt2"}[arch])
    def run(eos):
        return sample(model, prompts_of([3, 11, 7, 5]), max_new_tokens=16, eos_token_id=eos, pad_token_id=PAD,
                      temperature=temperature, top_p=0.9, seed=1, engine=engine)

    r = run([EOS, int(run([]).completion_ids[0, 3])])  # same draws: row 0 stops by its 4th token
    assert r.finished.any()  # some rows stopped early: right padding inside the scored batch
    scored = sequence_logprobs(model, r.input_ids, r.attention_mask, r.completion_ids.shape[1],
                               temperature=temperature)
    m = r.loss_mask.bool()
    torch.testing.assert_close(scored[m], r.logprobs[m], rtol=0, atol=1e-4)


def test_sequence_logprobs_differentiable(model):
    ids, mask = left_pad(prompts_of([4, 7]), PAD)
    assert sequence_logprobs(model, ids, mask, 0).shape == (2, 0)  # nothing to score (not the whole row)
    lp = sequence_logprobs(model, ids, mask, 3)
    assert lp.shape == (2, 3)
    lp.sum().backward()
    assert model.lm_head.weight.grad is not None and model.lm_head.weight.grad.abs().sum() > 0
    model.zero_grad(set_to_none=True)


def test_bucketed_logprobs_equal_one_forward_with_gradients(model):
    """Rows grouped by length, each group cut to its own padding: the log-probs of every real completion token and
    the gradient are those of one forward over the whole padded batch (up to floating-point order)."""
    r = sample(model, prompts_of([3, 11, 7, 5, 9, 2]), max_new_tokens=12, eos_token_id=[EOS], pad_token_id=PAD,
               temperature=1.0, seed=3)
    lengths = r.completion_mask.sum(-1)
    if lengths.min() == lengths.max():  # make the lengths differ: cut rows at different points
        r.completion_mask[:, 4:] = 0
        r.completion_mask[::2] = 1
    t, m = r.completion_ids.shape[1], r.completion_mask.bool()
    results = []
    for buckets in (1, 3, 6, 10):
        model.zero_grad(set_to_none=True)
        lp = bucketed_logprobs(model, r.input_ids, r.attention_mask, t, buckets=buckets)
        assert lp.shape == (6, t)
        (lp * m).sum().backward()
        results.append((lp.detach(), model.lm_head.weight.grad.clone()))
    for lp, grad in results[1:]:
        torch.testing.assert_close(lp[m], results[0][0][m], rtol=0, atol=1e-5)
        torch.testing.assert_close(grad, results[0][1], rtol=1e-4, atol=1e-5)
    model.zero_grad(set_to_none=True)


def _grouped_rollout(model, group: int = 3, seed: int = 3) -> Rollout:
    """Sampled rows whose prompts repeat in groups (a GRPO batch), with completions of differing lengths."""
    r = sample(model, [p for p in prompts_of([3, 11, 7, 5]) for _ in range(group)], max_new_tokens=12,
               eos_token_id=[EOS], pad_token_id=PAD, temperature=1.0, seed=seed)
    r.completion_mask[1::2, 5:] = 0  # make lengths differ inside a group and across groups
    r.completion_mask[2, 1:] = 0  # a one-token completion
    return r


def test_unique_prompts_inverts():
    ids, mask = left_pad([[5, 6], [7], [5, 6], [0, 7], [7]], PAD)  # [0, 7] pads to the same ids as [7], not mask
    u_ids, u_mask, inverse = unique_prompts(ids, mask)
    assert len(u_ids) == 3
    assert torch.equal(u_ids[inverse], ids) and torch.equal(u_mask[inverse], mask)


@pytest.mark.parametrize("arch", ["llama", "gpt2"])
@pytest.mark.parametrize("buckets", [1, 3])
def test_shared_prefix_logprobs_equal_one_forward_with_gradients(request, arch, buckets):
    """Each distinct prompt run once, its keys and values shared by the rows of its group: the log-probs of every
    completion token and the gradient are those of one forward per row (gpt2: absolute positions must continue
    from each prompt's real length)."""
    model = request.getfixturevalue({"llama": "model", "gpt2": "gpt2"}[arch])
    r = _grouped_rollout(model)
    t, m = r.completion_ids.shape[1], r.completion_mask.bool()
    model.zero_grad(set_to_none=True)
    ref = sequence_logprobs(model, r.input_ids, r.attention_mask, t)
    (ref * m).sum().backward()
    ref_grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad(set_to_none=True)
    lp = shared_prefix_logprobs(model, r.input_ids, r.attention_mask, t, buckets=buckets)
    assert lp.shape == ref.shape
    (lp * m).sum().backward()
    torch.testing.assert_close(lp[m], ref[m].detach(), rtol=0, atol=1e-5)
    for p, g in zip(model.parameters(), ref_grads, strict=True):
        torch.testing.assert_close(p.grad, g, rtol=1e-4, atol=5e-5)
    model.zero_grad(set_to_none=True)
    with torch.no_grad():  # temperature scales both the first token (from the prompt pass) and the rest
        hot = shared_prefix_logprobs(model, r.input_ids, r.attention_mask, t, buckets=buckets, temperature=0.7)
        torch.testing.assert_close(hot[m], sequence_logprobs(model, r.input_ids, r.attention_mask, t,
                                                             temperature=0.7)[m], rtol=0, atol=1e-5)


def test_shared_prefix_gradient_is_bitwise_reproducible(model):
    """The rows of a group read their prompt's keys through a matmul, not advanced indexing (whose accumulating
    backward on CPU sums in a varying order): two backward passes give the same gradient bit for bit."""
    r = _grouped_rollout(model)
    grads = []
    for _ in range(2):
        model.zero_grad(set_to_none=True)
        lp = shared_prefix_logprobs(model, r.input_ids, r.attention_mask, r.completion_ids.shape[1], buckets=2)
        (lp * r.completion_mask).sum().backward()
        grads.append([p.grad.clone() for p in model.parameters()])
    assert all(torch.equal(a, b) for a, b in zip(*grads, strict=True))
    model.zero_grad(set_to_none=True)


def test_shared_prefix_logprobs_without_repeats_is_the_bucketed_forward(model):
    r = sample(model, prompts_of([3, 11, 7]), max_new_tokens=6, eos_token_id=[EOS], pad_token_id=PAD,
               temperature=1.0, seed=2)
    t = r.completion_ids.shape[1]
    with torch.no_grad():
        assert torch.equal(shared_prefix_logprobs(model, r.input_ids, r.attention_mask, t, buckets=2),
                           bucketed_logprobs(model, r.input_ids, r.attention_mask, t, buckets=2))

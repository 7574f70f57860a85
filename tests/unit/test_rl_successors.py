"""GRPO's successors as options of the same engine, against hand-computed values: RLOO's leave-one-out baseline,
GSPO's sequence-level ratio, DAPO's soft overlong punishment (and the engine stepping with each)."""

from __future__ import annotations

import math

import pytest
import torch
from torch.testing import assert_close

from dsmath.config import Rl
from dsmath.rl.advantages import leave_one_out_advantages, overlong_penalty
from dsmath.rl.losses import policy_loss, sequence_ratio, token_clip
from dsmath.rl.trainer import RLTrainer
from tests.unit.test_rl_trainer import PROBLEMS, LengthScorer, tiny_model
from tests.unit.test_rl_trainer import tok as tok  # noqa: F401  (module fixture)


def test_rloo_hand_computed():
    # group [1, 0, 0, 1]: A_0 = 1 - (0 + 0 + 1) / 3 = 2/3, A_1 = 0 - 2/3; group of equal 0.1s: exactly 0
    a = leave_one_out_advantages(torch.tensor([1.0, 0.0, 0.0, 1.0, 0.1, 0.1, 0.1, 0.1]), 4)
    assert_close(a[:4], torch.tensor([2 / 3, -2 / 3, -2 / 3, 2 / 3]))
    assert torch.equal(a[4:], torch.zeros(4))


def test_overlong_penalty_hand_computed():
    lengths = torch.tensor([10, 12, 14, 16, 20])
    # max 16, buffer 4: free up to 12; 14 -> -(2/4); 16 -> -1; beyond stays -1 (times factor 0.5)
    assert_close(overlong_penalty(lengths, 16, 4, 0.5), torch.tensor([0.0, 0.0, -0.25, -0.5, -0.5]))
    assert torch.equal(overlong_penalty(lengths, 16, 0), torch.zeros(5))
    with pytest.raises(ValueError, match="overlong buffer"):
        overlong_penalty(lengths, 16, 16)


def test_sequence_ratio_is_the_length_normalised_product_over_policy_tokens():
    old = torch.zeros(2, 4)
    lp = torch.tensor([[0.2, -0.1, 0.5, 9.0], [0.3, 0.3, 9.0, 9.0]])  # 9.0: masked (a hole / padding)
    mask = torch.tensor([[1, 1, 0, 1], [1, 1, 0, 0]])
    r = sequence_ratio(lp, old, mask)
    assert_close(r[0], torch.full((4,), math.exp((0.2 - 0.1 + 9.0) / 3)))
    assert_close(r[1], torch.full((4,), math.exp(0.3)))
    assert_close(token_clip(lp, old, torch.ones(2, 4), mask, clip_low=0.2, clip_high=0.2)[1], torch.exp(lp))


def test_gspo_clips_whole_sequences():
    """Output 0's sequence ratio e^0.3 = 1.35 > 1 + eps with A > 0: clipped, no gradient for any of its tokens, even
    the token whose own ratio (e^-0.3) is inside the range; output 1 (ratio 1) gets the plain gradient."""
    lp = torch.tensor([[0.9, -0.3], [0.0, 0.0]], requires_grad=True)
    loss, stats = policy_loss(lp, torch.zeros(2, 2), torch.tensor([1.0, 1.0]), torch.ones(2, 2), clip_eps=0.2,
                              importance_ratio="sequence")
    assert_close(loss, torch.tensor(-(1.2 + 1.0) / 2))
    loss.backward()
    assert torch.equal(lp.grad[0], torch.zeros(2))
    assert_close(lp.grad[1], torch.tensor([-0.25, -0.25]))  # d(-s*A)/dlp_t = -s*A/|o| / G
    assert stats["clip_frac_high"] == pytest.approx(0.5)


@pytest.mark.parametrize("kw", [dict(advantage="rloo"), dict(importance_ratio="sequence", clip_eps=3e-4),
                                dict(overlong_buffer=4, overlong_penalty=1.0)])
def test_engine_steps_with_each_successor_option(tok, kw):
    model = tiny_model(tok)
    before = [p.detach().clone() for p in model.parameters()]
    base = dict(steps=1, prompts_per_step=2, group_size=4, max_new_tokens=8, lr=1e-2, warmup_steps=0, eval_every=0,
                mode="cot", train_buckets=1, share_prompts=False)
    m = RLTrainer(Rl(**(base | kw)), model, tok, PROBLEMS, LengthScorer(), seed=1).step()
    assert m["rl/trained_rows"] == 8 and all(v == v for v in m.values())
    assert any(not torch.equal(p, b) for p, b in zip(model.parameters(), before, strict=True))


def test_overlong_shaping_lowers_the_reward_of_outputs_that_hit_the_budget(tok):
    base = dict(steps=1, prompts_per_step=2, group_size=4, max_new_tokens=8, lr=1e-2, warmup_steps=0, eval_every=0,
                mode="cot", train_buckets=1, share_prompts=False)
    plain = RLTrainer(Rl(**base), tiny_model(tok), tok, PROBLEMS, LengthScorer(constant=1.0), seed=1)
    shaped = RLTrainer(Rl(**(base | dict(overlong_buffer=4))), tiny_model(tok), tok, PROBLEMS,
                       LengthScorer(constant=1.0), seed=1)
    b0, _, _ = plain.collect()
    b1, _, _ = shaped.collect()
    lengths = b0.rollout.completion_mask.sum(dim=1)
    assert torch.equal(b0.rollout.completion_ids, b1.rollout.completion_ids)  # same samples
    assert_close(b1.scores.rewards, 1.0 + overlong_penalty(lengths, 8, 4))
    assert (lengths > 4).any()  # the check is not vacuous: some outputs fall in the buffer


def test_successor_options_are_refused_where_they_make_no_sense():
    with pytest.raises(ValueError, match="rloo is a GRPO advantage"):
        Rl(algorithm="ppo", advantage="rloo")
    with pytest.raises(ValueError, match="overlong_buffer"):
        Rl(max_new_tokens=16, overlong_buffer=16)

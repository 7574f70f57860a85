"""The RL engine's defects found in review, each pinned by a test on tool-shaped masks (a hole where the interpreter's
output sits, padding at the end): PPO's reward placement and GAE, Dr. GRPO's constant normaliser, the flat-group
count, one meaning of rl/kl, the zero-advantage skip keeping the objective's denominators, dynamic sampling, the
algorithm registry and the params combinations it relies on."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch.testing import assert_close

from dsmath.config import ParamsError, Rl, load_raw, merge, parse_params
from dsmath.generation.rollout import Rollout, concat_rollouts
from dsmath.rl import ppo
from dsmath.rl.advantages import equal_reward_groups
from dsmath.rl.losses import AGGREGATIONS, kl_k3, policy_loss
from dsmath.rl.registry import ALGORITHMS, REGISTRIES
from dsmath.rl.scoring import Scores
from dsmath.rl.trainer import RLTrainer
from tests.unit.test_rl_trainer import PROBLEMS, LengthScorer, tiny_model
from tests.unit.test_rl_trainer import tok as tok  # noqa: F401  (module fixture)

ROOT = Path(__file__).resolve().parents[2]

# policy tokens 0-2, the tool output 3-5 (hole), policy tokens 6-7, padding 8-9
TOOL_MASK = torch.tensor([[1, 1, 1, 0, 0, 0, 1, 1, 0, 0],
                          [1, 1, 0, 0, 1, 1, 1, 1, 1, 1]])  # fmt: skip


# ---------------------------------------------------------------- PPO: reward on the last policy token, GAE over holes


def test_last_token_index_is_the_last_policy_token_not_the_count():
    assert ppo.last_token_index(TOOL_MASK).tolist() == [7, 9]
    assert ppo.last_token_index(torch.zeros(1, 4)).tolist() == [0]


def test_ppo_score_goes_on_the_last_policy_token():
    zeros = torch.zeros(2, 10)
    r = ppo.kl_penalised_rewards(torch.tensor([1.0, 2.0]), zeros, zeros, TOOL_MASK, kl_coef=0.1)
    expected = torch.zeros(2, 10)
    expected[0, 7], expected[1, 9] = 1.0, 2.0
    assert_close(r, expected)


def test_raising_the_score_raises_every_policy_token_advantage_by_exactly_one():
    """gamma = lam = 1, zero values: the outcome reaches every policy token, before and after the tool hole."""
    lp, ref = torch.randn(2, 10), torch.randn(2, 10)
    values = torch.zeros(2, 10)

    def advantages(scores):
        rewards = ppo.kl_penalised_rewards(scores, lp, ref, TOOL_MASK, kl_coef=0.05)
        return ppo.gae(rewards, values, TOOL_MASK, gamma=1.0, lam=1.0)[0]

    delta = advantages(torch.tensor([1.0, 1.0])) - advantages(torch.tensor([0.0, 0.0]))
    assert_close(delta, TOOL_MASK.float())


def test_gae_carries_value_and_advantage_across_the_hole():
    """gamma = 1, lam = 0: A_t = r_t + V_next - V_t, V_next the next *policy* token's value (not the hole's 0)."""
    values = torch.arange(10, dtype=torch.float32)[None].expand(2, 10).clone()
    rewards = torch.zeros(2, 10)
    adv, returns = ppo.gae(rewards, values, TOOL_MASK, gamma=1.0, lam=0.0)
    assert adv[0, 2] == values[0, 6] - values[0, 2]  # token 2's successor is token 6, past the hole
    assert adv[0, 7] == -values[0, 7]  # the last policy token: V after it is 0
    assert torch.equal(adv * (1 - TOOL_MASK), torch.zeros(2, 10))
    assert torch.equal(returns * (1 - TOOL_MASK), torch.zeros(2, 10))


# ---------------------------------------------------------------- Dr. GRPO: a constant normaliser


def test_dr_grpo_loss_does_not_depend_on_the_padded_width():
    torch.manual_seed(0)
    lp, adv = torch.randn(2, 10), torch.tensor([1.0, -0.5])
    wide_lp, wide_mask = torch.cat([lp, torch.randn(2, 7)], 1), torch.cat([TOOL_MASK, torch.zeros(2, 7)], 1)
    kw = dict(clip_eps=0.2, aggregation="seq-mean-token-sum-norm", max_tokens=32)
    a, _ = policy_loss(lp, lp.detach(), adv, TOOL_MASK, **kw)
    b, _ = policy_loss(wide_lp, wide_lp.detach(), adv, wide_mask, **kw)
    assert_close(a, b)
    assert_close(a, -(1.0 * 5 - 0.5 * 8) / 32 / 2 * torch.ones(()))  # -(sum_i A_i |o_i|) / max_tokens / G
    with pytest.raises(ValueError, match="max_tokens"):
        policy_loss(lp, lp.detach(), adv, TOOL_MASK, clip_eps=0.2, aggregation="seq-mean-token-sum-norm")


# ---------------------------------------------------------------- flat groups counted exactly


def test_equal_reward_groups_is_exact():
    assert torch.tensor([0.1] * 8).view(1, 8).std(dim=1) != 0  # ~8e-9, not 0: a `std == 0` test undercounts
    r = torch.tensor([0.1] * 8 + [1.1] * 7 + [0.1])
    assert equal_reward_groups(r, 8).tolist() == [True, False]


def test_zero_std_groups_metric_counts_groups_of_non_integer_equal_rewards(tok):
    trainer = RLTrainer(Rl(**_cfg(prompts_per_step=1, group_size=8)), tiny_model(tok), tok, PROBLEMS,
                        LengthScorer(constant=0.1), seed=1)
    assert trainer.step()["rl/zero_std_groups"] == 1.0


# ---------------------------------------------------------------- rl/kl: one quantity on every step


def _cfg(**kw):
    return dict(steps=2, prompts_per_step=2, group_size=4, max_new_tokens=8, lr=1e-2, warmup_steps=0, beta=0.04,
                eval_every=0, mode="cot", train_buckets=1, share_prompts=False) | kw


def test_rl_kl_is_the_sampling_policy_to_reference_kl_on_every_step(tok):
    """rl/kl is the configured estimator between the sampler and the reference over all policy tokens of the batch,
    on update and no-update steps alike; the in-loss value is logged apart as rl/kl_loss."""
    for scorer, skip in ((LengthScorer(), False), (LengthScorer(constant=1.0), True)):
        trainer = RLTrainer(Rl(**_cfg(skip_zero_advantage=skip)), tiny_model(tok), tok, PROBLEMS, scorer, seed=1)
        trainer.step()  # moves the policy away from the reference (step 1 has policy == reference)
        seen = {}
        original = trainer.update

        def spy(ro, adv, ref_lp, keep, extra, _orig=original, seen=seen):
            seen["kl"] = float((kl_k3(ro.logprobs, ref_lp) * ro.loss_mask).sum() / ro.loss_mask.sum())
            return _orig(ro, adv, ref_lp, keep, extra)

        trainer.update = spy
        m = trainer.step()
        assert m["rl/kl"] == pytest.approx(seen["kl"], rel=1e-6, abs=1e-9)
        assert ("rl/kl_loss" in m) == (not skip)


# ---------------------------------------------------------------- the zero-advantage skip keeps the denominators


@pytest.mark.parametrize("aggregation", ["seq-mean-token-mean", "token-mean", "seq-mean-token-sum-norm"])
def test_skipping_zero_advantage_rows_leaves_the_policy_gradient_unchanged(tok, aggregation):
    """beta = 0: the loss of the kept rows, with the whole batch's denominators, has the faithful loss's gradient."""

    class HalfFlat(LengthScorer):  # group 0 mixed, group 1 all equal: half the rows have zero advantage
        def __call__(self, texts, golds):
            s = super().__call__(texts, golds)
            r = s.rewards.clone()
            r[4:] = 1.0
            r[:4] = torch.tensor([1.0, 0.0, 1.0, 0.0])
            return Scores(texts, r, r.clone(), torch.ones_like(r))

    grads = {}
    for skip in (False, True):
        t = RLTrainer(Rl(**_cfg(beta=0.0, skip_zero_advantage=skip, aggregation=aggregation)),
                      tiny_model(tok), tok, PROBLEMS, HalfFlat(), seed=1)
        params = [p for p in t.policy.parameters() if p.requires_grad]
        t._optimise = lambda loss, s=skip, ps=params: grads.__setitem__(s, torch.autograd.grad(loss, ps)) or {}
        m = t.step()
        assert m["rl/trained_rows"] == (4 if skip else 8)
    for a, b in zip(grads[False], grads[True], strict=True):
        assert_close(a, b, rtol=1e-4, atol=1e-8)
    assert max(float(g.abs().max()) for g in grads[False]) > 1e-4  # the comparison is not between zeros


# ---------------------------------------------------------------- dynamic sampling (DAPO)


class SpreadOnEvenAnswers:
    """Mixed rewards for questions with an even gold answer, equal rewards (all 0) for odd ones."""

    def __call__(self, texts, golds):
        r = torch.tensor([float(int(g) % 2 == 0 and i % 2 == 0) for i, g in enumerate(golds)])
        return Scores(texts, r, r.clone(), torch.ones_like(r))


def test_dynamic_sampling_fills_the_batch_with_groups_that_have_spread(tok):
    trainer = RLTrainer(Rl(**_cfg(prompts_per_step=4, dynamic_sampling=True, dynamic_sampling_rounds=8)),
                        tiny_model(tok), tok, PROBLEMS, SpreadOnEvenAnswers(), seed=2)
    batch, sampled, _ = trainer.collect()
    assert len(batch.problems) == 4 and len(batch.golds) == 16 and batch.rollout.completion_ids.shape[0] == 16
    assert all(int(p["answer"]) % 2 == 0 for p in batch.problems)
    assert not equal_reward_groups(batch.scores.rewards, 4).any()
    rounds = trainer.cursor // 4
    assert len(sampled.rewards) == rounds * 16 and rounds >= 2
    m = trainer.step()
    assert m["rl/zero_std_groups"] < 1.0 and m["rl/trained_rows"] == 16


def test_dynamic_sampling_fills_up_with_flat_groups_when_rounds_run_out(tok):
    trainer = RLTrainer(Rl(**_cfg(prompts_per_step=4, dynamic_sampling=True, dynamic_sampling_rounds=2)),
                        tiny_model(tok), tok, PROBLEMS, LengthScorer(constant=0.0), seed=2)
    batch, sampled, _ = trainer.collect()
    assert len(batch.problems) == 4 and trainer.cursor == 8 and len(sampled.rewards) == 32


def test_plain_sampling_takes_the_step_slice_of_the_stream(tok):
    trainer = RLTrainer(Rl(**_cfg()), tiny_model(tok), tok, PROBLEMS, LengthScorer(), seed=3)
    batch, _, _ = trainer.collect()
    assert batch.problems == trainer.prompt_batch(0) and trainer.cursor == 2


# ---------------------------------------------------------------- Rollout.select / concat


def _rollout(n, p, t, fill):
    ids = torch.full((n, p), fill)
    comp = torch.full((n, t), fill + 1)
    ones = torch.ones(n, t, dtype=torch.long)
    return Rollout(ids, torch.ones(n, p, dtype=torch.long), comp, ones, ones.clone(), torch.full((n, t), -0.5),
                   torch.ones(n, dtype=torch.bool), torch.arange(n))


def test_rollout_select_and_concat_keep_rows_intact():
    a, b = _rollout(2, 3, 4, 10), _rollout(3, 5, 2, 20)
    assert torch.equal(a.select([1]).tool_calls, torch.tensor([1]))
    c = concat_rollouts([a, b], pad_token_id=0)
    assert c.prompt_ids.shape == (5, 5) and c.completion_ids.shape == (5, 4)
    assert c.prompt_ids[0].tolist() == [0, 0, 10, 10, 10] and c.prompt_mask[0].tolist() == [0, 0, 1, 1, 1]
    assert c.completion_ids[2].tolist() == [21, 21, 0, 0] and c.loss_mask[2].tolist() == [1, 1, 0, 0]
    assert c.logprobs[2].tolist() == [-0.5, -0.5, 0.0, 0.0]
    assert torch.equal(c.select([2, 3, 4]).prompt_ids[:, -5:], b.prompt_ids)


# ---------------------------------------------------------------- the registry and the params it relies on


def test_every_configurable_algorithm_has_a_registry_entry():
    assert ALGORITHMS["rft"].sample_from_reference and ALGORITHMS["ppo"].critic and ALGORITHMS["grpo"].kl_in_loss
    assert not ALGORITHMS["online_rft"].ratio


@pytest.mark.parametrize("key", sorted(REGISTRIES))
def test_the_params_choices_are_the_registry_names(key):
    """Every name of a registry is an accepted value of its params key and nothing else is; a bad name is refused
    naming the key and every choice."""
    registry = REGISTRIES[key]
    for name in registry:
        assert getattr(Rl(**{key: name}), key) == name
        assert callable(registry[name]) or key == "algorithm"
    with pytest.raises(ParamsError, match=rf"^rl\.{key}: must be one of '.*' \(got 'nope'\)$") as err:
        parse_params(merge(load_raw(ROOT / "params.yaml"), {"rl": {key: "nope"}}))
    assert all(repr(name) in str(err.value) for name in registry)


def test_faithful_objective_is_the_default():
    r = Rl()
    assert not r.skip_zero_advantage and not r.dynamic_sampling


@pytest.mark.parametrize(("kw", "match"), [
    (dict(algorithm="ppo", advantage="process"), "process is a GRPO advantage"),
    (dict(algorithm="rft", advantage="process"), "process is a GRPO advantage"),
    (dict(algorithm="ppo", dynamic_sampling=True), "dynamic_sampling"),
    (dict(dynamic_sampling_rounds=0), "dynamic_sampling_rounds"),
])
def test_invalid_rl_combinations_are_refused(kw, match):
    with pytest.raises((ValueError, ParamsError), match=match):
        Rl(**kw)


# ---------------------------------------------------------------- the other mask-taking functions on a tool mask


def test_aggregations_on_a_tool_mask_ignore_the_hole_and_the_padding():
    v = torch.arange(20, dtype=torch.float32).view(2, 10)
    w = torch.where(TOOL_MASK.bool(), v, torch.full_like(v, 1e6))  # huge values in the hole and the padding
    row0, row1 = (0 + 1 + 2 + 6 + 7), (10 + 11 + 14 + 15 + 16 + 17 + 18 + 19)
    assert_close(AGGREGATIONS["seq-mean-token-mean"](w, TOOL_MASK), torch.tensor((row0 / 5 + row1 / 8) / 2))
    assert_close(AGGREGATIONS["token-mean"](w, TOOL_MASK), torch.tensor((row0 + row1) / 13))
    assert_close(AGGREGATIONS["seq-mean-token-sum-norm"](w, TOOL_MASK, max_tokens=16),
                 torch.tensor((row0 + row1) / 16 / 2))


def test_whiten_and_value_loss_on_a_tool_mask():
    x = torch.where(TOOL_MASK.bool(), torch.randn(2, 10), torch.full((2, 10), 1e6))
    w = ppo.whiten(x, TOOL_MASK)
    on = TOOL_MASK.bool()
    assert torch.equal(w[~on], torch.zeros(int((~on).sum())))
    assert abs(float(w[on].mean())) < 1e-5 and abs(float(w[on].std(unbiased=False)) - 1) < 1e-4
    v, old, ret = torch.zeros(2, 10), torch.zeros(2, 10), torch.where(on, 1.0, 1e6)
    assert_close(ppo.value_loss(v, old, ret, TOOL_MASK, clip=0.2), torch.tensor(0.5))  # 0.5 * mean(1^2) on-mask


def test_policy_loss_statistics_count_policy_tokens_only():
    lp = torch.zeros(2, 10)
    old = torch.where(TOOL_MASK.bool(), torch.zeros(2, 10), torch.full((2, 10), -5.0))  # ratio e^5 off-mask
    _, stats = policy_loss(lp, old, torch.tensor([1.0, -1.0]), TOOL_MASK, clip_eps=0.2)
    assert stats["clip_frac"] == 0.0 and stats["ratio_max"] == pytest.approx(1.0)

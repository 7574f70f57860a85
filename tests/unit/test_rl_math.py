"""GRPO math against hand-computed values (DeepSeekMath eq. 3, 4 and sec. 4.1.2-4.1.3)."""

import math

import pytest
import torch
from torch.testing import assert_close

from dsmath.rl.advantages import group_advantages, process_advantages
from dsmath.rl.losses import AGGREGATIONS, kl_k1, kl_k2, kl_k3, policy_loss

SQRT3 = math.sqrt(3.0)


# ---------------------------------------------------------------- outcome advantages


def test_group_advantages_hand_computed():
    # group [1, 0, 0, 1]: mean 0.5, sample std sqrt(4 * 0.25 / 3) = 1/sqrt(3) -> A = +-0.5 * sqrt(3) = +-0.866
    # group [1, 0]: mean 0.5, sample std sqrt(0.5) -> A = +-0.707
    a = group_advantages(torch.tensor([1.0, 0, 0, 1, 1, 0, 0, 0]), group_size=4, eps=0.0)
    h = 0.5 * SQRT3
    assert_close(a, torch.tensor([h, -h, -h, h, 1.5, -0.5, -0.5, -0.5]))  # group 2: mean .25, std .5
    assert_close(group_advantages(torch.tensor([1.0, 0.0]), 2, eps=0.0), torch.tensor([0.7071068, -0.7071068]))


def test_all_equal_group_gives_zero_not_nan():
    a = group_advantages(torch.tensor([1.0, 1.0, 1.0, 0.0, 0.0, 0.0]), group_size=3)
    assert_close(a, torch.zeros(6))


def test_unscaled_advantages_dr_grpo():
    assert_close(group_advantages(torch.tensor([3.0, 1.0]), 2, scale=False), torch.tensor([1.0, -1.0]))


def test_group_shape_checked():
    with pytest.raises(ValueError, match="G=3"):
        group_advantages(torch.zeros(4), group_size=3)


# ---------------------------------------------------------------- process advantages


def test_process_advantages_hand_computed():
    # one group of G=2 outputs, seq_len 4. output 0: steps r=[1, 0] ending at tokens [1, 3];
    # output 1: one step r=[1] ending at token 2. Group step rewards {1, 0, 1}: mean 2/3, sample std 1/sqrt(3),
    # normalised: 1 -> (1/3)*sqrt(3) = 0.577, 0 -> -(2/3)*sqrt(3) = -1.155.
    # output 0: tokens 0-1 get 0.577 - 1.155 = -0.577, tokens 2-3 get -1.155; output 1: tokens 0-2 get 0.577, t3 0.
    r = torch.tensor([[1.0, 0.0], [1.0, 0.0]])
    ends = torch.tensor([[1, 3], [2, 0]])
    mask = torch.tensor([[True, True], [True, False]])
    a = process_advantages(r, ends, mask, group_size=2, seq_len=4, eps=0.0)
    p, n = 1 / SQRT3, -2 / SQRT3
    assert_close(a, torch.tensor([[p + n, p + n, n, n], [p, p, p, 0.0]]))


def test_process_advantages_match_a_loop():
    torch.manual_seed(0)
    g, s, t = 4, 3, 7
    r = torch.randint(0, 2, (2 * g, s)).float()
    ends = torch.sort(torch.randint(0, t, (2 * g, s)), dim=1).values
    mask = torch.rand(2 * g, s) > 0.3
    got = process_advantages(r, ends, mask, group_size=g, seq_len=t, eps=1e-6)
    want = torch.zeros(2 * g, t)
    for grp in range(2):
        rows = range(grp * g, grp * g + g)
        vals = torch.tensor([r[i, j] for i in rows for j in range(s) if mask[i, j]])
        mean, std = vals.mean(), (vals.std() if len(vals) > 1 else torch.tensor(0.0))
        for i in rows:
            for j in range(s):
                if mask[i, j]:
                    want[i, : ends[i, j] + 1] += (r[i, j] - mean) / (std + 1e-6)
    assert_close(got, want)


def test_process_all_equal_steps_zero():
    a = process_advantages(torch.ones(2, 2), torch.tensor([[0, 1], [0, 1]]), torch.ones(2, 2, dtype=torch.bool), 2, 3)
    assert_close(a, torch.zeros(2, 3))


def test_k3_hand_computed_nonnegative_and_zero_when_equal():
    # pi_theta = 0.5, pi_ref = 0.25: 0.5 - log(0.5) - 1 = 0.19315
    assert_close(kl_k3(torch.tensor([math.log(0.5)]), torch.tensor([math.log(0.25)])), torch.tensor([0.1931472]))
    lp, ref = torch.randn(1000), torch.randn(1000)
    assert (kl_k3(lp, ref) >= 0).all()
    assert_close(kl_k3(lp, lp), torch.zeros(1000))
    assert_close(kl_k1(torch.tensor([0.0]), torch.tensor([-1.0])), torch.tensor([1.0]))
    assert_close(kl_k2(torch.tensor([0.0]), torch.tensor([-2.0])), torch.tensor([2.0]))


def test_k3_is_unbiased_for_kl():
    # KL(p || q) for two categoricals vs the sample mean of k3 with tokens drawn from p
    p, q = torch.tensor([0.7, 0.2, 0.1]), torch.tensor([0.4, 0.4, 0.2])
    exact = float((p * (p / q).log()).sum())
    torch.manual_seed(0)
    idx = torch.multinomial(p, 200_000, replacement=True)
    est = float(kl_k3(p.log()[idx], q.log()[idx]).mean())
    assert abs(est - exact) < 0.01


# ---------------------------------------------------------------- aggregation


def test_aggregations_hand_computed():
    v = torch.tensor([[1.0, 2.0, 3.0], [4.0, 0.0, 0.0]])
    m = torch.tensor([[1, 1, 1], [1, 0, 0]])
    assert_close(AGGREGATIONS["seq-mean-token-mean"](v, m), torch.tensor(3.0))  # (2 + 4) / 2
    assert_close(AGGREGATIONS["token-mean"](v, m), torch.tensor(2.5))  # 10 / 4
    assert_close(AGGREGATIONS["seq-mean-token-sum-norm"](v, m, max_tokens=3), torch.tensor(5 / 3))  # (6/3 + 4/3) / 2


def test_fully_masked_row_is_ignored():
    v, m = torch.tensor([[1.0, 1.0], [5.0, 5.0]]), torch.tensor([[1, 1], [0, 0]])
    assert_close(AGGREGATIONS["seq-mean-token-mean"](v, m), torch.tensor(1.0))
    assert_close(AGGREGATIONS["token-mean"](v, m), torch.tensor(1.0))
    assert_close(AGGREGATIONS["token-mean"](v, torch.zeros(2, 2)), torch.tensor(0.0))


# ---------------------------------------------------------------- the clipped surrogate


def _lp(ratio: float, n: int = 2, t: int = 2):
    old = torch.full((n, t), math.log(0.3))
    return old + math.log(ratio), old


def test_loss_at_ratio_one_is_minus_mean_advantage():
    lp, old = _lp(1.0)
    lp.requires_grad_(True)
    loss, stats = policy_loss(lp, old, torch.tensor([2.0, -1.0]), torch.ones(2, 2), clip_eps=0.2)
    assert_close(loss, torch.tensor(-0.5))  # -(2 + -1) / 2
    assert stats["ratio_mean"] == pytest.approx(1.0) and stats["clip_frac"] == 0.0
    loss.backward()
    # d(-ratio*A)/d logprob = -ratio*A / (|o| * G) = -A / 4 per token
    assert_close(lp.grad, torch.tensor([[-0.5, -0.5], [0.25, 0.25]]))


@pytest.mark.parametrize(
    ("ratio", "adv", "loss", "clip_low", "clip_high", "grad_zero"),
    [
        (1.5, 1.0, -1.2, 0.0, 1.0, True),  # A > 0, ratio above 1 + eps: clipped at 1.2, no gradient
        (1.5, -1.0, 1.5, 0.0, 0.0, False),  # A < 0, ratio above: min picks unclipped -1.5, gradient flows
        (0.5, 1.0, -0.5, 0.0, 0.0, False),  # A > 0, ratio below: unclipped 0.5
        (0.5, -1.0, 0.8, 1.0, 0.0, True),  # A < 0, ratio below 1 - eps: clipped at 0.8 * -1
    ],
)
def test_clipping_both_sides_both_signs(ratio, adv, loss, clip_low, clip_high, grad_zero):
    lp, old = _lp(ratio)
    lp.requires_grad_(True)
    got, stats = policy_loss(lp, old, torch.full((2,), adv), torch.ones(2, 2), clip_eps=0.2)
    assert_close(got, torch.tensor(loss))
    assert stats["clip_frac_low"] == pytest.approx(clip_low) and stats["clip_frac_high"] == pytest.approx(clip_high)
    got.backward()
    assert bool((lp.grad == 0).all()) == grad_zero


def test_kl_term_added_with_beta():
    lp, old = _lp(1.0, n=1, t=1)
    ref = lp - math.log(2.0)  # pi_ref = pi_theta / 2 -> k3 = 0.5 - log 0.5 - 1 = 0.19315
    loss, stats = policy_loss(lp, old, torch.tensor([0.0]), torch.ones(1, 1), clip_eps=0.2, ref_logprobs=ref,
                              beta=0.1)
    assert_close(loss, torch.tensor(0.1 * 0.1931472))
    assert stats["kl"] == pytest.approx(0.1931472, rel=1e-5)


def test_unknown_names_list_valid_ones():
    lp, old = _lp(1.0)
    with pytest.raises(ValueError, match="k1, k2, k3"):
        policy_loss(lp, old, torch.zeros(2), torch.ones(2, 2), clip_eps=0.2, ref_logprobs=old, beta=0.1, kl="k4")
    with pytest.raises(ValueError, match="token-mean"):
        policy_loss(lp, old, torch.zeros(2), torch.ones(2, 2), clip_eps=0.2, aggregation="sum")


def test_equal_non_integer_rewards_give_exactly_zero_advantage():
    """The float mean of 8 x 0.1 is not 0.1; the residue over (0 + eps) must not become an advantage."""
    r = torch.tensor([0.1] * 8 + [1.1] * 8 + [0.0] * 4 + [1.0] * 4)
    a = group_advantages(r, 8)
    assert torch.equal(a[:16], torch.zeros(16))
    std = (8 * 0.25 / 7) ** 0.5  # Bessel-corrected
    assert torch.allclose(a[16:], torch.tensor([-1.0] * 4 + [1.0] * 4) * 0.5 / std, atol=1e-5)


def test_process_advantages_of_equal_step_rewards_are_exactly_zero():
    ends, mask = torch.tensor([[1, 3], [1, 3]]), torch.tensor([[True, True], [True, False]])
    a = process_advantages(torch.tensor([[0.1, 0.1], [0.1, -5.0]]), ends, mask, 2, 5)  # -5.0 is masked out
    assert torch.equal(a, torch.zeros(2, 5))

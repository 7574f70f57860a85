"""PPO pieces against hand-computed values: KL-penalised token rewards, GAE, whitening, clipped value loss."""

import torch
from torch.testing import assert_close

from dsmath.rl.ppo import gae, kl_penalised_rewards, value_loss, whiten


def test_kl_penalised_rewards_put_score_on_last_token():
    lp = torch.tensor([[-1.0, -1.0, -1.0], [-1.0, -2.0, 0.0]])
    ref = torch.tensor([[-1.5, -1.0, -1.0], [-1.0, -1.0, 0.0]])
    mask = torch.tensor([[1, 1, 1], [1, 1, 0]])
    r = kl_penalised_rewards(torch.tensor([1.0, 0.5]), lp, ref, mask, kl_coef=0.1)
    # row 0: -0.1 * (0.5, 0, 0) + score 1 on t=2; row 1: -0.1 * (0, -1) + score .5 on t=1, t=2 masked
    assert_close(r, torch.tensor([[-0.05, 0.0, 1.0], [0.0, 0.6, 0.0]]))


def test_gae_hand_computed():
    # one row, T=2, gamma=1, lam=0.5: V=(0.5, 0.25), r=(0, 1)
    # delta_1 = 1 + 0 - 0.25 = 0.75 -> A_1 = 0.75; delta_0 = 0 + 0.25 - 0.5 = -0.25 -> A_0 = -0.25 + 0.5*0.75 = 0.125
    adv, ret = gae(torch.tensor([[0.0, 1.0]]), torch.tensor([[0.5, 0.25]]), torch.ones(1, 2), gamma=1.0, lam=0.5)
    assert_close(adv, torch.tensor([[0.125, 0.75]]))
    assert_close(ret, torch.tensor([[0.625, 1.0]]))


def test_gae_ignores_padding():
    adv, _ = gae(torch.tensor([[1.0, 5.0]]), torch.tensor([[0.0, 9.0]]), torch.tensor([[1, 0]]), 1.0, 1.0)
    assert_close(adv, torch.tensor([[1.0, 0.0]]))  # the padded value 9 must not bootstrap into t=0


def test_whiten_and_value_loss():
    w = whiten(torch.tensor([[1.0, 3.0, 100.0]]), torch.tensor([[1, 1, 0]]))
    assert_close(w, torch.tensor([[-1.0, 1.0, 0.0]]), atol=1e-6, rtol=0)
    # V=2, V_old=0, R=1, clip .5: unclipped (2-1)^2=1, clipped V=.5 -> (.5-1)^2=.25, max=1 -> 0.5*1
    assert_close(value_loss(torch.tensor([[2.0]]), torch.tensor([[0.0]]), torch.tensor([[1.0]]), torch.ones(1, 1),
                            0.5), torch.tensor(0.5))

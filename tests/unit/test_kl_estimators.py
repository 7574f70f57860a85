"""The KL estimators of the GRPO loss against the exact KL(p || q) of two categoricals (DeepSeekMath eq. 4).

k1 and k3 are unbiased, k2 is biased (E_p[k2] = 0.1817 here against KL = 0.1838). A check loose enough to pass
k2 cannot tell an unbiased estimator from a biased one, so each check here is sharp enough to reject k2:
the exact expectation over the categories (no sampling), and a Monte-Carlo mean within 4 standard errors (the
standard error computed from the samples) with enough samples that k2's bias is dozens of standard errors.
"""

from __future__ import annotations

import math

import pytest
import torch

from dsmath.rl.losses import kl_k1, kl_k2, kl_k3

P = torch.tensor([0.7, 0.2, 0.1], dtype=torch.float64)  # the policy (samples are drawn from it)
Q = torch.tensor([0.4, 0.4, 0.2], dtype=torch.float64)  # the reference
EXACT = float((P * (P / Q).log()).sum())  # KL(p || q) = 0.18380...
N = 1_000_000
Z = 4.0  # tolerance in standard errors of the sample mean


def estimates(estimator) -> torch.Tensor:
    """The estimator's value for each category (policy log-prob first, reference second)."""
    return estimator(P.log(), Q.log())


def test_exact_expectations():
    assert EXACT == pytest.approx(0.1838, abs=1e-4)
    assert float((P * estimates(kl_k3)).sum()) == pytest.approx(EXACT, rel=1e-12, abs=0)
    assert float((P * estimates(kl_k1)).sum()) == pytest.approx(EXACT, rel=1e-12, abs=0)
    k2 = float((P * estimates(kl_k2)).sum())
    assert k2 == pytest.approx(0.1817, abs=1e-4) and abs(k2 - EXACT) > 2e-3  # biased low by 0.0021
    assert (estimates(kl_k3) >= 0).all() and (estimates(kl_k2) >= 0).all() and (estimates(kl_k1) < 0).any()


@pytest.fixture(scope="module")
def samples() -> torch.Tensor:
    return torch.multinomial(P, N, replacement=True, generator=torch.Generator().manual_seed(0))


def z_score(estimator, idx: torch.Tensor) -> tuple[float, float]:
    """(|sample mean - exact KL| in standard errors of the mean, the standard error)."""
    values = estimator(P.log()[idx], Q.log()[idx])
    se = float(values.std()) / math.sqrt(len(values))
    return abs(float(values.mean()) - EXACT) / se, se


@pytest.mark.parametrize("estimator", [kl_k3, kl_k1], ids=["k3", "k1"])
def test_unbiased_estimators_pass(estimator, samples):
    z, se = z_score(estimator, samples)
    assert z < Z, f"{estimator.__name__}: {z:.1f} standard errors ({se:.1e}) from the exact KL"


def test_biased_k2_is_rejected_by_the_same_check(samples):
    z, se = z_score(kl_k2, samples)
    assert z >= Z, f"k2 passed: only {z:.1f} standard errors ({se:.1e}) from the exact KL"
    assert Z * se < 2e-3  # the tolerance is far below k2's bias, so the verdict is not luck of the seed
    _, se3 = z_score(kl_k3, samples)
    assert Z * se3 < 1e-3  # k3's tolerance, too, is well under the bias it must detect
    k2_mean = float(kl_k2(P.log()[samples], Q.log()[samples]).mean())
    assert abs(k2_mean - EXACT) > Z * se3  # and k2 fails k3's tolerance as well

"""KL estimators against closed forms, and their sign properties."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from ascent.algos import KL_ESTIMATORS, kl_penalty_rewards

# pi = 0.5, pi_ref = 0.25 on the sampled token: log(pi / pi_ref) = log 2 = 0.693147.
LOGP = torch.tensor([[math.log(0.5)]], dtype=torch.float64)
REF = torch.tensor([[math.log(0.25)]], dtype=torch.float64)


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("k1", 0.693147),  # log 2
        ("k2", 0.240227),  # (log 2)^2 / 2
        ("k3", 0.193147),  # r - 1 - log r with r = pi_ref / pi = 0.5: 0.5 - 1 + log 2
    ],
)
def test_kl_estimators_match_hand_computation(name, expected):
    assert KL_ESTIMATORS.get(name)(LOGP, REF).item() == pytest.approx(expected, abs=1e-6)


def test_k3_clamps_the_log_ratio_instead_of_overflowing():
    logp = torch.tensor([-120.0, -1.0])
    ref = torch.tensor([-1.0, -120.0])
    got = KL_ESTIMATORS.get("k3")(logp, ref)
    assert torch.isfinite(got).all()
    # log r clamped to +20 and -20: exp(20) - 20 - 1 and exp(-20) + 20 - 1.
    torch.testing.assert_close(got, torch.tensor([math.exp(20) - 21, math.exp(-20) + 19]))


logps = st.lists(st.floats(-30, 0), min_size=1, max_size=8)


@settings(max_examples=60, deadline=None)
@given(logps, st.data())
def test_k3_and_k2_are_non_negative_and_vanish_at_equality(logp, data):
    ref = data.draw(st.lists(st.floats(-30, 0), min_size=len(logp), max_size=len(logp)))
    logp_t = torch.tensor(logp, dtype=torch.float64)
    ref_t = torch.tensor(ref, dtype=torch.float64)
    assert (KL_ESTIMATORS.get("k3")(logp_t, ref_t) >= 0).all()
    assert (KL_ESTIMATORS.get("k2")(logp_t, ref_t) >= 0).all()
    assert (KL_ESTIMATORS.get("k3")(logp_t, logp_t) == 0).all()
    assert (KL_ESTIMATORS.get("k2")(logp_t, logp_t) == 0).all()


def test_kl_penalty_is_subtracted_on_masked_tokens_without_gradient():
    rewards = torch.tensor([[0.0, 0.0, 1.0, 0.0]])
    kl = torch.tensor([[0.5, 1.0, 2.0, 7.0]], requires_grad=True)
    mask = torch.tensor([[1, 1, 1, 0]])
    shaped = kl_penalty_rewards(rewards, kl, 0.1, mask)
    torch.testing.assert_close(shaped, torch.tensor([[-0.05, -0.1, 0.8, 0.0]]))
    assert not shaped.requires_grad


def test_k3_is_not_negative_for_a_log_ratio_too_small_for_exp_minus_one():
    """Found by the property test above: exp(x) - x - 1 is -1.1e-16 at x = 1.92e-12."""
    logp = torch.tensor([-1.9212360904529966e-12, 0.0, -3e-9], dtype=torch.float64)
    ref = torch.tensor([0.0, -1e-15, 0.0], dtype=torch.float64)
    values = KL_ESTIMATORS.get("k3")(logp, ref)
    assert (values >= 0).all()
    x = ref - logp  # k3 = x^2 / 2 + x^3 / 6 + ..., off by at most a rounding of x
    series = x**2 / 2 + x**3 / 6
    assert ((values - series).abs() <= 2 * torch.finfo(torch.float64).eps * x.abs()).all()

"""Value loss and explained variance against hand computations."""

from __future__ import annotations

import math

import pytest
import torch

from ascent.algos import explained_variance, value_loss


def test_clipped_value_loss_matches_hand_computation():
    values = torch.tensor([[1.0, 2.0, 2.0, 5.0]], requires_grad=True)
    old = torch.tensor([[1.5, 1.0, 1.0, 0.0]])
    returns = torch.tensor([[2.0, 1.0, 3.0, 0.0]])
    mask = torch.tensor([[1, 1, 1, 0]])
    loss, metrics = value_loss(values, old, returns, mask, clip=0.2)
    # t0: 0.5*(1-2)^2 = 0.5 vs clipped v = 1.5 - 0.2 = 1.3: 0.5*0.49 = 0.245 -> 0.5.
    # t1: 0.5*(2-1)^2 = 0.5 vs clipped v = 1.2: 0.5*0.04 = 0.02 -> 0.5.
    # t2: 0.5*(2-3)^2 = 0.5 vs clipped v = 1.2: 0.5*1.8^2 = 1.62 -> 1.62 (clipped wins).
    # t3: padding -> 0.
    torch.testing.assert_close(loss, torch.tensor([[0.5, 0.5, 1.62, 0.0]]))
    assert metrics["value_clip_frac"].item() == pytest.approx(1 / 3)
    loss.sum().backward()
    # d/dv 0.5 (v - R)^2 = v - R; the clipped token's loss does not depend on v.
    torch.testing.assert_close(values.grad, torch.tensor([[-1.0, 1.0, 0.0, 0.0]]))


def test_unclipped_value_loss_is_half_squared_error():
    values, returns = torch.tensor([[1.0, 3.0]]), torch.tensor([[0.0, 1.0]])
    loss, metrics = value_loss(values, None, returns, torch.ones(1, 2), clip=None)
    torch.testing.assert_close(loss, torch.tensor([[0.5, 2.0]]))
    assert metrics == {}


def test_clip_without_old_values_is_refused():
    with pytest.raises(ValueError, match="old_values"):
        value_loss(torch.zeros(1, 1), None, torch.zeros(1, 1), torch.ones(1, 1), clip=0.2)


def test_explained_variance_matches_hand_computation():
    returns = torch.tensor([[1.0, 2.0, 3.0, 4.0, 100.0]])
    values = torch.tensor([[1.0, 2.0, 3.0, 3.0, -100.0]])
    mask = torch.tensor([[1, 1, 1, 1, 0]])
    # Residuals (0, 0, 0, 1): variance 0.25 - 0.0625 = 0.1875; Var[R] = 1.25.
    # 1 - 0.1875 / 1.25 = 0.85.
    assert explained_variance(values, returns, mask).item() == pytest.approx(0.85)


def test_explained_variance_of_constant_returns_is_nan():
    got = explained_variance(torch.zeros(1, 3), torch.ones(1, 3), torch.ones(1, 3))
    assert math.isnan(got.item())

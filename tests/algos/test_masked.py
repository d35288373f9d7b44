"""Masked statistics against hand computations."""

from __future__ import annotations

import pytest
import torch

from ascent.algos import masked_mean, masked_sum, masked_var, masked_whiten

X = torch.tensor([[1.0, 2.0, 3.0, float("nan")]])
MASK = torch.tensor([[1, 1, 1, 0]])


def test_masked_statistics_ignore_masked_out_entries_even_nan():
    assert masked_sum(X, MASK).item() == 6.0
    assert masked_mean(X, MASK).item() == 2.0
    assert masked_var(X, MASK).item() == pytest.approx(2 / 3)  # ((-1)^2 + 0 + 1^2) / 3
    assert masked_var(X, MASK, unbiased=True).item() == pytest.approx(1.0)  # 2 / 2


def test_masked_mean_along_a_dimension_and_of_nothing():
    x = torch.tensor([[1.0, 3.0], [5.0, 7.0]])
    mask = torch.tensor([[1, 1], [0, 0]])
    torch.testing.assert_close(masked_mean(x, mask, dim=-1), torch.tensor([2.0, 0.0]))


def test_masked_whiten_matches_hand_computation():
    # mean 2, std sqrt(2/3) = 0.816497: (-1, 0, 1) / 0.816497 = (-1.224745, 0, 1.224745).
    got = masked_whiten(X, MASK, eps=0.0)
    torch.testing.assert_close(got, torch.tensor([[-1.224745, 0.0, 1.224745, 0.0]]))
    kept_mean = masked_whiten(X, MASK, shift_mean=False, eps=0.0)
    torch.testing.assert_close(kept_mean, torch.tensor([[0.775255, 2.0, 3.224745, 0.0]]))

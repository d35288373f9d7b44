"""VAPO's positive-sample NLL and DAPO's soft overlong penalty against hand computations."""

from __future__ import annotations

import pytest
import torch

from ascent.algos import AggregationScale, positive_nll, soft_overlong_penalty
from ascent.algos.aggregation import token_mean


def test_positive_nll_is_the_mean_negative_logprob_of_the_correct_rows_tokens():
    logp = torch.tensor([[-1.0, -2.0, -9.0], [-3.0, -4.0, -5.0], [-0.5, -9.0, -9.0]])
    mask = torch.tensor([[1, 1, 0], [1, 1, 1], [1, 0, 0]])
    positive = torch.tensor([True, False, True])
    per_token = positive_nll(logp, mask, positive)
    torch.testing.assert_close(
        per_token, torch.tensor([[1.0, 2.0, 0.0], [0.0, 0.0, 0.0], [0.5, 0.0, 0.0]])
    )
    # Aggregated over the 3 tokens of the correct rows: (1 + 2 + 0.5) / 3.
    scale = AggregationScale.from_mask(mask * positive[:, None])
    assert float(token_mean(per_token, mask, scale)) == pytest.approx(3.5 / 3)


def test_positive_nll_gradient_raises_the_likelihood_of_correct_tokens_only():
    logp = torch.tensor([[-1.0, -2.0], [-1.0, -2.0]], requires_grad=True)
    positive_nll(logp, torch.ones(2, 2), torch.tensor([True, False])).sum().backward()
    torch.testing.assert_close(logp.grad, torch.tensor([[-1.0, -1.0], [0.0, 0.0]]))


def test_soft_overlong_penalty_ramps_linearly_over_the_buffer():
    # L_max = 10, L_cache = 4: 0 up to length 6, then -(l - 6) / 4, -1 at 10.
    lengths = torch.tensor([3, 6, 7, 8, 10])
    penalty = soft_overlong_penalty(lengths, max_length=10, buffer=4, penalty=1.0)
    torch.testing.assert_close(penalty, torch.tensor([0.0, 0.0, -0.25, -0.5, -1.0]))
    half = soft_overlong_penalty(lengths, max_length=10, buffer=4, penalty=0.5)
    torch.testing.assert_close(half, penalty * 0.5)


def test_soft_overlong_penalty_refuses_a_buffer_outside_the_length():
    with pytest.raises(ValueError, match="buffer"):
        soft_overlong_penalty(torch.tensor([1]), max_length=4, buffer=5)

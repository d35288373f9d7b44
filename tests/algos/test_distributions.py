"""Log-probabilities and entropies from logits against closed forms."""

from __future__ import annotations

import math

import pytest
import torch

from ascent.algos import entropy_from_logits, logprobs_from_logits


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_logprobs_match_hand_computation(dtype):
    # Probabilities (1/4, 3/4) from logits (0, log 3); a second row (1/2, 1/2).
    logits = torch.tensor([[[0.0, math.log(3)], [5.0, 5.0]]], dtype=dtype)
    tokens = torch.tensor([[1, 0]])
    got = logprobs_from_logits(logits, tokens)
    assert got.dtype in (torch.float32, torch.float64)
    tol = 2e-2 if dtype == torch.bfloat16 else 1e-6
    torch.testing.assert_close(
        got.double(),
        torch.tensor([[math.log(0.75), math.log(0.5)]], dtype=torch.float64),
        atol=tol,
        rtol=0,
    )


def test_logprobs_are_differentiable():
    logits = torch.zeros(1, 1, 4, requires_grad=True)
    logprobs_from_logits(logits, torch.tensor([[2]])).sum().backward()
    # d log softmax(z)_y / dz = onehot(y) - softmax(z) = (-1/4, -1/4, 3/4, -1/4).
    torch.testing.assert_close(logits.grad, torch.tensor([[[-0.25, -0.25, 0.75, -0.25]]]))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_entropy_of_uniform_and_peaked_distributions(dtype):
    uniform = [3.0, 3.0, 3.0, 3.0]  # H = log 4 = 1.386294
    peaked = [math.log(p) for p in (0.7, 0.1, 0.1, 0.1)]
    # H = -(0.7 log 0.7 + 3 * 0.1 log 0.1) = 0.249672 + 0.690776 = 0.940448
    logits = torch.tensor([[uniform, peaked]], dtype=dtype)
    got = entropy_from_logits(logits)
    tol = 2e-2 if dtype == torch.bfloat16 else 1e-5
    torch.testing.assert_close(got, torch.tensor([[1.386294, 0.940448]]), atol=tol, rtol=0)


def test_entropy_is_finite_when_a_probability_underflows():
    got = entropy_from_logits(torch.tensor([0.0, -1e4]))
    assert torch.isfinite(got) and abs(got.item()) < 1e-6


def test_bf16_logits_are_divided_by_the_temperature_after_the_upcast():
    # What the sampler does: float32 logits / T. Dividing in bf16 first rounds the scaled
    # logits, and the log-probs drift from the sampler's (the PPO ratio would not be 1).
    gen = torch.Generator().manual_seed(0)
    logits = (torch.randn(2, 6, 5000, generator=gen) * 8).to(torch.bfloat16)
    tokens = torch.randint(0, 5000, (2, 6), generator=gen)
    reference = torch.log_softmax(logits.float() / 0.7, -1).gather(-1, tokens[..., None])[..., 0]
    ours = logprobs_from_logits(logits, tokens, 0.7)
    assert torch.allclose(ours, reference, atol=1e-5)
    rounded_first = logprobs_from_logits(logits / 0.7, tokens)
    assert (rounded_first - reference).abs().max() > 1e-3

"""Temperature, top-k, top-p and greedy choose the tokens they promise, with the right log-prob."""

from __future__ import annotations

import pytest
import torch

from ascent.rollout import SamplingParams, sample_next

LOGITS = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]]))


def draw(params: SamplingParams, n: int = 4000, logits: torch.Tensor = LOGITS) -> torch.Tensor:
    gen = torch.Generator().manual_seed(0)
    tokens, _ = sample_next(logits.expand(n, -1), params, gen)
    return torch.bincount(tokens, minlength=logits.shape[-1]).float() / n


@pytest.mark.parametrize("temperature", [0.5, 1.0, 2.0])
def test_temperature_frequencies_and_logprobs_follow_softmax_of_scaled_logits(temperature):
    expected = torch.softmax(LOGITS[0] / temperature, -1)
    freq = draw(SamplingParams(1, temperature=temperature))
    assert torch.allclose(freq, expected, atol=0.03)
    tokens, logp = sample_next(LOGITS.expand(16, -1), SamplingParams(1, temperature), None)
    assert torch.allclose(logp, expected.log()[tokens], atol=1e-6)


def test_top_k_draws_only_the_k_likeliest():
    freq = draw(SamplingParams(1, top_k=2))
    assert freq[2:].sum() == 0
    assert torch.allclose(freq[:2], torch.tensor([0.625, 0.375]), atol=0.03)


@pytest.mark.parametrize(("top_p", "kept"), [(0.7, 2), (0.5, 1), (0.81, 3), (1.0, 4)])
def test_top_p_keeps_the_smallest_set_reaching_p(top_p, kept):
    freq = draw(SamplingParams(1, top_p=top_p))
    assert (freq > 0).sum() == kept


def test_logprob_refers_to_the_untruncated_policy():
    _, logp = sample_next(LOGITS.expand(8, -1), SamplingParams(1, top_k=1), None)
    assert torch.allclose(logp, torch.full((8,), 0.5).log())


def test_greedy_is_argmax_and_ignores_the_generator():
    logits = torch.randn(32, 10)
    tokens, _ = sample_next(logits, SamplingParams(1, greedy=True), None)
    assert torch.equal(tokens, logits.argmax(-1))


def test_invalid_sampling_params_are_refused():
    for bad in ({"temperature": 0.0}, {"top_p": 0.0}, {"top_k": -1}, {"max_new_tokens": 0}):
        with pytest.raises(ValueError):
            SamplingParams(**{"max_new_tokens": 4, **bad})


@pytest.mark.parametrize("v", [3 * 256 + 77, 3 * 256])
def test_draws_over_a_large_vocabulary_follow_the_probabilities_and_skip_zero_weights(v):
    """Vocabularies span several of the sampler's blocks (ending mid-block, or on a block's
    edge, where no padded copy is made): frequencies still match softmax, and a token
    truncated away (or of probability 0) is never drawn."""
    torch.manual_seed(0)
    logits = torch.full((1, v), -30.0)
    chosen = torch.tensor([3, 255, 256, 600, v - 1])  # block edges and the last token
    logits[0, chosen] = torch.tensor([0.0, 1.0, 0.5, -0.5, 2.0])
    freq = draw(SamplingParams(1), n=20000, logits=logits)
    expected = torch.softmax(logits[0], -1)
    assert torch.allclose(freq[chosen], expected[chosen], atol=0.015)
    assert freq.sum() == pytest.approx(1.0)
    top2 = draw(SamplingParams(1, top_k=2), n=4000, logits=logits)
    assert set(top2.nonzero().flatten().tolist()) == {255, v - 1}


@pytest.mark.parametrize(
    "params",
    [SamplingParams(1), SamplingParams(1, temperature=0.7), SamplingParams(1, greedy=True),
     SamplingParams(1, top_k=3, temperature=1.3)],
)  # fmt: skip
def test_the_callers_float32_logits_are_left_as_they_were(params):
    """The sampler works in place over a copy of its own only: float32 logits are the
    caller's tensor itself."""
    logits = torch.randn(6, 300)
    before = logits.clone()
    sample_next(logits, params, torch.Generator().manual_seed(0))
    assert torch.equal(logits, before)


@pytest.mark.parametrize("temperature", [1.0, 0.6])
def test_bfloat16_logits_get_the_float32_log_softmax_of_their_values(temperature):
    """bf16 logits (a bf16 decode's LM head) are scaled and normalised in float32: the
    log-prob is log_softmax(float(logits) / T) at the token, computed here directly, and the
    draws follow those probabilities."""
    torch.manual_seed(1)
    logits = (torch.randn(1, 512) * 2).to(torch.bfloat16)
    rows = logits.expand(20000, -1)
    tokens, logp = sample_next(
        rows, SamplingParams(1, temperature), torch.Generator().manual_seed(0)
    )
    expected = torch.log_softmax(logits[0].double() / temperature, -1)
    assert torch.allclose(logp.double(), expected[tokens], atol=1e-5)
    freq = torch.bincount(tokens, minlength=512).double() / len(tokens)
    top = expected.exp().topk(5).indices  # the likeliest, where frequencies are informative
    assert torch.allclose(freq[top], expected.exp()[top], atol=0.015)

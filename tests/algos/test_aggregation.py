"""Loss aggregation: hand values, and invariance to the micro-batch split."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from ascent.algos import AGGREGATIONS, AggregationScale

MODES = ["token_mean", "seq_mean_token_mean", "seq_mean_token_sum", "seq_mean_token_sum_norm"]

# Row 0: 3 tokens with losses 1, 2, 3 (a padding loss of 50 after them); row 1: 1 token with
# loss 4; row 2: no policy token at all (a padding row whose loss is garbage, even NaN).
LOSS = torch.tensor([[1.0, 2.0, 3.0, 50.0], [4.0, 0.0, 0.0, 0.0], [9.0, float("nan"), 9.0, 9.0]])
MASK = torch.tensor([[1, 1, 1, 0], [1, 0, 0, 0], [0, 0, 0, 0]])


@pytest.mark.parametrize(
    ("mode", "expected"),
    [
        ("token_mean", (1 + 2 + 3 + 4) / 4),  # 4 tokens
        ("seq_mean_token_mean", ((1 + 2 + 3) / 3 + 4 / 1) / 2),  # 2 non-empty rows
        ("seq_mean_token_sum", (1 + 2 + 3 + 4) / 2),
        ("seq_mean_token_sum_norm", (1 + 2 + 3 + 4) / (2 * 4)),  # norm_const 4
    ],
)
def test_aggregation_matches_hand_computation(mode, expected):
    scale = AggregationScale.from_mask(MASK, norm_const=4)
    assert (scale.global_tokens, scale.global_seqs) == (4.0, 2.0)
    got = AGGREGATIONS.get(mode)(LOSS, MASK, scale)
    assert got.item() == pytest.approx(expected)


def test_seq_mean_and_token_mean_weigh_long_responses_differently():
    # The same per-token losses, aggregated two ways, give different numbers: that is the
    # length bias Dr. GRPO is about, and why the mode is a named choice.
    scale = AggregationScale.from_mask(MASK)
    token = AGGREGATIONS.get("token_mean")(LOSS, MASK, scale)
    seq = AGGREGATIONS.get("seq_mean_token_mean")(LOSS, MASK, scale)
    assert token.item() == pytest.approx(2.5) and seq.item() == pytest.approx(3.0)


SPLITS = [[6], [1, 1, 1, 1, 1, 1], [2, 2, 2], [5, 1], [1, 3, 2], [3, 3]]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("split", SPLITS)
def test_aggregation_is_invariant_to_microbatch_split(mode, split):
    gen = torch.Generator().manual_seed(0)
    loss = torch.randn(6, 5, generator=gen, dtype=torch.float64)
    lengths = [5, 0, 2, 1, 0, 4]  # uneven lengths, two rows with zero length
    mask = torch.tensor([[1] * n + [0] * (5 - n) for n in lengths])
    scale = AggregationScale.from_mask(mask, norm_const=5)
    fn = AGGREGATIONS.get(mode)
    whole = fn(loss, mask, scale)
    parts = sum(
        fn(lo, ma, scale) for lo, ma in zip(loss.split(split), mask.split(split), strict=True)
    )
    torch.testing.assert_close(parts, whole)
    assert torch.isfinite(whole)


@pytest.mark.parametrize("mode", MODES)
def test_zero_length_rows_do_not_produce_nan(mode):
    mask = torch.zeros(2, 3)
    loss = torch.ones(2, 3)
    got = AGGREGATIONS.get(mode)(loss, mask, AggregationScale.from_mask(mask))
    assert got.item() == 0.0


@settings(max_examples=40, deadline=None)
@given(st.floats(-100, 100), st.lists(st.integers(0, 4), min_size=1, max_size=5))
def test_token_mean_of_a_constant_loss_is_that_constant(c, lengths):
    if sum(lengths) == 0:
        lengths = [*lengths, 1]
    mask = torch.tensor([[1] * n + [0] * (4 - n) for n in lengths], dtype=torch.float64)
    loss = torch.full_like(mask, c)
    got = AGGREGATIONS.get("token_mean")(loss, mask, AggregationScale.from_mask(mask))
    assert got.item() == pytest.approx(c)


def test_scale_counts_must_be_positive():
    with pytest.raises(ValueError, match="global_tokens must be > 0"):
        AggregationScale(global_tokens=0, global_seqs=1)

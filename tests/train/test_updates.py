"""Micro-batches cut by a token budget: every row once, within the budget and the row cap,
rows of like length together (less padding), and the same outputs put back in place."""

from __future__ import annotations

import random

import torch

from ascent.config.llm_sections import TrainSection
from ascent.rollout import RolloutBatch
from ascent.train.distributed import Dist
from ascent.train.updates import micro_batch_rows, padding_fraction, per_micro_batch


def ragged(prompts: list[int], responses: list[int], width_p: int = 12, width_r: int = 20):
    """Rows with the given prompt and response lengths (left / right padded)."""
    b = len(prompts)
    pm = torch.zeros(b, width_p, dtype=torch.long)
    rm = torch.zeros(b, width_r)
    for i, (p, r) in enumerate(zip(prompts, responses, strict=True)):
        pm[i, width_p - p :] = 1
        rm[i, :r] = 1
    ids = torch.arange(b * width_r).view(b, width_r) % 50 + 3
    return RolloutBatch(
        prompt_ids=torch.where(pm.bool(), 7, 0), prompt_mask=pm, response_ids=ids,
        response_mask=rm, logprobs=torch.zeros(b, width_r), group_ids=torch.arange(b),
        finished=torch.ones(b, dtype=torch.bool), versions=torch.zeros(b, dtype=torch.long),
    )  # fmt: skip


def test_token_budget_parts_cover_every_row_once_within_budget_and_row_cap():
    rng = random.Random(0)
    prompts = [rng.randint(1, 12) for _ in range(40)]
    responses = [rng.randint(1, 20) for _ in range(40)]
    batch = ragged(prompts, responses)
    rows = torch.randperm(40, generator=torch.Generator().manual_seed(1))[:30]
    train = TrainSection(micro_batch_size=6, max_tokens_per_micro_batch=60)
    parts = micro_batch_rows(batch, rows, train)
    seen = sorted(int(r) for part in parts for r in part)
    assert seen == sorted(rows.tolist())
    for part in parts:
        idx = part.tolist()
        width = max(prompts[i] for i in idx) + max(responses[i] for i in idx)
        assert len(idx) <= 6
        assert len(idx) == 1 or len(idx) * width <= 60


def test_without_a_budget_parts_are_micro_batch_size_rows_in_order():
    batch = ragged([3] * 10, [5] * 10)
    rows = torch.tensor([9, 2, 4, 0, 1, 3, 5])
    parts = micro_batch_rows(batch, rows, TrainSection(micro_batch_size=3))
    assert [p.tolist() for p in parts] == [[9, 2, 4], [0, 1, 3], [5]]


def test_sorting_by_length_cuts_padding():
    """Long and short rows alternate: four rows a pass in order pad every short row to the
    long one's width; the budget puts the long ones together."""
    prompts, responses = [2, 2] * 4, [18, 2] * 4
    batch = ragged(prompts, responses)
    rows = torch.arange(8)

    def padding(train):
        pieces = []
        for part in micro_batch_rows(batch, rows, train):
            piece = batch.select(part)
            pieces.append(piece.narrow(piece.response_width).trim_prompt())
        return padding_fraction(pieces)

    fixed = padding(TrainSection(micro_batch_size=4))
    budget = padding(TrainSection(micro_batch_size=4, max_tokens_per_micro_batch=80))
    # by hand: in order, each pass is 4 rows x (2 + 18) = 80 positions with 2x20 + 2x4 = 48
    # real ones; sorted, the long rows fill theirs and the short ones are 4 rows x 4, all real
    assert abs(fixed - (1 - 48 / 80)) < 1e-9
    assert budget == 0.0


def test_per_micro_batch_puts_each_rows_output_back_in_place():
    batch = ragged([1, 5, 3, 2, 4], [7, 1, 20, 3, 5])
    expected = batch.response_ids.float() * batch.response_mask  # an output per position
    train = TrainSection(micro_batch_size=2, max_tokens_per_micro_batch=30)
    widths = []

    def fn(piece: RolloutBatch) -> torch.Tensor:
        widths.append(piece.response_ids.shape[1] + piece.prompt_ids.shape[1])
        return piece.response_ids.float() * piece.response_mask

    out = per_micro_batch(batch, train, Dist.single(torch.device("cpu")), fn)
    assert torch.equal(out, expected)
    assert max(widths) < 12 + 20  # each pass ran on its own trimmed width

"""RolloutBatch.concat: rows of batches with different widths, re-padded on the right sides."""

from __future__ import annotations

import torch

from ascent.rollout import RolloutBatch


def batch(prompt: list[int], response: list[int], group: int) -> RolloutBatch:
    return RolloutBatch(
        prompt_ids=torch.tensor([prompt]),
        prompt_mask=torch.ones(1, len(prompt), dtype=torch.long),
        response_ids=torch.tensor([response]),
        response_mask=torch.ones(1, len(response)),
        logprobs=torch.full((1, len(response)), -0.5),
        group_ids=torch.tensor([group]),
        finished=torch.tensor([True]),
        versions=torch.zeros(1, dtype=torch.long),
    )


def test_concat_left_pads_prompts_and_right_pads_responses():
    joined = RolloutBatch.concat([batch([5, 6], [7], 1), batch([8], [9, 10, 11], 2)], pad_id=0)
    assert joined.prompt_ids.tolist() == [[5, 6], [0, 8]]
    assert joined.prompt_mask.tolist() == [[1, 1], [0, 1]]
    assert joined.response_ids.tolist() == [[7, 0, 0], [9, 10, 11]]
    assert joined.response_mask.tolist() == [[1, 0, 0], [1, 1, 1]]
    assert joined.logprobs.tolist() == [[-0.5, 0, 0], [-0.5, -0.5, -0.5]]
    assert joined.group_ids.tolist() == [1, 2] and joined.num_tokens == 4


def test_response_width_reaches_the_last_chosen_token_of_any_row():
    masks = torch.tensor(
        [[1, 1, 0, 0, 1, 0, 0], [1, 1, 1, 0, 0, 0, 0], [0, 0, 0, 0, 0, 0, 0]], dtype=torch.float
    )
    b = len(masks)
    batch = RolloutBatch(
        prompt_ids=torch.zeros(b, 2, dtype=torch.long),
        prompt_mask=torch.ones(b, 2, dtype=torch.long),
        response_ids=torch.zeros(b, 7, dtype=torch.long),
        response_mask=masks,
        logprobs=torch.zeros(b, 7),
        group_ids=torch.arange(b),
        finished=torch.ones(b, dtype=torch.bool),
        versions=torch.zeros(b, dtype=torch.long),
    )
    expected = max((j + 1 for row in masks.tolist() for j, m in enumerate(row) if m), default=1)
    assert batch.response_width == expected == 5
    assert batch.narrow(batch.response_width).num_tokens == batch.num_tokens
    assert batch.select(torch.tensor([2])).response_width == 1

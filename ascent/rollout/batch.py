"""The typed rollout batch: what an engine returns and every later stage reads.

B rows (completions), P prompt positions, R response positions. Rows that answer the same
prompt share a group id; grouping always goes through `group_ids`, never row positions.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace

import torch
from torch import Tensor


@dataclass(frozen=True)
class RolloutBatch:
    # (B, P) long: prompt tokens, left-padded with the pad id, so every prompt ends at P - 1.
    prompt_ids: Tensor
    # (B, P) long: 1 on prompt tokens, 0 on left padding.
    prompt_mask: Tensor
    # (B, R) long: sampled tokens; after a row's EOS, the pad id.
    response_ids: Tensor
    # (B, R) float: 1 on tokens the policy chose (its EOS included), 0 on padding after the
    # end (and, in multi-turn rollouts, on tool / observation tokens the policy did not choose).
    response_mask: Tensor
    # (B, R) float: log pi(a_t | s_t) of each sampled token under the sampling policy, i.e.
    # log_softmax(logits / temperature) before any top-k / top-p truncation (vLLM: after it,
    # the distribution it drew from); 0 off the mask.
    logprobs: Tensor
    # (B,) long: id of the prompt each row answers; equal ids form one GRPO group.
    group_ids: Tensor
    # (B,) bool: the row ended with EOS; False when max_new_tokens cut it.
    finished: Tensor
    # (B,) long: the policy version (optimiser updates before sampling) that sampled the row;
    # for a multi-turn row, the oldest version that sampled any of its tokens.
    versions: Tensor

    def __post_init__(self) -> None:
        b, r = self.response_ids.shape
        expected = {
            "prompt_mask": self.prompt_ids.shape,
            "response_mask": (b, r),
            "logprobs": (b, r),
            "group_ids": (b,),
            "finished": (b,),
            "versions": (b,),
        }
        if self.prompt_ids.shape[0] != b:
            raise ValueError(f"prompt_ids has {self.prompt_ids.shape[0]} rows, expected {b}")
        for name, shape in expected.items():
            got = tuple(getattr(self, name).shape)
            if got != tuple(shape):
                raise ValueError(f"{name} has shape {got}, expected {tuple(shape)}")

    def __len__(self) -> int:
        return self.response_ids.shape[0]

    @property
    def response_lengths(self) -> Tensor:
        """(B,) long: tokens the policy chose per row."""
        return self.response_mask.bool().sum(-1)

    @property
    def response_width(self) -> int:
        """Columns up to the last chosen token of any row (at least 1). Not
        `response_lengths.max()`: a multi-turn row has masked observation tokens between its
        turns, so its last chosen token can sit well past its count of chosen tokens."""
        mask = self.response_mask.bool()
        if not bool(mask.any()):
            return 1
        cols = torch.arange(1, mask.shape[1] + 1, device=mask.device)
        return int((cols * mask).max())

    @property
    def num_tokens(self) -> int:
        return int(self.response_mask.bool().sum())

    def select(self, rows: Tensor | slice) -> RolloutBatch:
        """The batch restricted to `rows` (an index tensor or a slice), e.g. a micro-batch."""
        return RolloutBatch(**{f.name: getattr(self, f.name)[rows] for f in fields(self)})

    def narrow(self, width: int) -> RolloutBatch:
        """The batch with response columns cut to the first `width` (e.g. the longest row)."""
        cut = {"response_ids", "response_mask", "logprobs"}
        return RolloutBatch(
            **{
                f.name: getattr(self, f.name)[:, :width] if f.name in cut else getattr(self, f.name)
                for f in fields(self)
            }
        )

    def trim_prompt(self) -> RolloutBatch:
        """The batch without the left-padding columns that no row's prompt reaches."""
        used = self.prompt_mask.bool().any(0)
        if not bool(used.any()) or bool(used[0]):
            return self
        first = int(used.long().argmax())
        return replace(
            self, prompt_ids=self.prompt_ids[:, first:], prompt_mask=self.prompt_mask[:, first:]
        )

    @classmethod
    def concat(cls, batches: list[RolloutBatch], pad_id: int) -> RolloutBatch:
        """The rows of `batches` in order, prompts re-left-padded and responses re-right-padded
        (with `pad_id`, masks 0) to the widest of them."""
        if len(batches) == 1:
            return batches[0]
        p = max(b.prompt_ids.shape[1] for b in batches)
        r = max(b.response_ids.shape[1] for b in batches)

        def pad(x: Tensor, width: int, value: float, left: bool) -> Tensor:
            extra = width - x.shape[1]
            if not extra:
                return x
            fill = torch.full((x.shape[0], extra), value, dtype=x.dtype, device=x.device)
            return torch.cat([fill, x] if left else [x, fill], dim=1)

        return cls(
            prompt_ids=torch.cat([pad(b.prompt_ids, p, pad_id, True) for b in batches]),
            prompt_mask=torch.cat([pad(b.prompt_mask, p, 0, True) for b in batches]),
            response_ids=torch.cat([pad(b.response_ids, r, pad_id, False) for b in batches]),
            response_mask=torch.cat([pad(b.response_mask, r, 0, False) for b in batches]),
            logprobs=torch.cat([pad(b.logprobs, r, 0, False) for b in batches]),
            group_ids=torch.cat([b.group_ids for b in batches]),
            finished=torch.cat([b.finished for b in batches]),
            versions=torch.cat([b.versions for b in batches]),
        )

    def to(self, device: torch.device) -> RolloutBatch:
        return RolloutBatch(**{f.name: getattr(self, f.name).to(device) for f in fields(self)})

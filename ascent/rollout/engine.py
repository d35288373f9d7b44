"""The rollout-engine interface and the registry that maps `[rollout] engine` to one."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

import torch

from ascent.registry import Registry
from ascent.rollout.batch import RolloutBatch
from ascent.rollout.sampling import SamplingParams


class RolloutEngine(Protocol):
    """Samples completions for prompts and returns them as a `RolloutBatch`."""

    # True when `RolloutBatch.logprobs` are the trained policy's own log-probs (same weights,
    # same numerics), so the trainer can use them as the old policy's without a forward pass.
    exact_logprobs: bool

    def generate(
        self,
        prompts: Sequence[Sequence[int]],
        group_ids: Sequence[int],
        n: int,
        params: SamplingParams,
        generator: torch.Generator | None = None,
    ) -> RolloutBatch:
        """`n` completions of each prompt (token ids); rows are tagged with its group id."""
        ...


ENGINES: Registry[Callable[..., RolloutEngine]] = Registry("rollout engine")

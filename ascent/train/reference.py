"""The reference policy KL is measured against: `logprobs(rollout)`, nothing else.

- `ModelReference`: a frozen copy of the initial policy (or `[model] ref_model`), loaded from
  disk rather than copied from the actor, so a resumed run still measures KL against the
  policy the run started from. It is held in the compute dtype (it never trains) and sharded
  like the actor on several ranks.
- `AdapterReference`: with LoRA the base model under the adapters IS the initial policy
  (adapters start at zero), so the actor answers with its adapters switched off: no second
  copy of the weights.
"""

from __future__ import annotations

import contextlib
from typing import Protocol

import torch
from torch import Tensor, nn

from ascent.config.llm_sections import TrainSection
from ascent.rollout import RolloutBatch
from ascent.train.actor import Actor
from ascent.train.distributed import Dist
from ascent.train.forward import response_logprobs
from ascent.train.updates import per_micro_batch


class Reference(Protocol):
    def logprobs(self, rollout: RolloutBatch) -> Tensor:
        """(B, R) log-probs of the reference policy, without gradients."""
        ...


class ModelReference:
    def __init__(
        self,
        model: nn.Module,
        temperature: float,
        train: TrainSection,
        dist: Dist,
        dtype: torch.dtype,
    ) -> None:
        self.model = model
        self.temperature = temperature
        self.train = train  # how batches are cut into micro-batches
        self.dist = dist
        self.dtype = dtype

    @torch.no_grad()
    def logprobs(self, rollout: RolloutBatch) -> Tensor:
        with self._compute():
            return per_micro_batch(
                rollout,
                self.train,
                self.dist,
                lambda part: response_logprobs(self.model, part, self.temperature)[0],
            )

    def _compute(self) -> contextlib.AbstractContextManager[object]:
        if self.dtype == torch.float32 or self.dist.distributed:
            return contextlib.nullcontext()
        return torch.autocast(self.dist.device.type, dtype=self.dtype)


class AdapterReference:
    def __init__(self, actor: Actor) -> None:
        self.actor = actor

    def logprobs(self, rollout: RolloutBatch) -> Tensor:
        return self.actor.logprobs(rollout, adapters=False)

"""The rollout-engine interface and the registry that maps `[rollout] engine` to one.

An engine samples completions (`generate`) with the weights of one policy version, and is
brought to a newer version by `sync_weights(weights, version)`, where `weights` is an
iterable of (name, tensor) under the plain model's parameter names (the actor's
`weights()`: LoRA merged, shards gathered; or the LoRA adapters alone for an engine that
`takes_adapters`). The iterable is lazy: an engine that decodes the trainer's own module in
place (the transformers engine's fast path on one device) only records the version and never
consumes it (its decoder packs the module's weights itself). Every row an engine returns
carries the version that sampled it (`RolloutBatch.versions`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import torch
from torch import Tensor, nn

from ascent.registry import Registry
from ascent.rollout.batch import RolloutBatch
from ascent.rollout.sampling import SamplingParams
from ascent.rollout.transport import Transport
from ascent.rules import LLMConfig


class RolloutEngine(Protocol):
    """Samples completions for prompts and returns them as a `RolloutBatch`."""

    # True when `RolloutBatch.logprobs` are the trained policy's own log-probs (same weights,
    # same numerics), so the trainer can use them as the old policy's without a forward pass.
    exact_logprobs: bool
    # True when `sync_weights` takes the LoRA adapters alone (the engine applies them over
    # its own copy of the base weights); else it takes the full weights, adapters merged.
    takes_adapters: bool
    version: int  # the policy version of the weights it samples with
    transport: Transport  # how `sync_weights` moves the weights (transport.py)

    def sync_weights(self, weights: Iterable[tuple[str, Tensor]], version: int) -> None:
        """Sample with these weights (policy `version`) from the next `generate` on."""
        ...

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

    def close(self) -> None:
        """Stop what the engine started (processes, servers, actors); a no-op when nothing."""
        ...


@dataclass(frozen=True)
class EngineContext:
    """What an engine builder gets from the run (`[rollout] engine` names the builder)."""

    cfg: LLMConfig
    # The trainer's module with full weights, entered for decoding in place (the fast path
    # of an engine that shares the trainer's process and device).
    live: Callable[[], AbstractContextManager[nn.Module]]
    compute_dtype: torch.dtype
    device: torch.device
    pad_id: int
    eos_ids: list[int]
    decode: Callable[[list[int]], str]  # token ids -> text (stop strings)
    own_copy: bool  # sampling must go on while the trainer changes its weights
    work_dir: Path  # where an engine may keep files (the run directory)


ENGINES: Registry[Callable[[EngineContext], RolloutEngine]] = Registry("rollout engine")

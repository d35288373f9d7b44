"""One engine for the whole run, owned by rank 0: vLLM servers and Ray rollout replicas.

Engines that live outside the trainer's process serve every rank: started once, they must not
be started again by each rank (N copies of the servers or replicas, N writers to one sync
folder). On several ranks rank 0 alone builds such an engine, and every rank talks to it
through `RankZeroEngine`, with the collectives the loop already calls in step:

    generate      every rank's prompts gathered to rank 0, generated there as one batch,
                  each rank's rows sent back to it (tensors on the CPU in transit)
    sync_weights  every rank walks the actor's weights (gathering shards is a collective),
                  rank 0 alone hands them to the engine: one publisher per run

Every rank calls `generate` and `sync_weights` at the same points of the loop (the batch
sources and the evaluation already keep the ranks in step), so no rank waits on a call that
another never makes. Sampling on a background thread (`[rollout] async`) would interleave
these collectives with the update's, so it is refused with such an engine on several ranks.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import replace
from typing import Any

import torch
from torch import Tensor

from ascent.rollout import RolloutBatch, RolloutEngine, SamplingParams
from ascent.train.distributed import Dist


class RankZeroEngine:
    """A `RolloutEngine` on every rank whose generation and weights go through rank 0's."""

    def __init__(self, dist: Dist, engine: RolloutEngine | None) -> None:
        assert (engine is not None) == dist.main, "rank 0, and only rank 0, holds the engine"
        self.dist = dist
        self.engine = engine
        flags = None
        if engine is not None:
            flags = (engine.exact_logprobs, engine.takes_adapters, engine.transport.name)
        self.exact_logprobs, self.takes_adapters, transport = dist.broadcast(flags)
        # rank 0 publishes through the engine's transport; the others send nothing
        self.transport = engine.transport if engine is not None else _NothingSent(transport)
        self.version = engine.version if engine is not None else 0

    def sync_weights(self, weights: Iterable[tuple[str, Tensor]], version: int) -> None:
        if self.engine is not None:
            self.engine.sync_weights(weights, version)
        else:
            for _ in weights:  # take part in gathering each tensor; rank 0 publishes them
                pass
        self.version = version

    def generate(
        self,
        prompts: Sequence[Sequence[int]],
        group_ids: Sequence[int],
        n: int,
        params: SamplingParams,
        generator: torch.Generator | None = None,
    ) -> RolloutBatch:
        shares = self.dist.gather(([list(p) for p in prompts], [int(g) for g in group_ids]))
        pieces: list[Any] | None = None
        if self.engine is not None:
            # Ranks may use the same group ids (an evaluation numbers its own prompts), so the
            # engine sees each prompt's position in the whole batch as its group id.
            every_prompt = [p for share, _ in shares for p in share]
            starts = [sum(len(s) for s, _ in shares[:r]) for r in range(len(shares))]
            batch = self.engine.generate(
                every_prompt, list(range(len(every_prompt))), n, params, generator
            )
            pieces = [
                _cpu(_rows_of(batch, start, groups))
                for start, (_, groups) in zip(starts, shares, strict=True)
            ]
        mine = self.dist.scatter(pieces)
        return RolloutBatch(**{k: getattr(mine, k).to(self.dist.device) for k in _FIELDS})

    def metrics(self) -> dict[str, float]:
        """The engine's own metrics (Ray restarts) on rank 0, which alone logs them."""
        metrics = getattr(self.engine, "metrics", None)
        return metrics() if metrics is not None else {}

    def close(self) -> None:
        if self.engine is not None:
            self.engine.close()


class _NothingSent:
    """A rank that is not the publisher: named as rank 0's transport, it moves nothing."""

    def __init__(self, name: str) -> None:
        self.name = name

    def send(self, weights: Iterable[tuple[str, Tensor]], version: int) -> None:
        return None

    def release(self, parcel: Any) -> None:
        pass


_FIELDS = tuple(RolloutBatch.__dataclass_fields__)


def _rows_of(batch: RolloutBatch, start: int, groups: list[int]) -> RolloutBatch:
    """The rows of the prompts at positions start .. start + len(groups), in the engine's
    order, with their rank's own group ids back."""
    positions = batch.group_ids.tolist()
    rows = [i for i, pos in enumerate(positions) if start <= pos < start + len(groups)]
    piece = batch.select(torch.tensor(rows, dtype=torch.long, device=batch.group_ids.device))
    own = [groups[positions[i] - start] for i in rows]
    ids = torch.tensor(own, dtype=torch.long, device=batch.group_ids.device)
    return replace(piece, group_ids=ids)


def _cpu(batch: RolloutBatch) -> RolloutBatch:
    return RolloutBatch(**{k: getattr(batch, k).cpu() for k in _FIELDS})

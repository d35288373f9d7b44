"""The update schedule both learners (actor and critic) follow: `ppo_epochs` passes, each cut
into the same number of mini-batches, each mini-batch gradient-accumulated over micro-batches.

    for epoch in ppo_epochs:
        rows in a permutation seeded by (seed, step, epoch, rank)
        cut into batch_size / mini_batch_size mini-batches          -> one optimiser step each
            counts of the whole mini-batch, summed over ranks       -> AggregationScale
            micro-batches of micro_batch_size rows                  -> forward, backward

The number of optimiser steps comes from the config, not from how many rows a step kept, so
every rank steps (and runs its collectives) the same number of times; a rank with fewer
micro-batches than another runs blank ones (`TrainBatch.blank`: no token to learn from) to
meet the others. Losses divide by counts of the whole mini-batch over all ranks and are
multiplied by the world size, because FSDP and DDP average gradients over ranks: the sum of
the micro-batch losses, and so the gradient, does not depend on how the batch is cut into
micro-batches or shared between ranks.

The permutation is seeded rather than drawn from a stream, so a resumed run cuts a batch
exactly as the uninterrupted run did, with no state to save.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import torch
from torch import Tensor

from ascent.algos import AggregationScale
from ascent.config.llm import TrainSection
from ascent.train.distributed import Dist
from ascent.train.train_batch import TrainBatch


def mini_batches(size: int, train: TrainSection, seed: int, step: int, dist: Dist) -> list[Tensor]:
    """Row indices of each optimiser step's mini-batch (this rank's rows)."""
    per_epoch = train.batch_size // (train.mini_batch_size or train.batch_size)
    out = []
    for epoch in range(train.ppo_epochs):
        if per_epoch == 1:
            order = torch.arange(size)
        else:
            key = ((seed * 1_000_003 + step) * 8_191 + epoch) * 131 + dist.rank
            order = torch.randperm(size, generator=torch.Generator().manual_seed(key))
        out.extend(torch.tensor_split(order, per_epoch))
    return out


def global_scale(mask: Tensor, norm_const: float, dist: Dist) -> AggregationScale:
    """Counts of a mini-batch over all ranks (each rank passes its own rows' mask)."""
    lengths = mask.bool().sum(-1)
    tokens, seqs = dist.all_sum([float(lengths.sum()), float((lengths > 0).sum())])
    return AggregationScale(max(tokens, 1.0), max(seqs, 1.0), norm_const)


def micro_batches(batch: TrainBatch, rows: Tensor, size: int, dist: Dist) -> Iterator[TrainBatch]:
    """The micro-batches of `rows`, each cut after its last chosen token, then blank ones
    until this rank has run as many as the rank with the most."""
    count = (len(rows) + size - 1) // size
    for start in range(0, len(rows), size):
        picked = batch.select(rows[start : start + size])
        yield picked.narrow(picked.rollout.response_width)
    for _ in range(dist.all_max(max(count, 1)) - count):
        yield batch.blank()


def accumulate(
    batch: TrainBatch,
    rows: Tensor,
    micro: int,
    dist: Dist,
    loss_fn: Callable[[TrainBatch], tuple[Tensor, dict[str, Tensor]]],
    on_metrics: Callable[[dict[str, Tensor], int], None],
) -> float:
    """Backward every micro-batch's `loss_fn` (already aggregated with global counts and
    scaled for the ranks' gradient averaging); return the summed loss."""
    total = 0.0
    for piece in micro_batches(batch, rows, micro, dist):
        loss, metrics = loss_fn(piece)
        loss.backward()
        total += float(loss.detach())
        tokens = piece.rollout.num_tokens
        if tokens:
            on_metrics(metrics, tokens)
    return total


def clip_and_norm(params: list[torch.nn.Parameter], max_norm: float) -> float:
    """Clip the gradient of `params` to `max_norm` (over all ranks for sharded parameters)
    and return its norm before clipping. Parameters without a gradient get zeros, so that an
    optimiser step with nothing to learn still moves Adam's moments as usual."""
    for p in params:
        if p.grad is None:
            p.grad = torch.zeros_like(p)
    norm = torch.nn.utils.clip_grad_norm_(params, max_norm)
    if hasattr(norm, "full_tensor"):  # a DTensor: FSDP2 parameters
        norm = norm.full_tensor()
    return float(norm)

"""The update schedule both learners (actor and critic) follow: `ppo_epochs` passes, each cut
into the same number of mini-batches, each mini-batch gradient-accumulated over micro-batches.

    for epoch in ppo_epochs:
        rows in a permutation seeded by (seed, step, epoch, rank)
        cut into batch_size / mini_batch_size mini-batches          -> one optimiser step each
            counts of the whole mini-batch, summed over ranks       -> AggregationScale
            micro-batches of micro_batch_size rows, or cut by
            max_tokens_per_micro_batch (rows sorted by length)      -> forward, backward

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

import math
from collections.abc import Callable, Iterator

import torch
from torch import Tensor

from ascent.algos import AggregationScale
from ascent.config.llm_sections import TrainSection
from ascent.errors import AscentError
from ascent.rollout import RolloutBatch
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


def row_extents(rollout: RolloutBatch) -> tuple[Tensor, Tensor]:
    """(B,) prompt tokens and (B,) response columns up to the last chosen token, per row:
    the positions a forward pass over that row alone would need."""
    mask = rollout.response_mask.bool()
    cols = torch.arange(1, mask.shape[1] + 1, device=mask.device)
    return rollout.prompt_mask.long().sum(-1), (cols * mask).amax(-1)


def micro_batch_rows(rollout: RolloutBatch, rows: Tensor, train: TrainSection) -> list[Tensor]:
    """How `rows` are cut into micro-batches: `micro_batch_size` rows each in their order, or
    with `max_tokens_per_micro_batch`, by a token budget: rows sorted by length (so that
    rows of like length share a micro-batch and little of it is padding), as many to a
    micro-batch as keep rows x (longest prompt + longest response) within the budget, and at
    most micro_batch_size. A row longer than the budget goes alone."""
    size, budget = train.micro_batch_size, train.max_tokens_per_micro_batch
    if budget is None:
        return [rows[i : i + size] for i in range(0, len(rows), size)]
    prompt, response = (x[rows].tolist() for x in row_extents(rollout))
    order = sorted(range(len(rows)), key=lambda i: (-(prompt[i] + response[i]), i))
    out: list[list[int]] = []
    widest_p = widest_r = 0
    for i in order:
        p, r = max(widest_p, prompt[i]), max(widest_r, response[i])
        if out and len(out[-1]) < size and (len(out[-1]) + 1) * (p + r) <= budget:
            out[-1].append(i)
            widest_p, widest_r = p, r
        else:
            out.append([i])
            widest_p, widest_r = prompt[i], response[i]
    return [rows[torch.tensor(sorted(part), device=rows.device)] for part in out]


def padding_fraction(pieces: list[RolloutBatch]) -> float:
    """Share of the positions the forward passes over `pieces` run that are padding."""
    real = run = 0
    for piece in pieces:
        prompt, response = row_extents(piece)
        real += int(prompt.sum() + response.sum())
        run += len(piece) * (piece.prompt_ids.shape[1] + piece.response_ids.shape[1])
    return 1.0 - real / run if run else 0.0


def per_micro_batch(
    rollout: RolloutBatch, train: TrainSection, dist: Dist, fn: Callable[[RolloutBatch], Tensor]
) -> Tensor:
    """(B, R) `fn` over the batch's micro-batches (a forward pass without gradients: old,
    reference or value estimates), each trimmed to its own longest prompt and response and
    put back in place; padding positions hold 0. Ranks with fewer micro-batches run blank ones
    to meet the others' collectives."""
    parts = micro_batch_rows(
        rollout, torch.arange(len(rollout), device=rollout.finished.device), train
    )
    out = torch.zeros(
        rollout.response_mask.shape, dtype=torch.float32, device=rollout.finished.device
    )
    for part in parts:
        piece = rollout.select(part)
        piece = piece.narrow(piece.response_width).trim_prompt()
        out[part, : piece.response_ids.shape[1]] = fn(piece).float()
    for _ in range(dist.all_max(len(parts)) - len(parts)):
        fn(rollout.select(slice(0, 1)))
    return out


def micro_batches(
    batch: TrainBatch, rows: Tensor, train: TrainSection, dist: Dist
) -> Iterator[TrainBatch]:
    """The micro-batches of `rows` (`micro_batch_rows`), each cut to its own longest prompt
    and response, then blank ones until this rank has run as many as the rank with the most."""
    parts = micro_batch_rows(batch.rollout, rows, train)
    for part in parts:
        yield batch.select(part).trimmed()
    for _ in range(dist.all_max(max(len(parts), 1)) - len(parts)):
        yield batch.blank()


def accumulate(
    batch: TrainBatch,
    rows: Tensor,
    train: TrainSection,
    dist: Dist,
    loss_fn: Callable[[TrainBatch], tuple[Tensor, dict[str, Tensor]]],
    on_metrics: Callable[[dict[str, Tensor | float], float], None],
) -> float:
    """Backward every micro-batch's `loss_fn` (already aggregated with global counts and
    scaled for the ranks' gradient averaging); return the summed loss. Reports
    `train/padding_frac`, the share of the positions run that were padding."""
    total = 0.0
    pieces = []
    for piece in micro_batches(batch, rows, train, dist):
        loss, metrics = loss_fn(piece)
        loss.backward()
        total += float(loss.detach())
        tokens = piece.rollout.num_tokens
        if tokens:
            on_metrics(metrics, tokens)
            pieces.append(piece.rollout)
    on_metrics({"train/padding_frac": padding_fraction(pieces)}, 1.0)
    return total


def clip_and_norm(params: list[torch.nn.Parameter], max_norm: float) -> float:
    """Clip the gradient of `params` to `max_norm` (over all ranks for sharded parameters)
    and return its norm before clipping; a non-finite one stops the run before any weight
    takes it (AscentError). Parameters without a gradient get zeros, so that an
    optimiser step with nothing to learn still moves Adam's moments as usual."""
    for p in params:
        if p.grad is None:
            p.grad = torch.zeros_like(p)
    norm = torch.nn.utils.clip_grad_norm_(params, max_norm)
    if hasattr(norm, "full_tensor"):  # a DTensor: FSDP2 parameters
        norm = norm.full_tensor()
    value = float(norm)  # over all ranks: every rank stops here together, or none does
    if not math.isfinite(value):
        raise AscentError(
            f"the gradient is not finite (norm {value}): this update would write it into the "
            "weights, so the run stops before it (its checkpoints hold finite weights); lower "
            "[optim] lr, or check the rewards and the [algorithm] settings"
        )
    return value

"""The policy update: `ppo_epochs` passes over mini-batches, gradient-accumulated micro-batches.

Each optimiser step sees one mini-batch; its loss is aggregated with counts of the WHOLE
mini-batch (`AggregationScale`), so the sum of the micro-batch losses, and therefore the
gradient, does not depend on how the mini-batch is cut into micro-batches.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

import torch
from torch import Tensor

from ascent.algos import AggregationScale, PolicyLossInput, masked_mean
from ascent.models.forward import response_logprobs
from ascent.rollout import RolloutBatch
from ascent.train.llm_setup import LLMRun


@dataclass(frozen=True)
class TrainBatch:
    """A scored rollout batch, ready for the loss. Shapes (B, R) as in `RolloutBatch`."""

    rollout: RolloutBatch
    advantages: Tensor  # (B, R) A_t, 0 off the response mask
    # (B, R) log-probs of the policy that sampled the batch; None when the batch feeds a
    # single optimiser step, where that policy IS the one being updated (ratio = 1).
    old_logp: Tensor | None
    ref_logp: Tensor | None  # (B, R) reference-policy log-probs, when KL is a loss term
    # (B, R) log-probs of an OLDER policy that actually generated the rows (asynchronous
    # rollouts); with it, old_logp anchors the clip and is_cap truncates the importance
    # weight pi_old / pi_behaviour (decoupled PPO). None for on-policy batches.
    behaviour_logp: Tensor | None = None


class MetricMeans:
    """Token-weighted means of per-micro-batch metrics, plain means of per-update ones."""

    def __init__(self) -> None:
        self.sums: dict[str, float] = defaultdict(float)
        self.weights: dict[str, float] = defaultdict(float)

    def add(self, metrics: dict[str, Tensor | float], weight: float = 1.0) -> None:
        for key, value in metrics.items():
            self.sums[key] += float(value) * weight
            self.weights[key] += weight

    def means(self) -> dict[str, float]:
        return {k: self.sums[k] / self.weights[k] for k in self.sums if self.weights[k] > 0}


def _trim(batch: TrainBatch, rows: Tensor) -> tuple[TrainBatch, int]:
    """The rows of a micro-batch, response columns cut to its longest response."""
    rollout = batch.rollout.select(rows)
    width = max(1, int(rollout.response_lengths.max()))

    def part(x: Tensor | None) -> Tensor | None:
        return None if x is None else x[rows][:, :width]

    rollout = rollout.narrow(width)
    trimmed = TrainBatch(
        rollout,
        part(batch.advantages),
        part(batch.old_logp),
        part(batch.ref_logp),
        part(batch.behaviour_logp),
    )
    return trimmed, rollout.num_tokens


def micro_batch_loss(
    run: LLMRun, batch: TrainBatch, scale: AggregationScale
) -> tuple[Tensor, dict[str, Tensor]]:
    """The aggregated loss of one micro-batch (its share of the mini-batch's loss)."""
    parts = run.parts
    mask = batch.rollout.response_mask
    logp, entropy = response_logprobs(
        run.policy, batch.rollout, parts.temperature, with_entropy=True
    )
    old = logp.detach() if batch.old_logp is None else batch.old_logp
    per_token, metrics = parts.policy_loss(
        PolicyLossInput(
            logp=logp,
            old_logp=old,
            advantages=batch.advantages,
            mask=mask,
            behaviour_logp=batch.behaviour_logp,
        ),
        parts.loss_params,
    )
    if parts.kl is not None and parts.kl_in_loss:
        kl = parts.kl(logp, batch.ref_logp)
        per_token = per_token + parts.kl_coef * kl
        metrics["kl"] = masked_mean(kl.detach(), mask)
    if parts.entropy_coef:
        per_token = per_token - parts.entropy_coef * entropy
    metrics["entropy"] = masked_mean(entropy.detach(), mask)
    return parts.aggregate(per_token, mask, scale), metrics


def _optimiser_step(run: LLMRun, batch: TrainBatch, rows: Tensor, stats: MetricMeans) -> None:
    """Accumulate the gradient of one mini-batch over micro-batches, clip, step.

    The aggregation counts come from the whole mini-batch; completions whose advantages are
    all 0 are then left out of the forward/backward when they cannot change the loss
    (`AlgorithmParts.skip_zero_advantage`): the gradient is the same, computed on fewer rows.
    Token-weighted metrics (entropy, clip_ratio, ...) then describe the rows trained on.
    """
    t = run.cfg.train
    scale = AggregationScale.from_mask(batch.rollout.response_mask[rows], run.parts.norm_const)
    if run.parts.skip_zero_advantage:
        active = batch.advantages[rows].ne(0).any(-1)
        stats.add({"frac_rows_skipped": 1.0 - float(active.float().mean())})
        rows = rows[active]
    run.optimizer.zero_grad(set_to_none=True)
    loss_sum = 0.0
    for start in range(0, len(rows), t.micro_batch_size):
        micro, tokens = _trim(batch, rows[start : start + t.micro_batch_size])
        loss, metrics = micro_batch_loss(run, micro, scale)
        loss.backward()
        loss_sum += float(loss.detach())
        stats.add(metrics, weight=tokens)
    params = [p for p in run.policy.parameters() if p.requires_grad]
    for p in params:  # no active row: Adam still steps (its momentum moves the weights)
        if p.grad is None:
            p.grad = torch.zeros_like(p)
    grad_norm = torch.nn.utils.clip_grad_norm_(params, t.max_grad_norm)
    stats.add({"loss": loss_sum, "grad_norm": grad_norm, "lr": run.scheduler.get_last_lr()[0]})
    run.optimizer.step()
    run.scheduler.step()


def update_policy(run: LLMRun, batch: TrainBatch, step: int) -> dict[str, float]:
    """All optimiser steps of one RL step; returns the mean of their metrics.

    Mini-batches are drawn from a permutation seeded by (seed, step), so a resumed run
    cuts the batch exactly as the uninterrupted run did, without any state to save.
    """
    t = run.cfg.train
    size = len(batch.rollout)
    mini = t.mini_batch_size or size
    shuffle = torch.Generator().manual_seed(run.cfg.run.seed * 1_000_003 + step)
    stats = MetricMeans()
    for _ in range(t.ppo_epochs):
        order = torch.randperm(size, generator=shuffle) if mini < size else torch.arange(size)
        for start in range(0, size, mini):
            _optimiser_step(run, batch, order[start : start + mini].to(run.device), stats)
    return stats.means()

"""The update: `ppo_epochs` passes over mini-batches, gradient-accumulated micro-batches.

Each optimiser step sees one mini-batch; its loss is aggregated with counts of the WHOLE
mini-batch (`AggregationScale`), so the sum of the micro-batch losses, and therefore the
gradient, does not depend on how the mini-batch is cut into micro-batches.

The loss of a micro-batch, term by term (each present only when the recipe asks for it):

    policy loss (ppo_clip / gspo)   aggregated by [algorithm] loss_agg
    + kl_coef * KL(pi || pi_ref)    per token, same aggregation (kl_mode = "loss")
    - entropy_coef * entropy        per token, same aggregation
    + nll_coef * NLL(correct rows)  token mean over the correct rows' tokens (VAPO)
    + value loss                    the critic's (llm_critic.py), same aggregation

During critic warm-up only the value loss is computed and only the critic steps.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, fields

import torch
from torch import Tensor

from ascent.algos import AggregationScale, PolicyLossInput, masked_mean, positive_nll
from ascent.algos.aggregation import token_mean
from ascent.models.forward import response_logprobs
from ascent.rollout import RolloutBatch
from ascent.train.llm_critic import critic_loss, critic_step
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
    # rollouts, replayed rows); with it, old_logp anchors the clip and is_cap truncates the
    # importance weight pi_old / pi_behaviour (decoupled PPO). None for on-policy batches.
    behaviour_logp: Tensor | None = None
    returns: Tensor | None = None  # (B, R) critic regression targets (value-based estimators)
    old_values: Tensor | None = None  # (B, R) V(s_t) at sampling time (the value clip's anchor)
    positive: Tensor | None = None  # (B,) bool: the row was judged correct (NLL term)

    def select(self, rows: Tensor) -> TrainBatch:
        """The batch restricted to `rows` (a long index tensor)."""
        values = {f.name: getattr(self, f.name) for f in fields(self)}
        picked = {k: None if v is None else v[rows] for k, v in values.items() if k != "rollout"}
        return TrainBatch(rollout=self.rollout.select(rows), **picked)

    def narrow(self, width: int) -> TrainBatch:
        """The batch with response columns cut to the first `width`."""
        values = {f.name: getattr(self, f.name) for f in fields(self)}
        cut = {
            k: v[:, :width] if v is not None and v.dim() == 2 else v
            for k, v in values.items()
            if k != "rollout"
        }
        return TrainBatch(rollout=self.rollout.narrow(width), **cut)


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


@dataclass(frozen=True)
class Scales:
    """Whole-mini-batch counts for each aggregated term."""

    loss: AggregationScale  # the policy, KL, entropy and value terms
    nll: AggregationScale | None  # the NLL term: tokens of correct rows; None: no term


def _trim(batch: TrainBatch, rows: Tensor) -> tuple[TrainBatch, int]:
    """The rows of a micro-batch, response columns cut after its last chosen token."""
    picked = batch.select(rows)
    trimmed = picked.narrow(picked.rollout.response_width)
    return trimmed, trimmed.rollout.num_tokens


def policy_terms(
    run: LLMRun, batch: TrainBatch, scales: Scales
) -> tuple[Tensor, dict[str, Tensor]]:
    """Policy loss, KL, entropy and NLL of one micro-batch, aggregated (its share)."""
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
    loss = parts.aggregate(per_token, mask, scales.loss)
    if scales.nll is not None:
        nll = token_mean(positive_nll(logp, mask, batch.positive), mask, scales.nll)
        loss = loss + parts.nll_coef * nll
        keep = mask.bool() & batch.positive[:, None]
        metrics["nll_loss"] = masked_mean(-logp.detach(), keep)
    return loss, metrics


def _scales(run: LLMRun, batch: TrainBatch, rows: Tensor) -> Scales:
    mask = batch.rollout.response_mask[rows]
    nll = None
    if run.parts.nll_coef and batch.positive is not None and bool(batch.positive[rows].any()):
        nll = AggregationScale.from_mask(mask * batch.positive[rows, None])
    return Scales(AggregationScale.from_mask(mask, run.parts.norm_const), nll)


def _optimiser_step(
    run: LLMRun, batch: TrainBatch, rows: Tensor, stats: MetricMeans, train_policy: bool
) -> None:
    """Accumulate the gradient of one mini-batch over micro-batches, clip, step.

    The aggregation counts come from the whole mini-batch; completions whose advantages are
    all 0 are then left out of the forward/backward when they cannot change the loss
    (`AlgorithmParts.skip_zero_advantage`): the gradient is the same, computed on fewer rows.
    Token-weighted metrics (entropy, clip_ratio, ...) then describe the rows trained on.
    """
    t, critic = run.cfg.train, run.critic
    scales = _scales(run, batch, rows)
    if run.parts.skip_zero_advantage:
        active = batch.advantages[rows].ne(0).any(-1)
        stats.add({"frac_rows_skipped": 1.0 - float(active.float().mean())})
        rows = rows[active]
    run.optimizer.zero_grad(set_to_none=True)
    if critic is not None:
        critic.optimizer.zero_grad(set_to_none=True)
    loss_sum = 0.0
    for start in range(0, len(rows), t.micro_batch_size):
        micro, tokens = _trim(batch, rows[start : start + t.micro_batch_size])
        loss, metrics = policy_terms(run, micro, scales) if train_policy else (torch.zeros(()), {})
        if critic is not None:
            value, value_metrics = critic_loss(
                critic,
                micro.rollout,
                micro.old_values,
                micro.returns,
                run.parts.aggregate,
                scales.loss,
            )
            loss, metrics = loss + value, {**metrics, **value_metrics}
        loss.backward()
        loss_sum += float(loss.detach())
        stats.add(metrics, weight=tokens)
    stats.add({"loss": loss_sum})
    if critic is not None:
        stats.add(critic_step(critic, t.max_grad_norm))
    if train_policy:
        _policy_step(run, stats)


def _policy_step(run: LLMRun, stats: MetricMeans) -> None:
    params = [p for p in run.policy.parameters() if p.requires_grad]
    for p in params:  # no active row: Adam still steps (its momentum moves the weights)
        if p.grad is None:
            p.grad = torch.zeros_like(p)
    grad_norm = torch.nn.utils.clip_grad_norm_(params, run.cfg.train.max_grad_norm)
    stats.add({"grad_norm": grad_norm, "lr": run.scheduler.get_last_lr()[0]})
    run.optimizer.step()
    run.scheduler.step()


def in_critic_warmup(run: LLMRun, step: int) -> bool:
    """Steps 1..value_warmup_steps train only the critic."""
    return run.critic is not None and step <= run.cfg.critic.value_warmup_steps


def update_policy(run: LLMRun, batch: TrainBatch, step: int) -> dict[str, float]:
    """All optimiser steps of one RL step; returns the mean of their metrics.

    Mini-batches are drawn from a permutation seeded by (seed, step), so a resumed run
    cuts the batch exactly as the uninterrupted run did, without any state to save.
    In critic warm-up steps the policy is not stepped, and a value head on the policy's
    backbone trains without gradients into it, so the policy is exactly unchanged.
    """
    t = run.cfg.train
    size = len(batch.rollout)
    mini = t.mini_batch_size or size
    shuffle = torch.Generator().manual_seed(run.cfg.run.seed * 1_000_003 + step)
    warmup = in_critic_warmup(run, step)
    if run.critic is not None:  # a head's warm-up must not move the shared backbone
        run.critic.model.train_trunk = not (warmup and run.critic.shared)
    stats = MetricMeans()
    for _ in range(t.ppo_epochs):
        order = torch.randperm(size, generator=shuffle) if mini < size else torch.arange(size)
        for start in range(0, size, mini):
            rows = order[start : start + mini].to(run.device)
            _optimiser_step(run, batch, rows, stats, train_policy=not warmup)
    metrics = stats.means()
    if warmup:
        metrics["critic_warmup"] = 1.0
    return metrics

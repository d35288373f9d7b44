"""Scored rollouts -> a `TrainBatch`: the one place a batch to learn from is made.

Every trainer that updates the policy builds its batch here: the RL loop (plain completions,
dynamic sampling, replay, prefetched rows and agentic episodes alike) and test-time RL. The
function reads only what it is given, the learners that run forward passes and the settings
of the recipe, and changes nothing:

    rewards          the rows' totals on their last policy token (DAPO's soft overlong
                     penalty added), or, for agentic episodes, their turns (`Scored.turns`)
    old log-probs    what anchors the clip: none for one on-policy update, the engine's when
                     exact, else the actor's; the behaviour policy's for replayed, prefetched
                     or agentic rows, which are weighted by min(pi_old / pi_behaviour, is_cap)
    KL               a per-token reward penalty (kl_mode = "reward") or the reference's
                     log-probs for the loss term
    values           the critic's, for GAE
    advantages       the recipe's estimator (`ADVANTAGES`: grpo, gae, turn_grpo, ...),
                     whitened over every rank's policy tokens when normalize_advantages
    overlong mask    DAPO's overlong filtering (`overlong = "mask"`)
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch
from torch import Tensor

from ascent.algos import (
    AdvantageBatch,
    kl_penalty_rewards,
    masked_mean,
    masked_whiten,
    soft_overlong_penalty,
)
from ascent.algos.kl import k3
from ascent.rules import LLMConfig
from ascent.train.actor import Actor
from ascent.train.critic import CriticWorker, value_metrics
from ascent.train.distributed import Dist
from ascent.train.llm_rollout import Scored
from ascent.train.parts import AlgorithmParts
from ascent.train.reference import Reference
from ascent.train.train_batch import TrainBatch


def updates_per_step(cfg: LLMConfig) -> int:
    """Optimiser steps per RL step: ppo_epochs passes over batch_size / mini_batch_size."""
    t = cfg.train
    return t.ppo_epochs * (t.batch_size // (t.mini_batch_size or t.batch_size))


@dataclass(frozen=True)
class Learners:
    """The trainer's side of a run: the workers that compute log-probs and values and take
    optimiser steps."""

    actor: Actor
    reference: Reference | None = None  # only when kl_coef > 0
    critic: CriticWorker | None = None  # value-based estimators only

    @property
    def dist(self) -> Dist:
        return self.actor.dist


@dataclass(frozen=True)
class CreditSettings:
    """What of the recipe decides how a scored batch becomes a train batch."""

    parts: AlgorithmParts
    updates_per_step: int = 1  # optimiser steps the batch feeds (ppo_epochs x mini-batches)
    exact_logprobs: bool = True  # the engine's log-probs are the trainer's, bit for bit
    replay: bool = False  # rows may be replayed from the positive-replay buffer
    overlong: str = "off"  # DAPO overlong handling: off, penalty or mask
    overlong_buffer: int = 0
    overlong_penalty: float = 1.0
    max_new_tokens: int = 1

    @classmethod
    def of(cls, cfg: LLMConfig, parts: AlgorithmParts, exact_logprobs: bool) -> CreditSettings:
        alg = cfg.algorithm
        return cls(
            parts=parts,
            updates_per_step=updates_per_step(cfg),
            exact_logprobs=exact_logprobs,
            replay=cfg.sampling.replay_ratio > 0,
            overlong=alg.overlong,
            overlong_buffer=alg.overlong_buffer,
            overlong_penalty=alg.overlong_penalty,
            max_new_tokens=cfg.rollout.max_new_tokens,
        )


def outcome_rewards(total: Tensor, mask: Tensor) -> Tensor:
    """(B, R) token rewards: each completion's reward on its last policy token, 0 elsewhere."""
    positions = torch.arange(mask.shape[1], device=mask.device)
    last = (positions * mask.long()).argmax(-1, keepdim=True)
    rewards = torch.zeros(mask.shape, dtype=torch.float32, device=mask.device)
    return rewards.scatter(-1, last, total[:, None].to(torch.float32))


def whiten(advantages: Tensor, mask: Tensor, dist: Dist) -> Tensor:
    """Advantages normalised over the policy tokens of the whole batch (all ranks)."""
    if not dist.distributed:
        return masked_whiten(advantages, mask)
    m = mask.bool()
    total, squares, count = dist.all_sum(
        [float(advantages[m].sum()), float((advantages[m] ** 2).sum()), float(m.sum())]
    )
    mean = total / max(count, 1.0)
    var = max(squares / max(count, 1.0) - mean**2, 0.0)
    whitened = (advantages - mean) * (var + 1e-8) ** -0.5
    return torch.where(m, whitened, torch.zeros_like(whitened))


def engine_gap(trainer: Tensor, engine: Tensor, mask: Tensor) -> dict[str, float]:
    """How far the engine's sampling log-probs are from the trainer's for the same tokens."""
    diff = (trainer - engine).abs()
    return {
        "engine/logprob_gap": float(masked_mean(diff, mask)),
        "engine/logprob_gap_max": float(diff[mask.bool()].max()) if bool(mask.any()) else 0.0,
        "engine/kl": float(masked_mean(k3(engine, trainer), mask)),
    }


def _total_rewards(settings: CreditSettings, scored: Scored, metrics: dict[str, float]) -> Tensor:
    """(B,) rewards, with DAPO's soft overlong penalty when `overlong = "penalty"`."""
    rollout = scored.rollout
    values = [0.0 if t is None else t for t in scored.rewards.total]  # None: blank rows
    total = torch.tensor(values, dtype=torch.float32, device=rollout.finished.device)
    if settings.overlong == "penalty":
        penalty = soft_overlong_penalty(
            rollout.response_lengths,
            settings.max_new_tokens,
            settings.overlong_buffer,
            settings.overlong_penalty,
        )
        metrics["overlong/penalty"] = float(penalty.mean()) if len(penalty) else 0.0
        total = total + penalty
    return total


def _sampling_logprobs(learners: Learners, settings: CreditSettings, scored: Scored) -> Tensor:
    """(B, R) log-probs of the current (pre-update) policy: the engine's when exact, with
    replayed rows (sampled by older weights) recomputed by the actor."""
    rollout = scored.rollout
    if not settings.exact_logprobs:
        return learners.actor.logprobs(rollout)
    old = rollout.logprobs
    if scored.replayed:
        rows = torch.tensor(scored.replayed, device=old.device).nonzero().squeeze(-1)
        old = old.clone()
        old[rows] = learners.actor.logprobs(rollout.select(rows))
    return old


def _anchors(
    learners: Learners, settings: CreditSettings, scored: Scored, metrics: dict[str, float]
) -> tuple[Tensor | None, Tensor | None, Tensor | None]:
    """(old, behaviour, kl anchor) log-probs: what anchors the clip (None: the policy being
    updated, for one on-policy update), what sampled the rows when that is older than the
    anchor, and the sampling policy's log-probs a KL reward penalty compares with."""
    rollout, parts = scored.rollout, settings.parts
    several = settings.updates_per_step > 1
    kl_reward = learners.reference is not None and not parts.kl_in_loss
    if parts.engine_correction:  # the trainer's own numbers anchor the clip
        old = learners.actor.logprobs(rollout)
        metrics.update(engine_gap(old, rollout.logprobs, rollout.response_mask))
        return old, rollout.logprobs, old
    if parts.off_policy == "weight":  # stale rows, weighted by min(pi_old / pi_behaviour, cap)
        old = learners.actor.logprobs(rollout) if several or kl_reward else None
        return (old if several else None), rollout.logprobs, old
    if parts.off_policy == "anchor":  # stale rows, the clip anchored where they were sampled
        return rollout.logprobs, None, rollout.logprobs
    behaviour = rollout.logprobs if settings.replay else None
    old = _sampling_logprobs(learners, settings, scored) if several or kl_reward else None
    return (old if several else None), behaviour, old


def make_train_batch(
    learners: Learners, settings: CreditSettings, scored: Scored
) -> tuple[TrainBatch, dict[str, float]]:
    """The batch the actor (and critic) update on, and the metrics of its making.

    The reference runs once per batch; so does the critic, for the values GAE needs. On
    several ranks every rank calls it with its own rows (a blank row when it has none), since
    whitening and the workers' forward passes are collective.
    """
    rollout, parts = scored.rollout, settings.parts
    mask = rollout.response_mask
    metrics: dict[str, float] = {}
    rewards = outcome_rewards(_total_rewards(settings, scored, metrics), mask)
    old_logp, behaviour, kl_anchor = _anchors(learners, settings, scored, metrics)
    ref_logp = None if learners.reference is None else learners.reference.logprobs(rollout)
    if ref_logp is not None and not parts.kl_in_loss:
        assert parts.kl is not None and kl_anchor is not None
        kl = parts.kl(kl_anchor, ref_logp)
        rewards = kl_penalty_rewards(rewards, kl, parts.kl_coef, mask)
        metrics["kl"] = float(masked_mean(kl, mask))
        ref_logp = None
    values = None if learners.critic is None else learners.critic.values(rollout)
    result = parts.advantage(
        AdvantageBatch(
            rewards=rewards,
            mask=mask,
            values=values,
            group_ids=rollout.group_ids,
            turns=scored.turns,
        ),
        parts.advantage_params,
    )
    advantages = result.advantages
    if parts.normalize_advantages:
        advantages = whiten(advantages, mask, learners.dist)
    per_row = masked_mean(advantages, mask, dim=-1)[mask.bool().any(-1)]
    metrics["adv_std"] = float(per_row.std()) if len(per_row) > 1 else 0.0
    metrics |= result.metrics  # the estimator's own (turn credit: the spread per turn)
    if values is not None:
        metrics.update(value_metrics(values, result.returns, mask))
    batch = TrainBatch(
        rollout,
        advantages,
        old_logp,
        ref_logp,
        behaviour_logp=behaviour,
        returns=None if values is None else result.returns,
        old_values=values,
        positive=torch.tensor(scored.correct, device=mask.device) if parts.nll_coef else None,
    )
    return _mask_overlong(settings, batch, metrics), metrics


def _mask_overlong(
    settings: CreditSettings, batch: TrainBatch, metrics: dict[str, float]
) -> TrainBatch:
    """With `overlong = "mask"`, completions cut by max_new_tokens leave the loss (DAPO's
    overlong filtering): their tokens are masked out, so they count in no aggregation; their
    advantages were computed with them, as in the paper."""
    if settings.overlong != "mask":
        return batch
    finished = batch.rollout.finished
    metrics["overlong/masked"] = float((~finished).float().mean()) if len(finished) else 0.0
    rollout = batch.rollout
    mask = rollout.response_mask * finished[:, None].to(rollout.response_mask.dtype)
    return replace(
        batch,
        rollout=replace(rollout, response_mask=mask),
        advantages=batch.advantages * finished[:, None],
    )

"""One RL step, in the order data flows: prompts -> rollouts -> rewards -> advantages ->
update -> metrics.

    sample_batch      prompts -> rollouts -> rewards, with dynamic sampling and history
                      resampling when asked for (llm_sampling.py)
    trainable         rows with a reward (and, for GRPO, a group to compare with)
    positive replay   a share of the batch drawn from past correct completions (llm_replay.py)
    make_train_batch  overlong penalty, KL penalty, critic values -> advantages and returns
    update_policy     the optimiser steps (llm_update.py)

Besides the reward metrics (llm_rollout.py), a step reports:

    adv_std                    std of the per-completion advantages
    kl                         KL to the reference policy (only when kl_coef > 0)
    entropy                    mean next-token entropy on the sampled tokens
    clip_ratio                 fraction of tokens where the PPO clip was active
    loss, grad_norm, lr        per optimiser step, averaged over the step's updates
    value_loss, explained_variance, values/mean, returns/mean   with a critic
    overlong/penalty, overlong/masked                           with overlong handling
    tokens_per_s               response tokens per second of the whole step
    time/rollout, time/update  seconds spent in each stage
"""

from __future__ import annotations

import time

import torch
from torch import Tensor

from ascent.algos import (
    AdvantageBatch,
    kl_penalty_rewards,
    masked_mean,
    masked_whiten,
    soft_overlong_penalty,
)
from ascent.models.forward import response_logprobs
from ascent.rollout import RolloutBatch
from ascent.train.llm_critic import batch_values, value_metrics
from ascent.train.llm_rollout import (  # noqa: F401  (the step's vocabulary, re-exported)
    Scored,
    collect,
    reward_metrics,
    sample_rows,
    score,
    trainable,
)
from ascent.train.llm_sampling import sample_batch
from ascent.train.llm_setup import LLMRun, updates_per_step
from ascent.train.llm_update import TrainBatch, update_policy


def outcome_rewards(total: Tensor, mask: Tensor) -> Tensor:
    """(B, R) token rewards: each completion's reward on its last policy token, 0 elsewhere."""
    positions = torch.arange(mask.shape[1], device=mask.device)
    last = (positions * mask.long()).argmax(-1, keepdim=True)
    rewards = torch.zeros(mask.shape, dtype=torch.float32, device=mask.device)
    return rewards.scatter(-1, last, total[:, None].to(torch.float32))


@torch.no_grad()
def policy_logprobs(model: torch.nn.Module, run: LLMRun, rollout: RolloutBatch) -> Tensor:
    """(B, R) log-probs of the batch under `model`, in micro-batches, without gradients."""
    size = run.cfg.train.micro_batch_size
    parts = [
        response_logprobs(model, rollout.select(slice(i, i + size)), run.parts.temperature)[0]
        for i in range(0, len(rollout), size)
    ]
    return torch.cat(parts)


def _total_rewards(run: LLMRun, scored: Scored, metrics: dict[str, float]) -> Tensor:
    """(B,) rewards, with DAPO's soft overlong penalty when `overlong = "penalty"`."""
    rollout = scored.rollout
    total = torch.tensor(scored.rewards.total, dtype=torch.float32, device=rollout.finished.device)
    alg = run.cfg.algorithm
    if alg.overlong == "penalty":
        penalty = soft_overlong_penalty(
            rollout.response_lengths,
            run.cfg.rollout.max_new_tokens,
            alg.overlong_buffer,
            alg.overlong_penalty,
        )
        metrics["overlong/penalty"] = float(penalty.mean())
        total = total + penalty
    return total


def _sampling_logprobs(run: LLMRun, scored: Scored) -> Tensor:
    """(B, R) log-probs of the current (pre-update) policy: the engine's when exact, with
    replayed rows (sampled by older weights) recomputed."""
    rollout = scored.rollout
    if not run.engine.exact_logprobs:
        return policy_logprobs(run.policy, run, rollout)
    old = rollout.logprobs
    if scored.replayed:
        rows = torch.tensor(scored.replayed, device=old.device).nonzero().squeeze(-1)
        old = old.clone()
        old[rows] = policy_logprobs(run.policy, run, rollout.select(rows))
    return old


def make_train_batch(run: LLMRun, scored: Scored) -> tuple[TrainBatch, dict[str, float]]:
    """Advantages (with the optional KL reward penalty) and the log-probs the loss needs.

    The sampling policy's log-probs come from the engine when they are exactly the policy's
    (`exact_logprobs`), else from one forward pass, and are only needed when the batch feeds
    more than one optimiser step or KL is a reward penalty. The reference model, when there
    is one, runs once per batch; so does the critic, for the values GAE needs.
    """
    rollout, parts = scored.rollout, run.parts
    mask = rollout.response_mask
    metrics: dict[str, float] = {}
    rewards = outcome_rewards(_total_rewards(run, scored, metrics), mask)
    needs_old = updates_per_step(run.cfg) > 1 or (parts.kl is not None and not parts.kl_in_loss)
    old_logp = _sampling_logprobs(run, scored) if needs_old else None
    ref_logp = None if parts.kl is None else policy_logprobs(run.reference, run, rollout)
    if ref_logp is not None and not parts.kl_in_loss:
        kl = parts.kl(old_logp, ref_logp)
        rewards = kl_penalty_rewards(rewards, kl, parts.kl_coef, mask)
        metrics["kl"] = float(masked_mean(kl, mask))
        ref_logp = None
    if updates_per_step(run.cfg) == 1:
        old_logp = None  # one update: the policy being updated is the sampling policy
    values = None
    if run.critic is not None:
        values = batch_values(run.critic, rollout, run.cfg.train.micro_batch_size)
    result = parts.advantage(
        AdvantageBatch(rewards=rewards, mask=mask, values=values, group_ids=rollout.group_ids),
        parts.advantage_params,
    )
    advantages = result.advantages
    if parts.normalize_advantages:
        advantages = masked_whiten(advantages, mask)
    per_row = masked_mean(advantages, mask, dim=-1)
    metrics["adv_std"] = float(per_row.std()) if len(per_row) > 1 else 0.0
    if values is not None:
        metrics.update(value_metrics(values, result.returns, mask))
    batch = TrainBatch(
        rollout,
        advantages,
        old_logp,
        ref_logp,
        # With positive replay every row carries the log-probs it was sampled with (a fresh
        # row's are the current policy's, weight 1); is_cap truncates the replayed rows'.
        behaviour_logp=rollout.logprobs if run.replay is not None else None,
        returns=None if values is None else result.returns,
        old_values=values,
        positive=torch.tensor(scored.correct, device=mask.device) if parts.nll_coef else None,
    )
    return _mask_overlong(run, batch, metrics), metrics


def _mask_overlong(run: LLMRun, batch: TrainBatch, metrics: dict[str, float]) -> TrainBatch:
    """With `overlong = "mask"`, completions cut by max_new_tokens leave the loss (DAPO's
    overlong filtering); their advantages were computed with them, as in the paper."""
    if run.cfg.algorithm.overlong != "mask":
        return batch
    finished = batch.rollout.finished
    metrics["overlong/masked"] = float((~finished).float().mean())
    return batch if bool(finished.all()) else batch.select(finished.nonzero().squeeze(-1))


def _with_replay(run: LLMRun, usable: Scored, step: int) -> tuple[Scored, dict[str, float]]:
    """The fresh rows plus up to `replay_rows` buffered correct ones; then buffer the fresh."""
    replayed, metrics = run.replay.sample(run.cfg.replay_rows, step)
    run.replay.add(usable, step)
    if replayed is None:
        return usable, metrics
    return Scored.concat([usable, replayed], run.tokenizer.pad_token_id), metrics


def rl_step(run: LLMRun, step: int) -> tuple[dict[str, float], Scored]:
    """Run one step; return its metrics and the scored batch (for sample dumps)."""
    t0 = time.perf_counter()
    scored, metrics = sample_batch(run)
    t1 = time.perf_counter()
    usable = trainable(scored, run.parts.needs_groups)
    if run.replay is not None:
        usable, replay_metrics = _with_replay(run, usable, step)
        metrics.update(replay_metrics)
    if len(usable.completions):
        batch, batch_metrics = make_train_batch(run, usable)
        metrics.update(batch_metrics)
        if len(batch.rollout):
            metrics.update(update_policy(run, batch, step))
    if "loss" not in metrics:  # nothing to learn from: no update (the schedule does not advance)
        metrics["update_skipped"] = 1.0
    t2 = time.perf_counter()
    metrics.update(
        {
            "tokens_per_s": scored.rollout.num_tokens / (t2 - t0),
            "time/rollout": t1 - t0,
            "time/update": t2 - t1,
        }
    )
    return metrics, scored

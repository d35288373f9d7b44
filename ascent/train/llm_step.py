"""One RL step: the controller over the role workers, in the order data flows: prompts ->
rollouts -> rewards -> advantages -> update -> metrics.

    source.next       the run's batch source (llm_sampling.py): engine.generate + reward,
                      prompts -> scored rollouts, with dynamic sampling and history
                      resampling when asked for, or prefetched ahead (async)
    trainable         rows with a reward (and, for GRPO, a group to compare with)
    positive replay   a share of the batch drawn from past correct completions (llm_replay.py)
    make_train_batch  actor / reference / critic forward passes -> overlong and KL penalties
                      -> advantages and returns (a TrainBatch)
    critic.update     value loss (every step; alone during critic warm-up)
    actor.update      the policy's optimiser steps (actor.py, updates.py)
    engine.sync_weights   the new policy version reaches the engine

No step function touches a worker's model: they call the workers' methods and pass typed
batches (`RolloutBatch`, `TrainBatch`). Besides the reward metrics (llm_rollout.py), a step
reports:

    adv_std                    std of the per-completion advantages
    kl                         KL to the reference policy (only when kl_coef > 0)
    entropy                    mean next-token entropy on the sampled tokens
    clip_ratio                 fraction of tokens where the PPO clip was active
    loss, grad_norm, lr        per optimiser step, averaged over the step's updates
    value_loss, explained_variance, values/mean, returns/mean   with a critic
    overlong/penalty, overlong/masked                           with overlong handling
    policy_version, staleness  the oldest version that sampled the step's rollouts, and how
                               many updates behind the trainer's it is (async rollouts)
    engine/logprob_gap, engine/kl   with an engine whose numerics are not the trainer's: the
                               mean |log pi_trainer - log pi_engine| and k3 KL on the sampled
                               tokens; is_clip_frac is then the share of tokens capped
    tokens_per_s               response tokens per second of the whole step (all ranks)
    time/rollout, time/update  seconds spent in each stage
    time/weight_sync           of the update's: seconds for the new weights to reach the engine
                               (through its transport, named in summary.json)
    memory/peak_gib            on GPUs: the most memory any rank has allocated so far
"""

from __future__ import annotations

import time
from dataclasses import replace

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
from ascent.runtime import large_blocks_returned
from ascent.train.critic import value_metrics
from ascent.train.distributed import Dist
from ascent.train.llm_rollout import (  # noqa: F401  (the step's vocabulary, re-exported)
    Scored,
    reward_metrics,
    sample_rows,
    trainable,
)
from ascent.train.llm_setup import LLMRun, updates_per_step
from ascent.train.train_batch import TrainBatch


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


def _total_rewards(run: LLMRun, scored: Scored, metrics: dict[str, float]) -> Tensor:
    """(B,) rewards, with DAPO's soft overlong penalty when `overlong = "penalty"`."""
    rollout = scored.rollout
    values = [0.0 if t is None else t for t in scored.rewards.total]  # None: blank rows
    total = torch.tensor(values, dtype=torch.float32, device=rollout.finished.device)
    alg = run.cfg.algorithm
    if alg.overlong == "penalty":
        penalty = soft_overlong_penalty(
            rollout.response_lengths,
            run.cfg.rollout.max_new_tokens,
            alg.overlong_buffer,
            alg.overlong_penalty,
        )
        metrics["overlong/penalty"] = float(penalty.mean()) if len(penalty) else 0.0
        total = total + penalty
    return total


def _sampling_logprobs(run: LLMRun, scored: Scored) -> Tensor:
    """(B, R) log-probs of the current (pre-update) policy: the engine's when exact, with
    replayed rows (sampled by older weights) recomputed by the actor."""
    rollout = scored.rollout
    if not run.engine.exact_logprobs:
        return run.actor.logprobs(rollout)
    old = rollout.logprobs
    if scored.replayed:
        rows = torch.tensor(scored.replayed, device=old.device).nonzero().squeeze(-1)
        old = old.clone()
        old[rows] = run.actor.logprobs(rollout.select(rows))
    return old


def make_train_batch(run: LLMRun, scored: Scored) -> tuple[TrainBatch, dict[str, float]]:
    """Advantages (with the optional KL reward penalty) and the log-probs the loss needs.

    The sampling policy's log-probs come from the engine when they are exactly the policy's
    (`exact_logprobs`), else from the actor, and are only needed when the batch feeds more
    than one optimiser step or KL is a reward penalty. The reference runs once per batch;
    so does the critic, for the values GAE needs.
    """
    rollout, parts = scored.rollout, run.parts
    mask = rollout.response_mask
    metrics: dict[str, float] = {}
    rewards = outcome_rewards(_total_rewards(run, scored, metrics), mask)
    several = updates_per_step(run.cfg) > 1
    needs_old = several or (parts.kl is not None and not parts.kl_in_loss)
    if parts.engine_correction:  # the trainer's own numbers anchor the clip
        old_logp = run.actor.logprobs(rollout)
        metrics.update(engine_gap(old_logp, rollout.logprobs, mask))
    else:
        old_logp = _sampling_logprobs(run, scored) if needs_old else None
    ref_logp = None if run.reference is None else run.reference.logprobs(rollout)
    if ref_logp is not None and not parts.kl_in_loss:
        kl = parts.kl(old_logp, ref_logp)
        rewards = kl_penalty_rewards(rewards, kl, parts.kl_coef, mask)
        metrics["kl"] = float(masked_mean(kl, mask))
        ref_logp = None
    if not several and not parts.engine_correction:
        old_logp = None  # one update: the policy being updated is the sampling policy
    values = None if run.critic is None else run.critic.values(rollout)
    result = parts.advantage(
        AdvantageBatch(rewards=rewards, mask=mask, values=values, group_ids=rollout.group_ids),
        parts.advantage_params,
    )
    advantages = result.advantages
    if parts.normalize_advantages:
        advantages = whiten(advantages, mask, run.dist)
    per_row = masked_mean(advantages, mask, dim=-1)[mask.bool().any(-1)]
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
        # With an engine whose numerics differ, the engine's are the behaviour policy's.
        behaviour_logp=rollout.logprobs
        if run.replay is not None or parts.engine_correction
        else None,
        returns=None if values is None else result.returns,
        old_values=values,
        positive=torch.tensor(scored.correct, device=mask.device) if parts.nll_coef else None,
    )
    return _mask_overlong(run, batch, metrics), metrics


def _mask_overlong(run: LLMRun, batch: TrainBatch, metrics: dict[str, float]) -> TrainBatch:
    """With `overlong = "mask"`, completions cut by max_new_tokens leave the loss (DAPO's
    overlong filtering): their tokens are masked out, so they count in no aggregation; their
    advantages were computed with them, as in the paper."""
    if run.cfg.algorithm.overlong != "mask":
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


def _with_replay(run: LLMRun, usable: Scored, step: int) -> tuple[Scored, dict[str, float]]:
    """The fresh rows plus this rank's share of `replay_rows` buffered correct ones; then
    buffer the fresh."""
    replayed, metrics = run.replay.sample(run.cfg.replay_rows // run.dist.world_size, step)
    run.replay.add(usable, step)
    if replayed is None:
        return usable, metrics
    return Scored.concat([usable, replayed], run.tokenizer.pad_token_id), metrics


def in_critic_warmup(run: LLMRun, step: int) -> bool:
    """Steps 1..value_warmup_steps train only the critic."""
    return run.critic is not None and step <= run.cfg.critic.value_warmup_steps


def _update(run: LLMRun, usable: Scored, step: int) -> dict[str, float]:
    """The learners' part of a step: the train batch, the critic's and the actor's updates,
    and the new weights to the engine."""
    batch, metrics = make_train_batch(run, usable)
    warmup = in_critic_warmup(run, step)
    if run.critic is not None:
        metrics.update(run.critic.update(batch, step, warmup=warmup))
    if warmup:
        metrics["critic_warmup"] = 1.0
    else:
        metrics.update(run.actor.update(batch, step))
        run.version = step
        start = time.perf_counter()
        run.engine.sync_weights(run.actor.weights(run.engine.takes_adapters), run.version)
        metrics["time/weight_sync"] = time.perf_counter() - start
    return metrics


def rl_step(run: LLMRun, step: int) -> tuple[dict[str, float], Scored]:
    """Run one step; return its metrics and this rank's scored batch (for sample dumps)."""
    t0 = time.perf_counter()
    scored, metrics, generated = run.source.next()
    sampled_by = int(scored.rollout.versions.min()) if len(scored) else run.version
    metrics["policy_version"] = float(sampled_by)
    metrics["staleness"] = float(run.version - sampled_by)
    t1 = time.perf_counter()
    usable = trainable(scored, run.parts.needs_groups)
    if run.replay is not None:
        usable, replay_metrics = _with_replay(run, usable, step)
        metrics.update(replay_metrics)
    rows = run.dist.all_sum([float(len(usable.completions))])[0]
    if rows:
        if not len(usable.completions):  # others have rows: take part with a blank one
            usable = generated.blank()
        with large_blocks_returned():  # the update's activations go back to the system
            metrics.update(_update(run, usable, step))
    else:  # nothing to learn from on any rank: no update (the schedule does not advance)
        metrics["update_skipped"] = 1.0
    t2 = time.perf_counter()
    tokens = run.dist.all_sum([float(generated.rollout.num_tokens)])[0]
    metrics.update(
        {"tokens_per_s": tokens / (t2 - t0), "time/rollout": t1 - t0, "time/update": t2 - t1}
    )
    for part in (run.engine, run.reward):  # Ray actors: restarts so far
        if hasattr(part, "metrics"):
            metrics.update(part.metrics())
    if run.device.type == "cuda":  # the most any rank's GPU has held so far
        peak_mib = run.dist.all_max(torch.cuda.max_memory_allocated(run.device) >> 20)
        metrics["memory/peak_gib"] = peak_mib / 1024
    return metrics, scored

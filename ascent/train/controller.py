"""One controller for every LLM recipe: a batch source, the learners, one train-batch function.

    rows     source.next(version)    the run's batch source (llm_sampling.py, agentic_source.py):
                                     plain completions, DAPO dynamic sampling, SRPO history
                                     resampling, prefetched (async) batches or agentic episodes;
                                     test-time RL's attempts (evaluation/test_time_rl.py)
    usable   trainable               rows with a reward (and, for GRPO, a group to compare with)
             positive replay         a share of the batch drawn from past correct completions
                                     (llm_replay.py)
    batch    make_train_batch        credit.py: actor / reference / critic forward passes ->
                                     penalties -> the recipe's advantage estimator (turn-level
                                     for episodes) -> a TrainBatch
    update   critic.update           value loss (every step; alone during critic warm-up)
             actor.update            the policy's optimiser steps (actor.py, updates.py)
    publish  engine.sync_weights     the new version reaches every engine that samples (through
                                     its transport); source.updated(version) tells the source

The controller owns the policy version (the step whose update the policy last took); nothing
below it reads or changes the controller: the source gets the version it samples for, the
train-batch function gets the learners and the recipe's settings, the workers get typed
batches.

Besides the source's metrics (reward metrics, llm_rollout.py; episode metrics,
agentic_metrics.py), a step reports:

    adv_std                    std of the per-completion advantages (per turn for episodes)
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
    time/weight_sync           of the update's: seconds for the new weights to reach the engines
                               (through their transport, named in summary.json)
    memory/peak_gib            on GPUs: the most memory any rank has allocated so far
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from transformers.tokenization_utils_base import PreTrainedTokenizerBase

from ascent.data import TaskData
from ascent.rollout import RolloutEngine
from ascent.runtime import large_blocks_returned
from ascent.train.credit import CreditSettings, Learners, make_train_batch
from ascent.train.distributed import Dist
from ascent.train.llm_replay import PositiveReplay
from ascent.train.llm_rollout import Rollouts, Scored, trainable
from ascent.train.llm_sampling import BatchSource
from ascent.train.train_batch import TrainBatch


@dataclass(frozen=True)
class Schedule:
    """The loop's numbers the step needs."""

    value_warmup_steps: int = 0  # steps 1..N train only the critic
    replay_rows: int = 0  # replayed rows per step over all ranks


class Controller:
    """The live run: the learners, the rollout side, the batch source and the policy version.

    Built by `llm_setup.build_run` (the loop, llm.py, calls `step`; the checkpoints read and
    restore the parts) and by test-time RL's `PolicyAdapter` (one per problem or band)."""

    def __init__(
        self,
        *,
        learners: Learners,
        credit: CreditSettings,
        source: BatchSource,
        engine: RolloutEngine,
        pad_id: int,
        schedule: Schedule = Schedule(),
        replay: PositiveReplay | None = None,
        watched: Sequence[object] = (),
        rollouts: Rollouts | None = None,
        task: TaskData | None = None,
    ) -> None:
        self.learners = learners
        self.credit = credit
        self.source = source
        self._engine = engine
        self.pad_id = pad_id  # replayed rows are padded with it
        self.schedule = schedule
        self.replay = replay
        self.watched = tuple(watched)  # parts with `metrics()` (Ray actors: their restarts)
        # A training run's rollout side and task, which its loop, evaluations, checkpoints and
        # the numerics preflight read; the step never does. Test-time RL has neither.
        self.rollouts = rollouts
        self.task = task
        # the policy's version: the step whose update it last took (0: the initial weights);
        # the engines sample with it, rollouts carry it
        self.version = 0

    # -- the parts, read-only ----------------------------------------------------------------

    @property
    def dist(self) -> Dist:
        return self.learners.dist

    @property
    def device(self) -> torch.device:
        return self.dist.device

    @property
    def actor(self):
        return self.learners.actor

    @property
    def critic(self):
        return self.learners.critic

    @property
    def reference(self):
        return self.learners.reference

    @property
    def engine(self) -> RolloutEngine:
        """The run's engine (evaluations, plain batches)."""
        return self._engine

    @property
    def tokenizer(self) -> PreTrainedTokenizerBase:
        assert self.rollouts is not None, "a controller without a rollout side has no tokenizer"
        return self.rollouts.tokenizer

    def engines(self) -> list[RolloutEngine]:
        """Every engine that samples from the policy: the rollout side's, and the source's
        own when it has one (agentic episodes play on a copy)."""
        own = getattr(self.source, "engine", None)
        return [self.engine] + ([own] if own is not None and own is not self.engine else [])

    # -- one step ----------------------------------------------------------------------------

    def train_batch(self, scored: Scored) -> tuple[TrainBatch, dict[str, float]]:
        """`scored` as the learners train on it (credit.py)."""
        return make_train_batch(self.learners, self.credit, scored)

    def publish(self) -> float:
        """The policy's current weights to every engine; seconds it took."""
        start = time.perf_counter()
        actor = self.learners.actor
        for engine in self.engines():
            engine.sync_weights(actor.weights(engine.takes_adapters), self.version)
        return time.perf_counter() - start

    def in_critic_warmup(self, step: int) -> bool:
        """Steps 1..value_warmup_steps train only the critic."""
        return self.critic is not None and step <= self.schedule.value_warmup_steps

    def _with_replay(self, usable: Scored, step: int) -> tuple[Scored, dict[str, float]]:
        """The fresh rows plus this rank's share of `replay_rows` buffered correct ones; then
        buffer the fresh."""
        assert self.replay is not None
        rows = self.schedule.replay_rows // self.dist.world_size
        replayed, metrics = self.replay.sample(rows, step)
        self.replay.add(usable, step)
        if replayed is None:
            return usable, metrics
        return Scored.concat([usable, replayed], self.pad_id), metrics

    def _update(self, usable: Scored, step: int) -> tuple[dict[str, float], bool]:
        """The learners' part of a step: the train batch, the critic's and the actor's
        updates, and the new weights to the engines. Also says whether the policy moved."""
        batch, metrics = self.train_batch(usable)
        warmup = self.in_critic_warmup(step)
        if self.critic is not None:
            metrics.update(self.critic.update(batch, step, warmup=warmup))
        if warmup:
            metrics["critic_warmup"] = 1.0
            return metrics, False
        metrics.update(self.actor.update(batch, step))
        self.version = step
        metrics["time/weight_sync"] = self.publish()
        return metrics, True

    def step(self, step: int) -> tuple[dict[str, float], Scored]:
        """Run one step; return its metrics and this rank's scored batch (for sample dumps)."""
        t0 = time.perf_counter()
        scored, metrics, generated = self.source.next(self.version)
        sampled_by = int(scored.rollout.versions.min()) if len(scored) else self.version
        metrics["policy_version"] = float(sampled_by)
        metrics["staleness"] = float(self.version - sampled_by)
        t1 = time.perf_counter()
        usable = trainable(scored, self.credit.parts.needs_groups)
        if self.replay is not None:
            usable, replay_metrics = self._with_replay(usable, step)
            metrics.update(replay_metrics)
        rows = self.dist.all_sum([float(len(usable))])[0]
        moved = False
        if rows:
            if not len(usable):  # others have rows: take part with a blank one
                usable = generated.blank()
            with large_blocks_returned():  # the update's activations go back to the system
                update_metrics, moved = self._update(usable, step)
                metrics.update(update_metrics)
        else:  # nothing to learn from on any rank: no update (the schedule does not advance)
            metrics["update_skipped"] = 1.0
        self.source.updated(self.version, moved)
        t2 = time.perf_counter()
        tokens = self.dist.all_sum([float(generated.rollout.num_tokens)])[0]
        metrics.update(
            {"tokens_per_s": tokens / (t2 - t0), "time/rollout": t1 - t0, "time/update": t2 - t1}
        )
        for part in self.watched:
            metrics.update(part.metrics())  # type: ignore[attr-defined]
        if self.device.type == "cuda":  # the most any rank's GPU has held so far
            peak_mib = self.dist.all_max(torch.cuda.max_memory_allocated(self.device) >> 20)
            metrics["memory/peak_gib"] = peak_mib / 1024
        return metrics, scored

    def close(self) -> None:
        """Stop what runs beside the trainer: prefetching or episodes, reward workers,
        engines."""
        self.source.close()
        if self.rollouts is not None:
            self.rollouts.close()

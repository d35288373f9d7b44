"""Everything an LLM run is made of, built once from the config: its `Controller`.

The controller (controller.py) drives one batch source over role workers that meet only
through narrow interfaces and typed batches:

    learners   actor      Actor: policy, optimiser, schedule     logprobs, update, weights
               reference  ModelReference / AdapterReference     logprobs      (kl_coef > 0)
               critic     Critic / ActorHead                     values, update (gae estimators)
    rollouts   engine     RolloutEngine                          generate, sync_weights
               reward     CompositeReward                        scores completions
    source     FreshBatches, Prefetcher (async rollouts) or EpisodeSource (agentic episodes)

The algorithm's named parts are looked up once (`parts.py`), and the optional parts of a
recipe are objects that exist or not: a critic, a reward history (SRPO history resampling),
a positive-replay buffer (VAPO-style replay). On several ranks the actor, critic and
reference are sharded with FSDP2 (sharding.py) and each rank rolls out its share.
"""

from __future__ import annotations

import contextlib
import math
from pathlib import Path

import torch
from torch import nn
from torch.optim.lr_scheduler import LambdaLR
from transformers.tokenization_utils_base import PreTrainedTokenizerBase

from ascent.config.cluster import ClusterSection
from ascent.config.llm_sections import OptimSection
from ascent.data import (
    PromptFormatter,
    PromptSampler,
    RewardHistory,
    load_task,
    uses_chat_template,
)
from ascent.models import (
    load_critic,
    load_policy,
    load_reference,
    load_tokenizer,
    resolve_dtype,
    value_head,
)
from ascent.observe.text_metrics import reflection_pattern
from ascent.rewards import CompositeReward, build_reward
from ascent.rollout import ENGINES, EngineContext, RolloutEngine, SamplingParams
from ascent.rules import LLMConfig
from ascent.rules.llm_rules import engine_serves_the_run, replay_rows
from ascent.train.actor import Actor, ActorHead, ValueHeadState
from ascent.train.agentic_source import EpisodeSource
from ascent.train.controller import Controller, Schedule
from ascent.train.credit import CreditSettings, Learners, updates_per_step
from ascent.train.critic import Critic, CriticWorker
from ascent.train.distributed import Dist
from ascent.train.llm_preflight import check_memory, check_prompts
from ascent.train.llm_replay import PositiveReplay
from ascent.train.llm_rollout import Rollouts
from ascent.train.llm_sampling import BatchSource, FreshBatches, Prefetcher
from ascent.train.parts import AlgorithmParts, algorithm_parts, with_engine_correction
from ascent.train.reference import AdapterReference, ModelReference, Reference
from ascent.train.run_engine import RankZeroEngine
from ascent.train.sharding import shard_model


def prompts_per_step(cfg: LLMConfig) -> int:
    """Fresh prompts per step over all ranks: the batch less its replayed rows, in groups."""
    return (cfg.train.batch_size - replay_rows(cfg)) // cfg.rollout.group_size


def policy_updates(cfg: LLMConfig) -> int:
    """Optimiser steps of the policy over the run (critic warm-up steps do not step it)."""
    return (cfg.train.total_steps - cfg.critic.value_warmup_steps) * updates_per_step(cfg)


def lr_lambda(optim: OptimSection, total: int):
    """Linear warmup over warmup_ratio of `total` updates, then cosine / linear / constant."""
    warmup = math.ceil(optim.warmup_ratio * total)
    floor = optim.min_lr_ratio

    def factor(update: int) -> float:
        if update < warmup:
            return (update + 1) / (warmup + 1)
        if optim.schedule == "constant":
            return 1.0
        progress = min(1.0, (update - warmup) / max(1, total - warmup))
        decay = (
            0.5 * (1 + math.cos(math.pi * progress)) if optim.schedule == "cosine" else 1 - progress
        )
        return floor + (1 - floor) * decay

    return factor


def make_optimizer(params: list[nn.Parameter], o: OptimSection, lr: float, total_updates: int):
    """AdamW over float32 parameters (the master weights) and its LR schedule."""
    optimizer = torch.optim.AdamW(
        params, lr=lr, betas=tuple(o.betas), eps=o.eps, weight_decay=o.weight_decay
    )
    return optimizer, LambdaLR(optimizer, lr_lambda(o, total_updates))


def eos_ids(model: nn.Module, tokenizer: PreTrainedTokenizerBase) -> list[int]:
    ids = [tokenizer.eos_token_id]
    generation = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    return ids + ([generation] if isinstance(generation, int) else list(generation or []))


def make_engine(
    cfg: LLMConfig, actor: Actor, tokenizer: PreTrainedTokenizerBase, *, own_copy: bool = False
) -> RolloutEngine:
    """The `[rollout] engine`: decoding the actor's module in place, or (`own_copy`, and
    always for asynchronous rollouts) a model of its own loaded in the compute dtype and
    synced from the actor's weights now; with `[cluster] rollout_replicas`, Ray actors.
    An engine outside the process (vLLM servers, Ray replicas) is the run's, not a rank's:
    on several ranks rank 0 alone starts it and the others reach it (run_engine.py)."""
    dist = actor.dist
    engine: RolloutEngine | None = None
    if dist.main or not engine_serves_the_run(cfg):
        engine = _start_engine(cfg, actor, tokenizer, own_copy)
    if engine_serves_the_run(cfg) and dist.distributed:
        engine = RankZeroEngine(dist, engine)
    assert engine is not None
    try:
        engine.sync_weights(
            actor.weights(engine.takes_adapters), 0
        )  # a no-op for one decoding the actor's module
    except BaseException:
        engine.close()  # no server, engine process or actor may outlive a failed start
        raise
    return engine


def _start_engine(
    cfg: LLMConfig, actor: Actor, tokenizer: PreTrainedTokenizerBase, own_copy: bool
) -> RolloutEngine:
    eos = eos_ids(actor.model, tokenizer)
    if cfg.cluster.backend == "ray" and cfg.cluster.rollout_replicas:
        from ascent.cluster.rollouts import RayRolloutEngine

        return RayRolloutEngine(cfg.cluster, cfg.model, tokenizer.pad_token_id, eos)
    ctx = _engine_context(cfg, actor, tokenizer, eos, own_copy)
    return ENGINES.get(cfg.rollout.engine)(ctx)


def _engine_context(
    cfg: LLMConfig,
    actor: Actor,
    tokenizer: PreTrainedTokenizerBase,
    eos: list[int],
    own_copy: bool,
) -> EngineContext:
    return EngineContext(
        cfg=cfg,
        live=actor.live_module,
        compute_dtype=actor.compute_dtype,
        device=actor.dist.device,
        pad_id=tokenizer.pad_token_id,
        decode=tokenizer.decode,
        eos_ids=eos,
        own_copy=own_copy or cfg.rollout.async_,
        work_dir=Path(cfg.run.output_dir) / cfg.run.name,  # the run directory
    )


def _actor(cfg: LLMConfig, parts: AlgorithmParts, dist: Dist) -> Actor:
    compute = resolve_dtype(cfg.model.dtype, dist.device)
    policy = load_policy(cfg.model, dist.device, cfg.run.seed)  # float32 parameters
    head = None
    if cfg.critic.architecture == "head" and parts.needs_values:
        model = value_head(policy, through_policy=dist.distributed)
        optimizer, scheduler = make_optimizer(
            list(model.head.parameters()), cfg.optim, cfg.critic.lr, _critic_updates(cfg)
        )
        c = cfg.critic
        head = ValueHeadState(model, optimizer, scheduler, c.value_coef, c.value_clip)
    policy = shard_model(policy, dist, compute)
    trained = [p for p in policy.parameters() if p.requires_grad]
    optimizer, scheduler = make_optimizer(trained, cfg.optim, cfg.optim.lr, policy_updates(cfg))
    return Actor(
        policy,
        optimizer,
        scheduler,
        parts=parts,
        train=cfg.train,
        seed=cfg.run.seed,
        dist=dist,
        compute_dtype=compute,
        head=head,
    )


def _critic_updates(cfg: LLMConfig) -> int:
    return cfg.train.total_steps * updates_per_step(cfg)


def _critic(cfg: LLMConfig, actor: Actor, parts: AlgorithmParts, dist: Dist) -> CriticWorker | None:
    if not parts.needs_values:
        return None
    if actor.head is not None:
        return ActorHead(actor)
    model = load_critic(cfg.critic, cfg.model, None, dist.device)
    model = shard_model(model, dist, actor.compute_dtype)
    trained = [p for p in model.parameters() if p.requires_grad]
    optimizer, scheduler = make_optimizer(trained, cfg.optim, cfg.critic.lr, _critic_updates(cfg))
    return Critic(
        model,
        optimizer,
        scheduler,
        aggregate=parts.aggregate,
        norm_const=parts.norm_const,
        clip=cfg.critic.value_clip,
        train=cfg.train,
        seed=cfg.run.seed,
        dist=dist,
        compute_dtype=actor.compute_dtype,
    )


def _reference(cfg: LLMConfig, actor: Actor, parts: AlgorithmParts, dist: Dist) -> Reference | None:
    if parts.kl is None:
        return None
    if cfg.model.lora.enabled and cfg.model.ref_model is None:
        return AdapterReference(actor)
    model = load_reference(cfg.model, dist.device, dtype=actor.compute_dtype)
    model = shard_model(model, dist, actor.compute_dtype)
    return ModelReference(model, parts.temperature, cfg.train, dist, actor.compute_dtype)


def _reward(cfg: LLMConfig) -> CompositeReward:
    """The reward functions, in this process or (`[cluster] reward_workers`) on Ray actors."""
    if cfg.cluster.backend == "ray" and cfg.cluster.reward_workers:
        from ascent.cluster.rewards import RayRewardPool

        return RayRewardPool(cfg.cluster, cfg.reward, cfg.sandbox)  # called the same way
    return build_reward(cfg.reward, cfg.sandbox)


def _join_cluster(cluster: ClusterSection, dist: Dist) -> None:
    """Rank 0 starts (or joins) the run's Ray cluster and checks it; the other ranks join
    that same cluster, and only when they start actors of their own (each rank's reward
    workers): a local Ray is started once per run, never once per rank."""
    from ascent.cluster.runtime import check_cluster, join, join_handle

    if dist.main:
        check_cluster(cluster, reward_pools=dist.world_size)
    if not dist.distributed:
        return
    handle = dist.broadcast(join_handle(cluster) if dist.main else None)
    if not dist.main and cluster.reward_workers:
        join(cluster, handle)


def _source(cfg: LLMConfig, rollouts: Rollouts, actor: Actor) -> BatchSource:
    """Where each step's rows come from: agentic episodes (played on an engine with weights of
    its own: a copy of the policy, or the run's vLLM engine), prefetched batches (async
    rollouts) or batches sampled now."""
    if cfg.agentic.enabled:
        if rollouts.engine.transport.name != "in_place":  # it holds weights of its own
            # (vLLM colocated): episodes share it, as a second copy would double its memory;
            # its lock keeps their generate calls apart from evaluations and weight loads
            return EpisodeSource(cfg, rollouts, rollouts.engine)
        engine = make_engine(cfg, actor, rollouts.tokenizer, own_copy=True)
        try:
            return EpisodeSource(cfg, rollouts, engine)
        except BaseException:
            engine.close()
            raise
    if cfg.rollout.async_:
        return Prefetcher(rollouts, cfg.rollout.max_staleness)
    return FreshBatches(rollouts, cfg.sampling)


def build_run(cfg: LLMConfig, dist: Dist | torch.device) -> Controller:
    """Load models and data, and build the workers, the reward, the samplers and the batch
    source (on this rank of `dist`; a device means one process on it)."""
    if isinstance(dist, torch.device):
        dist = Dist.single(dist)
    tokenizer = load_tokenizer(cfg.model)
    chat = uses_chat_template(cfg.data.chat_template, tokenizer)  # refused before weights load
    task = load_task(cfg.data, cfg.run.seed)
    check_prompts(cfg, tokenizer, task, chat)  # prompts that cannot fit the context: ditto
    check_memory(cfg, dist, tokenizer, task, chat)  # a run that cannot fit: ditto
    parts = algorithm_parts(cfg)
    actor = _actor(cfg, parts, dist)
    s = cfg.sampling
    replay = None
    if s.replay_ratio:
        replay = PositiveReplay(
            s.replay_buffer_size, s.replay_max_staleness, cfg.run.seed, tokenizer.pad_token_id
        )
    if cfg.cluster.backend == "ray":
        _join_cluster(cfg.cluster, dist)
    with contextlib.ExitStack() as started:  # stopped again if a later part fails to start
        engine = make_engine(cfg, actor, tokenizer)
        started.callback(engine.close)
        reward = _reward(cfg)
        started.callback(reward.close)
        if not engine.exact_logprobs or cfg.rollout.async_:
            parts = actor.parts = with_engine_correction(parts, cfg.algorithm.engine_is_cap)
        rollouts = Rollouts(
            dist=dist,
            sampler=PromptSampler(
                task.train, seed=cfg.run.seed, shuffle=cfg.data.shuffle, weights=task.weights
            ),
            formatter=PromptFormatter(cfg.data.prompt_template, tokenizer, chat),
            engine=engine,
            tokenizer=tokenizer,
            reward=reward,
            sampling=SamplingParams.from_config(cfg.rollout),
            generator=torch.Generator(device=dist.device).manual_seed(cfg.run.seed + dist.rank),
            group_size=cfg.rollout.group_size,
            prompts_per_step=prompts_per_step(cfg),
            history=RewardHistory() if s.history_resampling else None,
            reflection=reflection_pattern(cfg.logging.reflection_words),
        )
        source = _source(cfg, rollouts, actor)
        started.callback(source.close)
        learners = Learners(
            actor=actor,
            reference=_reference(cfg, actor, parts, dist),
            critic=_critic(cfg, actor, parts, dist),
        )
        controller = Controller(
            learners=learners,
            credit=CreditSettings.of(cfg, parts, engine.exact_logprobs),
            source=source,
            engine=engine,
            pad_id=tokenizer.pad_token_id,
            schedule=Schedule(cfg.critic.value_warmup_steps, replay_rows(cfg)),
            replay=replay,
            watched=[part for part in (engine, reward) if hasattr(part, "metrics")],
            rollouts=rollouts,
            task=task,
        )
        started.pop_all()
    return controller

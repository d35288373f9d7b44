"""Everything an LLM run is made of, built once from the config: the `LLMRun`.

The algorithm's named parts are looked up here, once, from `[algorithm]` (advantage
estimator, policy loss, loss aggregation, KL estimator); the loop only calls what it is
given, so no caller ever branches on a recipe's name. The optional parts of a recipe are
objects that exist or not: a critic (value-based estimators), a reward history (SRPO
history resampling), a positive-replay buffer (VAPO-style replay).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
from torch import nn
from torch.optim.lr_scheduler import LambdaLR
from transformers.tokenization_utils_base import PreTrainedTokenizerBase

from ascent.algos import (
    ADVANTAGES,
    AGGREGATIONS,
    KL_ESTIMATORS,
    POLICY_LOSSES,
    AdvantageBatch,
    AdvantageParams,
    AdvantageResult,
    PolicyLossInput,
    PolicyLossParams,
)
from ascent.algos.aggregation import Aggregation
from ascent.algos.kl import KLEstimator
from ascent.algos.policy_loss import PolicyLoss
from ascent.config.llm import LLMConfig, OptimSection
from ascent.data import (
    PromptFormatter,
    PromptSampler,
    RewardHistory,
    TaskData,
    load_task,
    uses_chat_template,
)
from ascent.models import load_policy, load_reference, load_tokenizer
from ascent.rewards import CompositeReward, build_reward
from ascent.rollout import ENGINES, RolloutEngine, SamplingParams

if TYPE_CHECKING:
    from ascent.train.llm_critic import Critic
    from ascent.train.llm_replay import PositiveReplay


@dataclass(frozen=True)
class AlgorithmParts:
    """The recipe: named components from `[algorithm]` and the numbers they need."""

    advantage: Callable[[AdvantageBatch, AdvantageParams], AdvantageResult]  # ADVANTAGES
    advantage_params: AdvantageParams
    policy_loss: PolicyLoss  # POLICY_LOSSES entry
    loss_params: PolicyLossParams
    aggregate: Aggregation  # AGGREGATIONS entry
    norm_const: float  # the Dr. GRPO constant of seq_mean_token_sum_norm
    kl: KLEstimator | None  # KL_ESTIMATORS entry; None when kl_coef is 0 (no reference model)
    kl_coef: float
    kl_in_loss: bool  # True: a loss term; False: a per-token reward penalty
    entropy_coef: float
    temperature: float  # the policy is softmax(logits / temperature), as sampled
    # True when a completion whose advantages are all 0 adds nothing to the loss or its
    # gradient (no KL or entropy term, and a policy loss proportional to the advantage), so
    # the update may skip it: same loss, less compute.
    skip_zero_advantage: bool
    needs_groups: bool  # the estimator compares completions of one prompt (GRPO)
    needs_values: bool  # the estimator reads critic values (GAE): the run has a critic
    normalize_advantages: bool  # whiten advantages over the batch's policy tokens
    nll_coef: float  # weight of the NLL of correct completions (VAPO); 0: off


def vanishes_at_zero_advantage(policy_loss: PolicyLoss, params: PolicyLossParams) -> bool:
    """Probe a policy loss: with zero advantages, are its value and gradient exactly 0?"""
    gen = torch.Generator().manual_seed(0)
    logp = (-torch.rand(3, 5, generator=gen, dtype=torch.float64)).requires_grad_()
    old = -torch.rand(3, 5, generator=gen, dtype=torch.float64)
    zero, mask = torch.zeros(3, 5, dtype=torch.float64), torch.ones(3, 5, dtype=torch.float64)
    loss, _ = policy_loss(PolicyLossInput(logp, old, zero, mask), params)
    (grad,) = torch.autograd.grad(loss.sum(), logp, allow_unused=True)
    return bool((loss == 0).all()) and (grad is None or bool((grad == 0).all()))


def algorithm_parts(cfg: LLMConfig) -> AlgorithmParts:
    alg = cfg.algorithm
    policy_loss = POLICY_LOSSES.get(alg.policy_loss)
    loss_params = PolicyLossParams(alg.clip_low, alg.clip_high, alg.dual_clip, alg.is_cap)
    needs_values = bool(ADVANTAGES.meta(alg.advantage).get("needs_values"))
    extra_terms = (
        (alg.kl_coef > 0 and alg.kl_mode == "loss")
        or alg.entropy_coef > 0
        or alg.nll_coef > 0
        or needs_values  # the value loss is trained on every row
    )
    return AlgorithmParts(
        advantage=ADVANTAGES.get(alg.advantage),
        advantage_params=AdvantageParams(
            gamma=alg.gamma,
            lam=alg.lam,
            lam_critic=alg.lam_critic,
            length_alpha=alg.length_alpha,
            std_eps=alg.std_eps,
        ),
        policy_loss=policy_loss,
        loss_params=loss_params,
        aggregate=AGGREGATIONS.get(alg.loss_agg),
        norm_const=float(alg.agg_norm_const or cfg.rollout.max_new_tokens),
        kl=KL_ESTIMATORS.get(alg.kl_estimator) if alg.kl_coef > 0 else None,
        kl_coef=alg.kl_coef,
        kl_in_loss=alg.kl_mode == "loss",
        entropy_coef=alg.entropy_coef,
        temperature=cfg.rollout.temperature,
        needs_groups=bool(ADVANTAGES.meta(alg.advantage).get("needs_groups")),
        needs_values=needs_values,
        normalize_advantages=alg.normalize_advantages,
        nll_coef=alg.nll_coef,
        skip_zero_advantage=not extra_terms
        and vanishes_at_zero_advantage(policy_loss, loss_params),
    )


@dataclass
class LLMRun:
    """The live objects of one run (mutable: weights, optimiser and streams advance)."""

    cfg: LLMConfig
    device: torch.device
    policy: nn.Module
    reference: nn.Module | None  # frozen initial policy; only when kl_coef > 0
    tokenizer: PreTrainedTokenizerBase
    engine: RolloutEngine
    reward: CompositeReward
    task: TaskData
    sampler: PromptSampler
    optimizer: torch.optim.Optimizer
    scheduler: LambdaLR
    generator: torch.Generator  # the sampling stream (its state is checkpointed)
    parts: AlgorithmParts
    sampling: SamplingParams
    formatter: PromptFormatter  # problem -> the text and token ids the policy sees
    critic: Critic | None = None  # value-based estimators only
    history: RewardHistory | None = None  # [sampling] history_resampling only
    replay: PositiveReplay | None = None  # [sampling] replay_ratio > 0 only

    @property
    def prompts_per_step(self) -> int:
        """Fresh prompts per step: the batch less its replayed rows, in groups."""
        return (self.cfg.train.batch_size - self.cfg.replay_rows) // self.cfg.rollout.group_size


def updates_per_step(cfg: LLMConfig) -> int:
    """Optimiser steps per RL step: ppo_epochs passes over batch_size / mini_batch_size."""
    t = cfg.train
    return t.ppo_epochs * (t.batch_size // (t.mini_batch_size or t.batch_size))


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


def make_optimizer(policy: nn.Module, cfg: LLMConfig, total_updates: int):
    o = cfg.optim
    params = [p for p in policy.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(
        params, lr=o.lr, betas=tuple(o.betas), eps=o.eps, weight_decay=o.weight_decay
    )
    return optimizer, LambdaLR(optimizer, lr_lambda(o, total_updates))


def make_engine(cfg: LLMConfig, policy: nn.Module, tokenizer: PreTrainedTokenizerBase):
    eos = [tokenizer.eos_token_id]
    generation_eos = getattr(getattr(policy, "generation_config", None), "eos_token_id", None)
    eos += [generation_eos] if isinstance(generation_eos, int) else list(generation_eos or [])
    return ENGINES.get(cfg.rollout.engine)(policy, pad_id=tokenizer.pad_token_id, eos_ids=eos)


def _optional_parts(
    cfg: LLMConfig, policy: nn.Module, tokenizer: PreTrainedTokenizerBase, device: torch.device
) -> dict[str, object]:
    """The critic, reward history and replay buffer the recipe asks for (absent: None)."""
    from ascent.train.llm_critic import build_critic
    from ascent.train.llm_replay import PositiveReplay

    s = cfg.sampling
    critic = None
    if ADVANTAGES.meta(cfg.algorithm.advantage).get("needs_values"):
        total = cfg.train.total_steps * updates_per_step(cfg)
        critic = build_critic(cfg, policy, device, total, lambda n: lr_lambda(cfg.optim, n))
    replay = None
    if s.replay_ratio:
        replay = PositiveReplay(
            s.replay_buffer_size, s.replay_max_staleness, cfg.run.seed, tokenizer.pad_token_id
        )
    history = RewardHistory() if s.history_resampling else None
    return {"critic": critic, "replay": replay, "history": history}


def build_run(cfg: LLMConfig, device: torch.device) -> LLMRun:
    """Load models and data, and build the engine, reward, optimiser and schedule."""
    tokenizer = load_tokenizer(cfg.model)
    policy = load_policy(cfg.model, device)
    parts = algorithm_parts(cfg)
    reference = load_reference(cfg.model, device) if parts.kl is not None else None
    task = load_task(cfg.data, cfg.run.seed)
    sampler = PromptSampler(task.train, seed=cfg.run.seed, shuffle=cfg.data.shuffle)
    optimizer, scheduler = make_optimizer(policy, cfg, policy_updates(cfg))
    chat = uses_chat_template(cfg.data.chat_template, tokenizer)
    return LLMRun(
        cfg=cfg,
        device=device,
        policy=policy,
        reference=reference,
        tokenizer=tokenizer,
        engine=make_engine(cfg, policy, tokenizer),
        reward=build_reward(cfg.reward, cfg.sandbox),
        task=task,
        sampler=sampler,
        optimizer=optimizer,
        scheduler=scheduler,
        generator=torch.Generator(device=device).manual_seed(cfg.run.seed),
        parts=parts,
        sampling=SamplingParams.from_config(cfg.rollout),
        formatter=PromptFormatter(cfg.data.prompt_template, tokenizer, chat),
        **_optional_parts(cfg, policy, tokenizer, device),
    )

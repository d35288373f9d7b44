"""The recipe as the actor sees it: the named parts `[algorithm]` picks, looked up once.

The loop only calls what it is given, so no caller ever branches on a recipe's name.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

import torch

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
from ascent.rules import LLMConfig


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
    # Rows that may have been sampled by an older policy (agentic episodes, played ahead):
    # "anchor": the clip is anchored at their sampling log-probs (plain PPO on stale data);
    # "weight": tokens are weighted by min(pi_old / pi_behaviour, is_cap), the clip anchored
    # at the policy being updated; "": rows are sampled by the weights being updated.
    off_policy: str = ""
    # The engine's log-probs are not the trainer's: old log-probs are recomputed by the actor
    # and tokens weighted by min(pi_old / pi_engine, is_cap) (`with_engine_correction`).
    engine_correction: bool = False


def vanishes_at_zero_advantage(policy_loss: PolicyLoss, params: PolicyLossParams) -> bool:
    """Probe a policy loss: with zero advantages, are its value and gradient exactly 0?"""
    gen = torch.Generator().manual_seed(0)
    logp = (-torch.rand(3, 5, generator=gen, dtype=torch.float64)).requires_grad_()
    old = -torch.rand(3, 5, generator=gen, dtype=torch.float64)
    zero, mask = torch.zeros(3, 5, dtype=torch.float64), torch.ones(3, 5, dtype=torch.float64)
    behaviour = None if params.is_cap is None else old - 0.1
    loss, _ = policy_loss(PolicyLossInput(logp, old, zero, mask, behaviour), params)
    (grad,) = torch.autograd.grad(loss.sum(), logp, allow_unused=True)
    return bool((loss == 0).all()) and (grad is None or bool((grad == 0).all()))


def algorithm_parts(cfg: LLMConfig) -> AlgorithmParts:
    alg = cfg.algorithm
    policy_loss = POLICY_LOSSES.get(alg.policy_loss)
    is_cap = alg.is_cap
    if cfg.agentic.enabled and cfg.agentic.off_policy_correction:
        is_cap = cfg.agentic.correction_clip  # stale episodes: min(pi_old / pi_behaviour, cap)
    loss_params = PolicyLossParams(
        alg.clip_low, alg.clip_high, alg.dual_clip, is_cap, alg.sapo_tau_pos, alg.sapo_tau_neg
    )
    # agentic episodes: the same estimator, credited per turn (ascent.algos.agentic)
    advantage = f"turn_{alg.advantage}" if cfg.agentic.enabled else alg.advantage
    off_policy = ""
    if cfg.agentic.enabled:
        off_policy = "weight" if cfg.agentic.off_policy_correction else "anchor"
    needs_values = bool(ADVANTAGES.meta(advantage).get("needs_values"))
    extra_terms = (
        (alg.kl_coef > 0 and alg.kl_mode == "loss")
        or alg.entropy_coef > 0
        or alg.nll_coef > 0
        # a value head trains inside the actor's update, on every row
        or (needs_values and cfg.critic.architecture == "head")
    )
    return AlgorithmParts(
        advantage=ADVANTAGES.get(advantage),
        advantage_params=AdvantageParams(
            gamma=alg.gamma,
            lam=alg.lam,
            lam_critic=alg.lam_critic,
            length_alpha=alg.length_alpha,
            std_eps=alg.std_eps,
            immediate_weight=cfg.agentic.immediate_reward_weight,
            delayed_weight=cfg.agentic.delayed_reward_weight,
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
        needs_groups=bool(ADVANTAGES.meta(advantage).get("needs_groups")),
        needs_values=needs_values,
        # REINFORCE++ is defined with its batch-wide normalisation (registered `whitened`)
        normalize_advantages=alg.normalize_advantages
        or bool(ADVANTAGES.meta(advantage).get("whitened")),
        nll_coef=alg.nll_coef,
        off_policy=off_policy,
        skip_zero_advantage=not extra_terms
        and vanishes_at_zero_advantage(policy_loss, loss_params),
    )


def with_engine_correction(parts: AlgorithmParts, cap: float) -> AlgorithmParts:
    """The parts of a run whose engine samples with other numerics than the trainer's
    (vLLM, bf16 kernels): its tokens are weighted by min(pi_trainer / pi_engine, cap), with
    the trainer's log-probs anchoring the clip (the decoupled loss of off-policy rows). A cap
    already set (is_cap, for replayed or stale rows) is kept: one truncation serves both."""
    if cap <= 0:
        return parts
    is_cap = parts.loss_params.is_cap if parts.loss_params.is_cap is not None else cap
    params = dataclasses.replace(parts.loss_params, is_cap=is_cap)
    return dataclasses.replace(parts, loss_params=params, engine_correction=True)

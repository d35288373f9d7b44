"""Typed inputs and outputs of the algorithm core.

Shapes: B rows (completions, or environment streams in classic RL) by T steps (tokens, or
environment steps). A "masked" step is one where `mask` is 1: a step the policy took.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import Tensor


def _check_shape(name: str, value: Tensor | None, shape: torch.Size) -> None:
    if value is not None and value.shape != shape:
        raise ValueError(f"{name} has shape {tuple(value.shape)}, expected {tuple(shape)}")


@dataclass(frozen=True)
class Turns:
    """The turn structure of multi-turn rows (agentic episodes), for turn-level credit.

    A row is one thread of an episode; its policy tokens belong to turns, each turn earns an
    immediate reward, and each episode one delayed reward. N turns, E episodes.
    """

    token_turn: Tensor  # (B, T) long: index of the token's turn; -1 on observations, padding
    rewards: Tensor  # (N,) float: each turn's immediate reward
    pools: Tensor  # (N,) long: turns normalised together (same problem and role)
    episodes: Tensor  # (N,) long: index of each turn's episode
    episode_rewards: Tensor  # (E,) float: each episode's delayed reward
    episode_groups: Tensor  # (E,) long: problem id of each episode (its group)
    # (N,) long: how many of its episode's policy turns come after each turn (0: the last);
    # None: every turn is as near the outcome as the last (no discount across turns)
    turns_after: Tensor | None = None

    def __post_init__(self) -> None:
        n = self.rewards.shape
        for name in ("pools", "episodes"):
            _check_shape(name, getattr(self, name), n)
        _check_shape("episode_groups", self.episode_groups, self.episode_rewards.shape)
        _check_shape("turns_after", self.turns_after, n)

    @classmethod
    def none(cls, shape: tuple[int, int], device: torch.device) -> Turns:
        """Rows with no turn (a blank row): every token outside any turn."""
        empty_f = torch.zeros(0, dtype=torch.float32)
        empty_l = torch.zeros(0, dtype=torch.long)
        token_turn = torch.full(shape, -1, dtype=torch.long, device=device)
        return cls(token_turn, empty_f, empty_l, empty_l, empty_f, empty_l)


@dataclass(frozen=True)
class AdvantageBatch:
    """What every advantage estimator sees: rewards, masks and (optionally) critic values."""

    # (B, T) float: reward received after step t. For an LLM, the outcome reward sits on the
    # last response token and 0 elsewhere; per-token KL penalties may be added.
    # Rewards on masked-out steps are ignored by every estimator.
    rewards: Tensor
    # (B, T) float/bool: 1 on steps the policy took (response tokens), 0 on padding and on
    # tool/observation tokens.
    mask: Tensor
    # (B, T) float | None: critic estimate V(s_t).
    values: Tensor | None = None
    # (B, T) float | None: V of the state after step t; 0 after a terminal step, V(final obs)
    # after a time-limit truncation. None: the value at the next masked step of the same
    # episode, 0 after the row's last masked step or an episode end.
    next_values: Tensor | None = None
    # (B, T) float/bool | None: 1 where an episode ends after step t (terminated OR
    # truncated); the GAE recursion is cut there. None: the only end is the row's last
    # masked step.
    episode_ends: Tensor | None = None
    # (B,) long | None: completions with equal id were sampled from the same prompt.
    group_ids: Tensor | None = None
    # Turn structure of multi-turn rows (agentic episodes); the turn-level estimators read
    # it instead of `rewards`.
    turns: Turns | None = None

    def __post_init__(self) -> None:
        if self.rewards.dim() != 2:
            raise ValueError(f"rewards must be (B, T), got shape {tuple(self.rewards.shape)}")
        shape = self.rewards.shape
        _check_shape("mask", self.mask, shape)
        _check_shape("values", self.values, shape)
        _check_shape("next_values", self.next_values, shape)
        _check_shape("episode_ends", self.episode_ends, shape)
        if self.turns is not None:
            _check_shape("turns.token_turn", self.turns.token_turn, shape)
        _check_shape("group_ids", self.group_ids, shape[:1])


@dataclass(frozen=True)
class AdvantageParams:
    """Hyperparameters read by advantage estimators; each estimator declares which it uses."""

    gamma: float = 1.0  # discount per policy step (masked step), not per token of padding
    lam: float = 1.0  # GAE lambda for the policy's advantages
    lam_critic: float | None = None  # GAE lambda for critic returns; None: same as lam
    length_alpha: float = 0.05  # VAPO length-adaptive GAE: lambda = 1 - 1/(alpha * length)
    std_eps: float = 1e-6  # added to the group std in GRPO normalisation
    immediate_weight: float = 0.3  # turn-level credit: weight of the turn's own reward
    delayed_weight: float = 0.7  # ... and of its episode's outcome

    def __post_init__(self) -> None:
        for name in ("gamma", "lam", "lam_critic"):
            value = getattr(self, name)
            if value is not None and not 0.0 <= value <= 1.0:
                raise ValueError(f"{name} must lie in [0, 1], got {value}")
        if self.length_alpha <= 0.0:
            raise ValueError(f"length_alpha must be > 0, got {self.length_alpha}")
        if self.std_eps < 0.0:
            raise ValueError(f"std_eps must be >= 0, got {self.std_eps}")


@dataclass(frozen=True)
class AdvantageResult:
    """Output of every advantage estimator."""

    advantages: Tensor  # (B, T) float: A_t for the policy loss; 0 where mask is 0
    returns: Tensor  # (B, T) float: regression targets for the critic; 0 where mask is 0
    # What the estimator can say about its parts (logged as step metrics), e.g. the spread
    # of turn-level credit's immediate and delayed terms.
    metrics: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class PolicyLossInput:
    """Per-token tensors a policy loss needs."""

    logp: Tensor  # (B, T) log pi_theta(a_t|s_t) of the policy being trained, with grad
    # (B, T) log-probs of the policy that anchors the clip (the proximal / old policy), no grad
    old_logp: Tensor
    advantages: Tensor  # (B, T) A_t
    mask: Tensor  # (B, T) 1 on the policy's tokens
    # (B, T) | None: log-probs of the policy that actually generated the data, when it is
    # older than old_logp (asynchronous / off-policy rollouts); None: on-policy data.
    behaviour_logp: Tensor | None = None

    def __post_init__(self) -> None:
        shape = self.logp.shape
        _check_shape("old_logp", self.old_logp, shape)
        _check_shape("advantages", self.advantages, shape)
        _check_shape("mask", self.mask, shape)
        _check_shape("behaviour_logp", self.behaviour_logp, shape)


@dataclass(frozen=True)
class PolicyLossParams:
    """Hyperparameters of the clipped policy losses."""

    clip_low: float = 0.2  # ratio is clipped below at 1 - clip_low
    clip_high: float = 0.2  # ratio is clipped above at 1 + clip_high (clip-higher: 0.28)
    dual_clip: float | None = None  # c > 1: bound on the loss for A < 0 (Ye et al. 2020)
    is_cap: float | None = None  # cap on the behaviour importance weight (off-policy data)
    sapo_tau_pos: float = 1.0  # SAPO's gate temperature for positive advantages
    sapo_tau_neg: float = 1.05  # ... and for negative ones (decays faster)

    def __post_init__(self) -> None:
        if not 0.0 <= self.clip_low < 1.0:
            raise ValueError(f"clip_low must lie in [0, 1), got {self.clip_low}")
        if self.clip_high < 0.0:
            raise ValueError(f"clip_high must be >= 0, got {self.clip_high}")
        if self.dual_clip is not None and self.dual_clip <= 1.0:
            raise ValueError(f"dual_clip must be > 1, got {self.dual_clip}")
        if self.is_cap is not None and self.is_cap <= 0.0:
            raise ValueError(f"is_cap must be > 0, got {self.is_cap}")
        if self.sapo_tau_pos <= 0.0 or self.sapo_tau_neg <= 0.0:
            raise ValueError(
                f"sapo temperatures must be > 0, got {self.sapo_tau_pos}, {self.sapo_tau_neg}"
            )


@dataclass(frozen=True)
class AggregationScale:
    """Batch-wide counts that turn a per-token loss into a scalar.

    They describe the WHOLE batch (all micro-batches, all ranks), so that the aggregated
    losses of the micro-batches add up to the aggregated loss of the batch.
    """

    global_tokens: float  # masked tokens in the whole batch
    global_seqs: float  # rows with at least one masked token in the whole batch
    norm_const: float = 1.0  # Dr. GRPO constant, e.g. max_new_tokens

    def __post_init__(self) -> None:
        for name in ("global_tokens", "global_seqs", "norm_const"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)}")

    @classmethod
    def from_mask(cls, mask: Tensor, norm_const: float = 1.0) -> AggregationScale:
        """Counts for a batch whose whole mask is at hand (one process, before splitting).

        Rows without any masked token (padding rows, filtered samples) hold no decision to
        learn from, so they are not counted as sequences. Both counts are floored at 1 so
        that a batch without policy tokens aggregates to 0 rather than NaN.

        Args:
            mask: (B, T) 1 on policy tokens, for the WHOLE batch.
            norm_const: Dr. GRPO's constant (e.g. max_new_tokens); only
                `seq_mean_token_sum_norm` reads it.
        """
        lengths = mask.bool().sum(-1)
        return cls(
            global_tokens=float(max(int(lengths.sum()), 1)),
            global_seqs=float(max(int((lengths > 0).sum()), 1)),
            norm_const=float(norm_const),
        )

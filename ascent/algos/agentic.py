"""Credit assignment for agentic GRPO: immediate (per-turn) and delayed (per-episode) advantages.

An episode is a sequence of turns (hypothesis, solve attempts, generated tests, summaries).
Each turn the policy played earns an immediate reward r_t (compiles 0.1, passes the samples
0.3, minus 0.5 when a confirmed generated test breaks its program, ...) and the episode earns
one delayed reward R (its submitted program on the hidden tests). Both are normalised within
the G episodes of one problem, GRPO style, and mixed per turn:

    A_t = w_imm * (r_t - mean(pool(t))) / (std(pool(t)) + eps)
        + w_delay * (R_e - mean(group(e))) / (std(group(e)) + eps)

The delayed term is the same for every policy turn of episode e (or, with `[algorithm] gamma`
and `lam` below 1, discounted by (gamma lam)^k for a turn k policy turns before the episode's
last: the write-up's discounting across turns, so the turns nearest the outcome get most of
its credit); the immediate one belongs to the turn that earned it. Immediate rewards are
pooled over all turns of the same kind (the same problem and role) in the group, as
DeepSeekMath's process supervision normalises step rewards over all steps of the group (Shao
et al. 2024, https://arxiv.org/abs/2402.03300, section 4.1.3);
unlike there, a turn is not credited with the rewards of later turns: those reach it through the
delayed term. Mixing weights 0.3 / 0.7 are GrandCode's (arXiv 2604.02721). `scale_by_std=False`
gives the Dr. GRPO variant (no std division, Liu et al. 2025, https://arxiv.org/abs/2503.20783).

As advantage estimators (`turn_grpo`, `turn_dr_grpo`) they read the batch's `Turns` and are
what `[algorithm] advantage = "grpo"` / `"dr_grpo"` means for a run with `[agentic]` enabled:
the trainer builds every batch, plain or agentic, with one function.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from ascent.algos.advantages import ADVANTAGES
from ascent.algos.batch import AdvantageBatch, AdvantageParams, AdvantageResult


@dataclass(frozen=True)
class AgenticCredit:
    """Per-turn advantages and their two parts (all (N,) over the policy's turns)."""

    advantages: Tensor  # w_imm * immediate + w_delay * delayed
    immediate: Tensor  # the turn's normalised immediate reward
    delayed: Tensor  # its episode's normalised delayed reward


def group_normalise(
    scores: Tensor, groups: Tensor, *, scale_by_std: bool = True, eps: float = 1e-6
) -> Tensor:
    """(s - mean_g) / (std_g + eps) within each group id; 0 for a group with one member.

    Groups are found by id, never by position. The std is unbiased (n - 1), as in the `grpo`
    estimator; a group whose scores are all equal gets 0 (also with eps = 0).

    Args:
        scores: (N,) float.
        groups: (N,) long group id of each score.
        scale_by_std: divide by the group std (GRPO); False: only centre (Dr. GRPO).
        eps: added to the std.
    """
    if scores.shape != groups.shape or scores.dim() != 1:
        raise ValueError(
            f"scores {tuple(scores.shape)} and groups {tuple(groups.shape)} must be (N,)"
        )
    if scores.numel() == 0:
        return scores.clone()
    _, inverse, counts = torch.unique(groups, return_inverse=True, return_counts=True)
    n = counts.to(scores.dtype)
    mean = torch.zeros_like(n).index_add_(0, inverse, scores) / n
    centred = scores - mean[inverse]
    if not scale_by_std:
        out = centred
    else:
        sq = torch.zeros_like(n).index_add_(0, inverse, centred**2)
        std = (sq / (n - 1.0).clamp(min=1.0)).sqrt()[inverse]
        out = torch.where(std > 0, centred / (std + eps), torch.zeros_like(centred))
    return torch.where(counts[inverse] > 1, out, torch.zeros_like(out))


def agentic_credit(
    turn_rewards: Tensor,
    turn_pools: Tensor,
    turn_episodes: Tensor,
    episode_rewards: Tensor,
    episode_groups: Tensor,
    *,
    immediate_weight: float,
    delayed_weight: float,
    scale_by_std: bool = True,
    eps: float = 1e-6,
    turns_after: Tensor | None = None,
    discount: float = 1.0,
) -> AgenticCredit:
    """Mix group-normalised immediate and delayed rewards into one advantage per turn.

    Args:
        turn_rewards: (N,) immediate reward of each policy turn.
        turn_pools: (N,) id of the turns normalised together (same problem and role).
        turn_episodes: (N,) index into the E episodes of each turn's episode.
        episode_rewards: (E,) delayed reward of each episode.
        episode_groups: (E,) problem id of each episode (its G episodes are one group).
        immediate_weight, delayed_weight: the mixing weights (GrandCode: 0.3 / 0.7; the
            config's `[agentic]` keys hold them).
        scale_by_std: GRPO (True) or Dr. GRPO (False) normalisation.
        eps: added to the stds.
        turns_after: (N,) how many of the episode's policy turns follow each turn.
        discount: gamma x lambda per turn: the delayed term of a turn k turns before the
            episode's last is discounted by discount^k (1: every turn gets the whole outcome).

    Returns:
        `AgenticCredit` of (N,) tensors; assign advantages[i] to every token of turn i.
    """
    imm = group_normalise(turn_rewards, turn_pools, scale_by_std=scale_by_std, eps=eps)
    per_episode = group_normalise(
        episode_rewards, episode_groups, scale_by_std=scale_by_std, eps=eps
    )
    delayed = per_episode[turn_episodes]
    if turns_after is not None and discount != 1.0:
        delayed = delayed * discount ** turns_after.to(delayed.dtype)
    return AgenticCredit(immediate_weight * imm + delayed_weight * delayed, imm, delayed)


def turn_advantages_to_tokens(turn_advantages: Tensor, token_turn: Tensor) -> Tensor:
    """(B, R) token advantages: each token gets its turn's advantage; -1 (no turn) gets 0.

    Args:
        turn_advantages: (N,) per-turn advantages.
        token_turn: (B, R) long index into turn_advantages, -1 on observation and padding.
    """
    gathered = turn_advantages[token_turn.clamp(min=0)]
    return torch.where(token_turn >= 0, gathered, torch.zeros_like(gathered))


def _turn_credit(batch: AdvantageBatch, params: AdvantageParams, scale: bool) -> AdvantageResult:
    turns = batch.turns
    if turns is None:
        raise ValueError(
            "turn-level credit needs batch.turns (the rows' turns and episodes): it is the "
            "estimator of agentic episodes ([agentic] enabled = true)"
        )
    device = batch.mask.device
    if turns.rewards.numel() == 0:  # a blank row: no turn, nothing to credit
        zero = torch.zeros(batch.mask.shape, dtype=torch.float32, device=device)
        return AdvantageResult(zero, zero.clone())
    credit = agentic_credit(
        turns.rewards.float().cpu(),
        turns.pools.cpu(),
        turns.episodes.cpu(),
        turns.episode_rewards.float().cpu(),
        turns.episode_groups.cpu(),
        immediate_weight=params.immediate_weight,
        delayed_weight=params.delayed_weight,
        scale_by_std=scale,
        eps=params.std_eps,
        turns_after=None if turns.turns_after is None else turns.turns_after.cpu(),
        discount=params.gamma * params.lam,
    )
    advantages = turn_advantages_to_tokens(credit.advantages.to(device), turns.token_turn)
    advantages = advantages * batch.mask.to(advantages.dtype)
    spread = len(credit.advantages) > 1
    metrics = {
        "adv_std": float(credit.advantages.std()) if spread else 0.0,  # over turns, not rows
        "adv/immediate_std": float(credit.immediate.std()) if spread else 0.0,
        "adv/delayed_std": float(credit.delayed.std()) if spread else 0.0,
    }
    return AdvantageResult(advantages, torch.zeros_like(advantages), metrics)


_TURN_USES = frozenset({"std_eps", "immediate_weight", "delayed_weight", "gamma", "lam"})


@ADVANTAGES.register(
    "turn_grpo", uses=_TURN_USES, needs_values=False, needs_groups=False, needs_turns=True
)
def turn_grpo(batch: AdvantageBatch, params: AdvantageParams) -> AdvantageResult:
    """Turn-level GRPO credit (`agentic_credit`, std-scaled) spread over each turn's tokens.

    Args:
        batch: mask (B, T) and `turns` required; `rewards` is not read.
        params: std_eps, immediate_weight, delayed_weight.

    Returns:
        advantages: each policy token gets its turn's advantage (0 off the mask); returns 0
        (there is no critic to regress).
    """
    return _turn_credit(batch, params, scale=True)


@ADVANTAGES.register(
    "turn_dr_grpo", uses=_TURN_USES, needs_values=False, needs_groups=False, needs_turns=True
)
def turn_dr_grpo(batch: AdvantageBatch, params: AdvantageParams) -> AdvantageResult:
    """Turn-level Dr. GRPO credit: as `turn_grpo`, centred but not divided by the stds."""
    return _turn_credit(batch, params, scale=False)

"""Advantage estimators: from rewards (and critic values) to per-token advantages and returns.

Every estimator has the same signature, `fn(batch, params) -> AdvantageResult`, so the
trainer never special-cases a name. Each is registered with meta facts the config layer
checks before a run starts: `uses` (the AdvantageParams fields it reads; setting another is
refused), `needs_values` (a critic is required) and `needs_groups` (group_ids are required
and a group needs at least two completions).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from ascent.algos.batch import AdvantageBatch, AdvantageParams, AdvantageResult
from ascent.registry import Registry

AdvantageEstimator = Callable[[AdvantageBatch, AdvantageParams], AdvantageResult]
ADVANTAGES: Registry[AdvantageEstimator] = Registry("advantage estimator")


def _gae(batch: AdvantageBatch, values: Tensor, gamma: float, lam: Tensor) -> Tensor:
    """GAE over masked steps; `lam` is (B,) so each row may have its own lambda.

    The reverse loop carries, per row, the advantage and value of the nearest LATER masked
    step, so a masked-out step in the middle (an observation token) is skipped: the
    recursion jumps from one policy step to the next. Both carries start at 0, which cuts
    the recursion and bootstraps with 0 after the row's last masked step.
    """
    mask = batch.mask.bool()
    rewards = batch.rewards.to(values.dtype)
    ends = torch.zeros_like(mask) if batch.episode_ends is None else batch.episode_ends.bool()
    lam = lam.to(values.dtype)
    advantages = torch.zeros_like(values)
    next_adv = torch.zeros_like(values[:, 0])
    next_v = torch.zeros_like(values[:, 0])
    for t in reversed(range(values.shape[1])):
        keep = (~ends[:, t]).to(values.dtype)
        if batch.next_values is None:
            bootstrap = next_v * keep  # a derived next value is 0 after an episode end
        else:
            bootstrap = batch.next_values[:, t].to(values.dtype)
        delta = rewards[:, t] + gamma * bootstrap - values[:, t]
        adv = delta + gamma * lam * keep * next_adv
        advantages[:, t] = torch.where(mask[:, t], adv, torch.zeros_like(adv))
        next_adv = torch.where(mask[:, t], adv, next_adv)
        next_v = torch.where(mask[:, t], values[:, t], next_v)
    return advantages


def _require_values(batch: AdvantageBatch, name: str) -> Tensor:
    if batch.values is None:
        raise ValueError(
            f"advantage '{name}' needs critic values (batch.values); pass zeros for "
            "critic-free Monte-Carlo returns, or use grpo / dr_grpo"
        )
    return batch.values.detach()  # returns are regression targets, never differentiated


def _decoupled_gae(
    batch: AdvantageBatch, values: Tensor, gamma: float, lam: Tensor, lam_critic: float
) -> AdvantageResult:
    """Advantages with the policy's lambda, critic returns with their own (VAPO)."""
    advantages = _gae(batch, values, gamma, lam)
    if torch.all(lam == lam_critic):
        critic_adv = advantages
    else:
        critic_adv = _gae(batch, values, gamma, torch.full_like(lam, lam_critic))
    returns = torch.where(batch.mask.bool(), critic_adv + values, torch.zeros_like(values))
    return AdvantageResult(advantages=advantages, returns=returns)


@ADVANTAGES.register(
    "gae", uses=frozenset({"gamma", "lam", "lam_critic"}), needs_values=True, needs_groups=False
)
def gae(batch: AdvantageBatch, params: AdvantageParams) -> AdvantageResult:
    """Generalized advantage estimation, with decoupled lambdas for policy and critic.

    Schulman et al. 2016, https://arxiv.org/abs/1506.02438. A_t = sum_k (gamma lam)^k
    delta_{t+k} with delta_t = r_t + gamma V(s_{t+1}) - V(s_t), summed over masked steps only
    and cut at episode ends. A time-limit truncation must still bootstrap (pass V(final obs)
    in next_values); treating it as termination biases values down (CleanRL's known trap).
    Returns use `lam_critic` (VAPO, Yue et al. 2025, https://arxiv.org/abs/2504.05118:
    lam_critic = 1.0 gives unbiased Monte-Carlo-like value targets for long reasoning
    chains while the policy keeps a lower-variance lambda).

    Args:
        batch: rewards, mask, values (B, T) required; next_values, episode_ends (B, T)
            optional. Rows may hold several episodes (classic RL streams).
        params: gamma, lam, lam_critic (None: same as lam).
    """
    values = _require_values(batch, "gae")
    lam = torch.full((values.shape[0],), params.lam, dtype=values.dtype, device=values.device)
    lam_critic = params.lam if params.lam_critic is None else params.lam_critic
    return _decoupled_gae(batch, values, params.gamma, lam, lam_critic)


def length_adaptive_lambda(lengths: Tensor, alpha: float) -> Tensor:
    """VAPO's per-sequence lambda, 1 - 1/(alpha * l), clamped to [0, 1].

    Yue et al. 2025, https://arxiv.org/abs/2504.05118, section 3.2: the bias of GAE grows
    with sequence length, so longer responses get a lambda closer to 1. The formula is
    negative for l < 1/alpha (l < 20 at alpha = 0.05) and -inf at l = 0; the paper never
    meets that range, a lambda below 0 is not a valid GAE weight, so it is clamped to 0
    (one-step TD advantages for short responses).

    Args:
        lengths: (B,) number of policy tokens per sequence.
        alpha: the paper's alpha (0.05), > 0.
    """
    lam = 1.0 - 1.0 / (alpha * lengths.to(torch.float64))
    return lam.clamp(0.0, 1.0)


@ADVANTAGES.register(
    "length_adaptive_gae",
    uses=frozenset({"gamma", "length_alpha", "lam_critic"}),
    needs_values=True,
    needs_groups=False,
)
def length_adaptive_gae(batch: AdvantageBatch, params: AdvantageParams) -> AdvantageResult:
    """GAE whose policy lambda depends on each sequence's length (VAPO).

    Yue et al. 2025, https://arxiv.org/abs/2504.05118. lam_i = 1 - 1/(length_alpha * l_i),
    l_i the number of masked tokens in row i (see `length_adaptive_lambda` for the clamp).
    Critic returns use `lam_critic`, and when it is None they use 1.0, not a per-row
    lambda: VAPO pairs length-adaptive GAE with decoupled GAE at lambda_critic = 1.0, and
    this estimator has no single `lam` to fall back to (`lam` is not read).

    Args:
        batch: rewards, mask, values (B, T) required; next_values, episode_ends optional.
        params: gamma, length_alpha, lam_critic.
    """
    values = _require_values(batch, "length_adaptive_gae")
    lengths = batch.mask.bool().sum(-1)
    lam = length_adaptive_lambda(lengths, params.length_alpha).to(values.dtype)
    lam_critic = 1.0 if params.lam_critic is None else params.lam_critic
    return _decoupled_gae(batch, values, params.gamma, lam, lam_critic)


def _group_stats(scores: Tensor, group_ids: Tensor | None, name: str) -> tuple[Tensor, Tensor]:
    """Per-row group mean and unbiased group std of `scores` (B,), grouped by id, not position."""
    if group_ids is None:
        raise ValueError(f"advantage '{name}' needs group_ids: which prompt each row answers")
    ids, inverse, counts = torch.unique(group_ids, return_inverse=True, return_counts=True)
    if bool((counts < 2).any()):
        lonely = ids[counts < 2].tolist()
        raise ValueError(
            f"advantage '{name}': group(s) {lonely} have a single completion, which has no "
            "baseline to compare with; sample at least 2 completions per prompt"
        )
    n = counts.to(scores.dtype)
    sums = torch.zeros_like(n).index_add_(0, inverse, scores)
    mean = (sums / n)[inverse]
    sq = torch.zeros_like(n).index_add_(0, inverse, (scores - mean) ** 2)
    std = (sq / (n - 1.0)).sqrt()[inverse]
    return mean, std


def _sequence_rewards(batch: AdvantageBatch) -> Tensor:
    rewards = batch.rewards
    zero = torch.zeros((), dtype=rewards.dtype, device=rewards.device)
    return torch.where(batch.mask.bool(), rewards, zero).sum(-1)


def _broadcast(per_row: Tensor, mask: Tensor) -> Tensor:
    zero = torch.zeros((), dtype=per_row.dtype, device=per_row.device)
    return torch.where(mask.bool(), per_row[:, None], zero)


@ADVANTAGES.register("grpo", uses=frozenset({"std_eps"}), needs_values=False, needs_groups=True)
def grpo(batch: AdvantageBatch, params: AdvantageParams) -> AdvantageResult:
    """Group-normalised outcome advantages (GRPO).

    Shao et al. 2024 (DeepSeekMath), https://arxiv.org/abs/2402.03300: the other completions
    of the same prompt replace the critic as baseline, A_i = (r_i - mean_g) / (std_g + eps),
    the same for every token of completion i. r_i is the sum of the row's rewards over its
    masked steps. The std is unbiased (n - 1), as TRL and verl compute it; the paper does not
    say. A zero-variance group gets advantage 0. Groups are found by id, never by position,
    so rows of one prompt need not be contiguous.

    Args:
        batch: rewards, mask (B, T), group_ids (B,) required; every group >= 2 rows.
        params: std_eps.

    Returns:
        advantages broadcast over the row's mask; returns = r_i broadcast over the mask.
    """
    scores = _sequence_rewards(batch)
    mean, std = _group_stats(scores, batch.group_ids, "grpo")
    advantages = (scores - mean) / (std + params.std_eps)
    return AdvantageResult(_broadcast(advantages, batch.mask), _broadcast(scores, batch.mask))


@ADVANTAGES.register("dr_grpo", uses=frozenset(), needs_values=False, needs_groups=True)
def dr_grpo(batch: AdvantageBatch, params: AdvantageParams) -> AdvantageResult:
    """Group-centred advantages without std scaling (Dr. GRPO).

    Liu et al. 2025, "Understanding R1-Zero-Like Training", https://arxiv.org/abs/2503.20783:
    dividing by the group std up-weights prompts that are nearly always solved or failed (a
    question-level difficulty bias), so A_i = r_i - mean_g. Pair it with the
    `seq_mean_token_sum_norm` aggregation to also remove the length bias.

    Args:
        batch: rewards, mask (B, T), group_ids (B,) required; every group >= 2 rows.
        params: unused (the signature is shared by all estimators).
    """
    scores = _sequence_rewards(batch)
    mean, _ = _group_stats(scores, batch.group_ids, "dr_grpo")
    return AdvantageResult(_broadcast(scores - mean, batch.mask), _broadcast(scores, batch.mask))


@ADVANTAGES.register("rloo", uses=frozenset(), needs_values=False, needs_groups=True)
def rloo(batch: AdvantageBatch, params: AdvantageParams) -> AdvantageResult:
    """REINFORCE leave-one-out: each completion's baseline is the mean of the others.

    Ahmadian et al. 2024, "Back to Basics", https://arxiv.org/abs/2402.14740 (after Kool et
    al. 2019): A_i = r_i - (sum_g - r_i) / (n - 1) = n / (n - 1) (r_i - mean_g), the same for
    every token of completion i; no std division. Groups by id, as `grpo`.

    Args:
        batch: rewards, mask (B, T), group_ids (B,) required; every group >= 2 rows.
        params: unused.
    """
    scores = _sequence_rewards(batch)
    mean, _ = _group_stats(scores, batch.group_ids, "rloo")
    _, inverse, counts = torch.unique(batch.group_ids, return_inverse=True, return_counts=True)
    n = counts.to(scores.dtype)[inverse]
    others = (mean * n - scores) / (n - 1.0)
    return AdvantageResult(_broadcast(scores - others, batch.mask), _broadcast(scores, batch.mask))


def _returns(batch: AdvantageBatch, rewards: Tensor, gamma: float) -> Tensor:
    """Discounted reward-to-go over the masked steps of each row (no critic: GAE with V = 0
    and lambda = 1), cut at episode ends."""
    zero = torch.zeros_like(rewards)
    ones = torch.ones(rewards.shape[0], dtype=zero.dtype, device=zero.device)
    plain = AdvantageBatch(rewards, batch.mask, episode_ends=batch.episode_ends)
    return _gae(plain, zero, gamma, ones)


@ADVANTAGES.register(
    "reinforce_pp",
    uses=frozenset({"gamma"}),
    needs_values=False,
    needs_groups=False,
    whitened=True,
)
def reinforce_pp(batch: AdvantageBatch, params: AdvantageParams) -> AdvantageResult:
    """REINFORCE++: each token's discounted return, whitened over the whole batch.

    Hu 2025, https://arxiv.org/abs/2501.03262: no critic and no per-prompt baseline; the
    return G_t = sum_{k >= t} gamma^(k - t) r_k of the token rewards (the outcome reward on
    the last token, a per-token KL penalty with kl_mode = "reward") is normalised over every
    policy token of the batch, on all ranks (the trainer whitens: registered `whitened`).

    Args:
        batch: rewards, mask (B, T).
        params: gamma.

    Returns:
        advantages: the returns, not yet whitened; returns: the same.
    """
    returns = _returns(batch, batch.rewards, params.gamma)
    return AdvantageResult(returns, returns.clone())


@ADVANTAGES.register(
    "reinforce_pp_baseline",
    uses=frozenset({"gamma"}),
    needs_values=False,
    needs_groups=True,
    whitened=True,
)
def reinforce_pp_baseline(batch: AdvantageBatch, params: AdvantageParams) -> AdvantageResult:
    """REINFORCE++-baseline: REINFORCE++ with the group's mean reward subtracted first.

    Hu et al. 2025 (REINFORCE++, the baseline variant for reasoning with several completions
    per prompt): the mean of the group's summed rewards is subtracted at each row's last
    policy token, then the discounted returns are whitened over the batch as `reinforce_pp`.
    Unlike `grpo`, no per-group std division: the batch-wide normalisation replaces it.

    Args:
        batch: rewards, mask (B, T), group_ids (B,) required; every group >= 2 rows.
        params: gamma.
    """
    scores = _sequence_rewards(batch)
    mean, _ = _group_stats(scores, batch.group_ids, "reinforce_pp_baseline")
    mask = batch.mask.bool()
    positions = torch.arange(mask.shape[1], device=mask.device)
    last = (positions * mask.long()).argmax(-1)
    rewards = batch.rewards.clone()
    rows = torch.arange(mask.shape[0], device=mask.device)
    rewards[rows, last] = rewards[rows, last] - mean.to(rewards.dtype)
    returns = _returns(batch, rewards, params.gamma)
    return AdvantageResult(returns, returns.clone())

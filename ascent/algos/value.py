"""Critic loss and its main diagnostic."""

from __future__ import annotations

import torch
from torch import Tensor

from ascent.algos.masked import masked_mean, masked_var


def value_loss(
    values: Tensor,
    old_values: Tensor | None,
    returns: Tensor,
    mask: Tensor,
    clip: float | None,
) -> tuple[Tensor, dict[str, Tensor]]:
    """Per-token squared error of the critic, optionally PPO-clipped around the old values.

    Clipping (from OpenAI baselines' PPO2, not in the PPO paper's text; studied in Engstrom
    et al. 2020, https://arxiv.org/abs/2005.12729) keeps the new value within
    `clip` of the value at rollout time, taking the pessimistic max of the clipped and
    unclipped errors so the critic cannot jump in one update.
    0.5 * max((v - R)^2, (old_v + clamp(v - old_v, -clip, clip) - R)^2).

    Args:
        values: (B, T) V(s_t) of the critic being trained, with grad.
        old_values: (B, T) V(s_t) at rollout time; required when clip is set.
        returns: (B, T) regression targets (from an advantage estimator).
        mask: (B, T) 1 on policy steps.
        clip: clip range in value units, or None for the plain squared error.

    Returns:
        (B, T) per-token loss (0 off the mask; aggregate it like the policy loss) and the
        metric `value_clip_frac` (fraction of masked tokens where the clipped error won).
    """
    returns = returns.detach()
    loss = 0.5 * (values - returns) ** 2
    metrics: dict[str, Tensor] = {}
    if clip is not None:
        if old_values is None:
            raise ValueError("value_loss: clip is set but old_values is None")
        old = old_values.detach()
        clipped_values = old + (values - old).clamp(-clip, clip)
        clipped = 0.5 * (clipped_values - returns) ** 2
        metrics["value_clip_frac"] = masked_mean((clipped > loss).detach().float(), mask)
        loss = torch.maximum(loss, clipped)
    loss = torch.where(mask.bool(), loss, torch.zeros_like(loss))
    return loss, metrics


def explained_variance(values: Tensor, returns: Tensor, mask: Tensor) -> Tensor:
    """1 - Var[R - V] / Var[R] over masked steps: how much of the returns the critic explains.

    1 is a perfect critic, 0 no better than a constant, negative worse than a constant
    (a standard PPO diagnostic, as in CleanRL and Stable-Baselines3). NaN when the returns
    are constant, where it is undefined (as in both of those).

    Args:
        values: (B, T) critic predictions.
        returns: (B, T) targets.
        mask: (B, T).

    Returns:
        a float scalar tensor, detached.
    """
    values, returns = values.detach().float(), returns.detach().float()
    var_returns = masked_var(returns, mask)
    if var_returns == 0:
        return torch.tensor(float("nan"), device=values.device)
    return 1.0 - masked_var(returns - values, mask) / var_returns

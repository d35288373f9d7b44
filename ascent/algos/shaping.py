"""Reward shaping that depends on the completion, not on its correctness."""

from __future__ import annotations

import torch
from torch import Tensor


def soft_overlong_penalty(
    lengths: Tensor, max_length: int, buffer: int, penalty: float = 1.0
) -> Tensor:
    """DAPO's soft overlong punishment, added to each completion's reward.

    Yu et al. 2025, https://arxiv.org/abs/2503.14476, eq. 13: with L_max = `max_length` and
    L_cache = `buffer`, a completion of length l gets 0 while l <= L_max - L_cache, then a
    penalty growing linearly to -`penalty` at l = L_max (where max_new_tokens cuts it), so a
    truncated answer is punished without a cliff between l = L_max - 1 and L_max:
    penalty * ((L_max - L_cache) - l) / L_cache, clamped to [-penalty, 0].

    Args:
        lengths: (B,) completion lengths in tokens.
        max_length: L_max, the longest completion (max_new_tokens).
        buffer: L_cache, 1 <= buffer <= max_length.
        penalty: the penalty at l >= L_max (DAPO: 1.0).

    Returns:
        (B,) float penalties, each in [-penalty, 0].
    """
    if not 1 <= buffer <= max_length:
        raise ValueError(f"buffer must lie in [1, max_length={max_length}], got {buffer}")
    over = (lengths.to(torch.float32) - (max_length - buffer)) / buffer
    return -penalty * over.clamp(0.0, 1.0)

"""Statistics over the masked entries of a tensor.

A mask is 1 (or True) on the steps the policy took and 0 on padding and on tool/observation
tokens. Masked-out entries are excluded with `torch.where`, not by multiplying with the mask,
so a NaN or inf in padding (e.g. a value head's output on a pad token) cannot leak into a
statistic: NaN * 0 is still NaN.
"""

from __future__ import annotations

import torch
from torch import Tensor


def masked_sum(x: Tensor, mask: Tensor, dim: int | None = None) -> Tensor:
    """Sum of `x` where `mask` is set.

    Args:
        x: (...) values.
        mask: same shape as `x`, 1/True on the entries to count.
        dim: reduce only this dimension; None reduces everything to a scalar.
    """
    kept = torch.where(mask.bool(), x, torch.zeros((), dtype=x.dtype, device=x.device))
    return kept.sum() if dim is None else kept.sum(dim)


def masked_mean(x: Tensor, mask: Tensor, dim: int | None = None) -> Tensor:
    """Mean of `x` over the masked entries; 0 where nothing is masked in.

    Returning 0 rather than NaN for an empty selection keeps a metric such as the clip fraction
    of a micro-batch made only of padding from poisoning a running average.

    Args:
        x: (...) values.
        mask: same shape as `x`.
        dim: reduce only this dimension; None reduces everything to a scalar.
    """
    count = mask.bool().sum() if dim is None else mask.bool().sum(dim)
    return masked_sum(x, mask, dim) / count.clamp(min=1).to(x.dtype)


def masked_var(x: Tensor, mask: Tensor, unbiased: bool = False) -> Tensor:
    """Variance of the masked entries of `x`, as a scalar.

    The population (biased) variance is the default because whitening normalises the batch
    at hand, not an estimate of a larger population; pass `unbiased=True` for Bessel's
    correction. 0 when fewer entries than needed are masked in.

    Args:
        x: (...) values.
        mask: same shape as `x`.
        unbiased: divide by n - 1 instead of n.
    """
    mean = masked_mean(x, mask)
    count = mask.bool().sum().to(x.dtype)
    denom = (count - 1.0) if unbiased else count
    return masked_sum((x - mean) ** 2, mask) / denom.clamp(min=1.0)


def masked_whiten(x: Tensor, mask: Tensor, shift_mean: bool = True, eps: float = 1e-8) -> Tensor:
    """Normalise `x` to unit variance (and zero mean) over its masked entries.

    Used for batch-level advantage normalisation (PPO implementation detail, see
    https://iclr-blog-track.github.io/2022/03/25/ppo-implementation-details/). With
    `shift_mean=False` only the scale changes, so the sign of every advantage is kept.
    Masked-out entries are returned as 0 so they cannot carry a spurious advantage.

    Args:
        x: (B, T) values, e.g. advantages.
        mask: (B, T).
        shift_mean: subtract the masked mean.
        eps: added to the variance before the square root.
    """
    mean = masked_mean(x, mask)
    whitened = (x - mean) * torch.rsqrt(masked_var(x, mask) + eps)
    if not shift_mean:
        whitened = whitened + mean
    return torch.where(mask.bool(), whitened, torch.zeros((), dtype=x.dtype, device=x.device))

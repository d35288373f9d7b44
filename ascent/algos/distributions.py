"""Log-probabilities and entropies from a language model's logits, without the full softmax.

A (B, T, V) logits tensor is the largest thing in an LLM training step (V ~ 150k), so these
functions never upcast all of it at once: the token's logit is gathered and its
log-partition computed directly (no (B, T, V) log-softmax is kept), and low-precision logits
are upcast one row of the batch at a time (the approach of TRL's `selective_log_softmax`).
"""

from __future__ import annotations

import torch
from torch import Tensor

_FULL_PRECISION = (torch.float32, torch.float64)


def logprobs_from_logits(logits: Tensor, tokens: Tensor, temperature: float = 1.0) -> Tensor:
    """log softmax(logits / temperature)[token] for each position, in float32 or better.

    log p(y) = z_y - logsumexp(z). bf16 logits are upcast per row, and divided by the
    temperature only after the upcast (as the sampler does), because the log-softmax of a
    large vocabulary in bf16 loses the ratio precision PPO depends on.

    Args:
        logits: (B, T, V) unnormalised scores, any float dtype.
        tokens: (B, T) long token ids.
        temperature: the sampling temperature the policy is defined with.

    Returns:
        (B, T) log-probabilities, float32 (float64 for float64 logits), differentiable.
    """
    if logits.dtype in _FULL_PRECISION:
        z = logits if temperature == 1.0 else logits / temperature
        picked = z.gather(-1, tokens.unsqueeze(-1)).squeeze(-1)
        return picked - torch.logsumexp(z, dim=-1)
    pairs = zip(logits, tokens, strict=True)
    return torch.stack([logprobs_from_logits(row.float(), ids, temperature) for row, ids in pairs])


CHUNK_ELEMENTS = 1 << 24  # 64 MB of float32 logits


def entropy_by_rows(logits: Tensor, temperature: float = 1.0) -> Tensor:
    """(B, T) entropies of softmax(logits / temperature) computed without gradients, a few
    rows at a time: the metric, at the memory of at most CHUNK_ELEMENTS logits in float32
    rather than the batch's (at a 150k vocabulary the batch's costs gigabytes per long row)."""
    b, t, v = logits.shape
    rows = max(1, CHUNK_ELEMENTS // max(1, t * v))
    with torch.no_grad():
        parts = [_entropy(logits[i : i + rows].float() / temperature) for i in range(0, b, rows)]
    return torch.cat(parts) if parts else logits.new_zeros((0, t), dtype=torch.float32)


def entropy_from_logits(logits: Tensor) -> Tensor:
    """Entropy of softmax(logits) over the last dimension: logsumexp(z) - sum softmax(z) z.

    This form needs no log of a probability, so it stays finite where a probability
    underflows to 0 (where -p log p would be 0 * -inf = NaN).

    Args:
        logits: (..., V) unnormalised scores, any float dtype.

    Returns:
        (...) entropies in nats, float32 (float64 for float64 logits), differentiable.
    """
    if logits.dtype in _FULL_PRECISION:
        return _entropy(logits)
    if logits.dim() <= 2:
        return _entropy(logits.float())
    return torch.stack([_entropy(row.float()) for row in logits])


def _entropy(z: Tensor) -> Tensor:
    return torch.logsumexp(z, dim=-1) - (torch.softmax(z, dim=-1) * z).sum(-1)

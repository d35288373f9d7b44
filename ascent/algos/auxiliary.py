"""Loss terms added beside the policy loss."""

from __future__ import annotations

import torch
from torch import Tensor


def positive_nll(logp: Tensor, mask: Tensor, positive: Tensor) -> Tensor:
    """Per-token negative log-likelihood of the correct completions (VAPO's positive-example
    LM loss), 0 elsewhere; aggregate it with `token_mean` over the positive tokens.

    Yue et al. 2025, https://arxiv.org/abs/2504.05118, section 4.3: L_NLL = -1 / sum_{o in T}
    |o| * sum_{o in T} sum_t log pi(o_t | q, o_<t) over the set T of correct samples, added
    to the PPO loss with weight mu = 0.1, so the policy imitates its own successes more
    directly than a clipped surrogate allows.

    Args:
        logp: (B, T) log pi_theta of the sampled tokens, with grad.
        mask: (B, T) 1 on policy tokens.
        positive: (B,) bool, True for a completion judged correct.

    Returns:
        (B, T) loss, -logp on the masked tokens of positive rows and 0 elsewhere.
    """
    keep = mask.bool() & positive.bool()[:, None]
    return torch.where(keep, -logp, torch.zeros_like(logp))

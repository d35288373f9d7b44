"""Per-token estimators of KL(pi_theta || pi_ref) from samples of pi_theta.

Schulman 2020, "Approximating KL Divergence", http://joschu.net/blog/kl-approx.html. With
log r = ref_logp - logp evaluated at tokens sampled from pi_theta:
k1 = -log r (unbiased, high variance, can be negative per token); k2 = (log r)^2 / 2
(biased, low variance, >= 0); k3 = (r - 1) - log r (unbiased, low variance, >= 0; the GRPO
paper's choice). Each returns a (B, T) tensor; the caller masks and aggregates it, as a
loss term, or turns it into a reward penalty with `kl_penalty_rewards`.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from ascent.registry import Registry

KLEstimator = Callable[[Tensor, Tensor], Tensor]
KL_ESTIMATORS: Registry[KLEstimator] = Registry("KL estimator")

LOG_RATIO_CLAMP = 20.0


@KL_ESTIMATORS.register("k1")
def k1(logp: Tensor, ref_logp: Tensor) -> Tensor:
    """k1 = logp - ref_logp: the plain log-ratio, unbiased but noisy and sign-indefinite.

    Args:
        logp: (B, T) log pi_theta of the sampled tokens.
        ref_logp: (B, T) log pi_ref of the same tokens.
    """
    return logp - ref_logp


@KL_ESTIMATORS.register("k2")
def k2(logp: Tensor, ref_logp: Tensor) -> Tensor:
    """k2 = (logp - ref_logp)^2 / 2: biased but low variance and never negative.

    As a loss term on on-policy samples its gradient is unbiased for the reverse KL:
    E_pi[grad k2] = E_pi[log(pi/ref) grad log pi] = grad KL(pi || ref), whereas the
    gradient of k3 is not, although k3's value is the better estimate of the KL itself.

    Args:
        logp: (B, T) log pi_theta of the sampled tokens.
        ref_logp: (B, T) log pi_ref of the same tokens.
    """
    return 0.5 * (logp - ref_logp) ** 2


@KL_ESTIMATORS.register("k3")
def k3(logp: Tensor, ref_logp: Tensor) -> Tensor:
    """k3 = exp(ref_logp - logp) - (ref_logp - logp) - 1: unbiased, low variance, >= 0.

    The log-ratio is clamped to [-20, 20] before the exponential: a token the reference
    model finds far likelier than the policy would otherwise overflow to inf (exp(89) in
    float32) and turn the whole loss into NaN; exp(20) ~ 5e8 is already an enormous penalty,
    so the clamp changes nothing a healthy run would see (verl clamps the same way).

    Args:
        logp: (B, T) log pi_theta of the sampled tokens.
        ref_logp: (B, T) log pi_ref of the same tokens.
    """
    log_ratio = (ref_logp - logp).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
    # expm1(x) - x, not exp(x) - x - 1: near x = 0 the latter is off by a rounding of 1
    # (-1e-16 at x = 2e-12: below zero), the former by a rounding of x at most, and never
    # negative (expm1(x) >= x, and rounding keeps the order).
    return torch.expm1(log_ratio) - log_ratio


def kl_penalty_rewards(rewards: Tensor, kl: Tensor, coef: float, mask: Tensor) -> Tensor:
    """Subtract a per-token KL penalty from the rewards (KL as reward, not as loss).

    InstructGPT-style shaping (Ouyang et al. 2022, https://arxiv.org/abs/2203.02155): the
    penalty becomes part of the return the advantage estimator sees, so it is detached; a
    gradient through it would double-count the KL. Masked-out steps keep their reward.

    Args:
        rewards: (B, T) rewards.
        kl: (B, T) per-token KL estimate, e.g. from `KL_ESTIMATORS.get("k1")`.
        coef: penalty weight (kl_coef).
        mask: (B, T) 1 on policy tokens.
    """
    penalty = coef * kl.detach().to(rewards.dtype)
    return torch.where(mask.bool(), rewards - penalty, rewards)

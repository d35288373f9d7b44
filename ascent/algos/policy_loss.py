"""Clipped policy-gradient losses.

Every loss has the signature `fn(inp, params) -> (per_token_loss, metrics)`: the loss is
(B, T) and 0 on masked-out tokens; turning it into a scalar is the job of an aggregation
from `ascent.algos.aggregation`, chosen separately. Metrics are detached scalars over the
masked tokens, named as TRL/verl users expect (`clip_ratio/high`, `approx_kl`, ...).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from ascent.algos.batch import PolicyLossInput, PolicyLossParams
from ascent.algos.kl import k3
from ascent.algos.masked import masked_mean
from ascent.registry import Registry

PolicyLoss = Callable[[PolicyLossInput, PolicyLossParams], tuple[Tensor, dict[str, Tensor]]]
POLICY_LOSSES: Registry[PolicyLoss] = Registry("policy loss")

_USES = frozenset({"clip_low", "clip_high", "dual_clip", "is_cap"})  # [algorithm] keys


def _clipped_surrogate(
    ratio: Tensor, advantages: Tensor, mask: Tensor, params: PolicyLossParams
) -> tuple[Tensor, dict[str, Tensor]]:
    """max(-A r, -A clip(r, 1 - eps_low, 1 + eps_high)), then the optional dual clip.

    Schulman et al. 2017, https://arxiv.org/abs/1707.06347; separate low/high ranges are
    DAPO's clip-higher (Yu et al. 2025, https://arxiv.org/abs/2503.14476), which leaves room
    for unlikely tokens to grow. Dual clip (Ye et al. 2020, https://arxiv.org/abs/1912.09729)
    bounds the loss of a negative-advantage token by -A c, so a huge ratio on stale data
    cannot dominate the update.

    Args:
        ratio: (B, T) importance ratio pi_theta / pi_old (with grad).
        advantages: (B, T).
        mask: (B, T).
        params: clip_low, clip_high, dual_clip.
    """
    clipped = ratio.clamp(1.0 - params.clip_low, 1.0 + params.clip_high)
    loss = torch.maximum(-advantages * ratio, -advantages * clipped)
    r, a = ratio.detach(), advantages.detach()
    low = (r < 1.0 - params.clip_low) & (a < 0)
    high = (r > 1.0 + params.clip_high) & (a > 0)
    metrics = {
        "clip_ratio/low": masked_mean(low.float(), mask),
        "clip_ratio/high": masked_mean(high.float(), mask),
        "clip_ratio": masked_mean((low | high).float(), mask),
    }
    if params.dual_clip is not None:
        bound = -advantages * params.dual_clip
        negative = advantages < 0
        metrics["dual_clip_frac"] = masked_mean((negative & (loss.detach() > bound)).float(), mask)
        loss = torch.where(negative, torch.minimum(loss, bound), loss)
    return loss, metrics


def _behaviour_weight(
    log_weight: Tensor | None, mask: Tensor, params: PolicyLossParams
) -> tuple[Tensor | None, dict[str, Tensor]]:
    """Truncated importance weight min(pi_old / pi_behaviour, is_cap), detached.

    Decoupled PPO (Hilton et al. 2022, https://arxiv.org/abs/2110.00641; AReaL, Fu et al.
    2025, https://arxiv.org/abs/2505.24298): the proximal policy anchors the clip and the
    behaviour policy that sampled the data enters only through this weight. The weight is
    truncated at is_cap as in IMPALA (https://arxiv.org/abs/1802.01561) and the SPEC's
    correction_clip; AReaL instead drops tokens above the cap. Without is_cap the weight is
    applied uncapped. The metrics describe the raw weights, before the cap, so they show how
    stale the data is. SPEC.md writes the weight as pi_theta / pi_behaviour; that is the
    product of the clipped ratio pi_theta / pi_old and this weight, with the trust region
    kept around pi_old as the decoupled-PPO papers do (the two coincide when
    old_logp == behaviour_logp).

    Args:
        log_weight: (B, T) log(pi_old / pi_behaviour), or None for on-policy data.
        mask: (B, T).
        params: is_cap.
    """
    if log_weight is None:
        if params.is_cap is not None:
            raise ValueError(
                "is_cap is set but behaviour_logp is None: pass the log-probs of the policy "
                "that generated the rollouts (old_logp itself when they are on-policy)"
            )
        return None, {}
    raw = torch.exp(log_weight.detach())
    weight = raw if params.is_cap is None else raw.clamp(max=params.is_cap)
    zero = torch.zeros((), dtype=raw.dtype, device=raw.device)
    metrics = {
        "is_weight_mean": masked_mean(raw, mask),
        "is_weight_max": torch.where(mask.bool(), raw, zero).max(),
        "is_clip_frac": masked_mean((raw != weight).float(), mask),
    }
    return weight, metrics


def _finish(
    loss: Tensor, weight: Tensor | None, inp: PolicyLossInput, ratio: Tensor
) -> tuple[Tensor, dict[str, Tensor]]:
    """Apply the behaviour weight, zero masked-out tokens, add the shared metrics."""
    if weight is not None:
        loss = loss * weight
    loss = torch.where(inp.mask.bool(), loss, torch.zeros_like(loss))
    metrics = {
        "approx_kl": masked_mean(k3(inp.old_logp.detach(), inp.logp.detach()), inp.mask),
        "ratio_mean": masked_mean(ratio.detach(), inp.mask),
    }
    return loss, metrics


@POLICY_LOSSES.register("ppo_clip", uses=_USES)
def ppo_clip(inp: PolicyLossInput, params: PolicyLossParams) -> tuple[Tensor, dict[str, Tensor]]:
    """Token-level PPO clipped surrogate, with clip-higher, dual clip and off-policy weights.

    Schulman et al. 2017, https://arxiv.org/abs/1707.06347. ratio = exp(logp - old_logp);
    see `_clipped_surrogate` for the clip and `_behaviour_weight` for behaviour_logp/is_cap.
    `approx_kl` is Schulman's k3 estimate of KL(pi_old || pi_theta) from the old policy's
    samples: (r - 1) - log r.

    Args:
        inp: logp, old_logp, advantages, mask (B, T); behaviour_logp (B, T) optional.
        params: clip_low, clip_high, dual_clip, is_cap.

    Returns:
        (B, T) per-token loss (0 off the mask) and detached scalar metrics.
    """
    ratio = torch.exp(inp.logp - inp.old_logp)
    log_w = None if inp.behaviour_logp is None else inp.old_logp - inp.behaviour_logp
    weight, w_metrics = _behaviour_weight(log_w, inp.mask, params)
    loss, clip_metrics = _clipped_surrogate(ratio, inp.advantages, inp.mask, params)
    loss, metrics = _finish(loss, weight, inp, ratio)
    return loss, {**metrics, **clip_metrics, **w_metrics}


@POLICY_LOSSES.register("vanilla_pg", uses=frozenset())
def vanilla_pg(inp: PolicyLossInput, params: PolicyLossParams) -> tuple[Tensor, dict[str, Tensor]]:
    """The actor-critic policy gradient, without a trust region: -A x ratio per token.

    At ratio 1 (the first gradient step on fresh samples) its gradient is -A grad log pi,
    the plain actor-critic step (Sutton et al. 1999); on later minibatches of the same
    rollout the ratio weights the samples by how far the policy has moved, but nothing
    clips it: the step that PPO's clip was introduced to bound.

    Args:
        inp: logp, old_logp, advantages, mask (B, T).
        params: unused (no clip, no behaviour weight).

    Returns:
        (B, T) per-token loss (0 off the mask) and detached scalar metrics (clip_ratio 0).
    """
    ratio = torch.exp(inp.logp - inp.old_logp)
    loss, metrics = _finish(-inp.advantages * ratio, None, inp, ratio)
    return loss, {**metrics, "clip_ratio": torch.zeros((), device=ratio.device)}


@POLICY_LOSSES.register("gspo", uses=_USES)
def gspo(inp: PolicyLossInput, params: PolicyLossParams) -> tuple[Tensor, dict[str, Tensor]]:
    """Group Sequence Policy Optimization: one clipped ratio per sequence.

    Zheng et al. 2025, https://arxiv.org/abs/2507.18071. s_i = exp(mean_t (logp - old_logp))
    over the row's masked tokens (the length-normalised sequence likelihood ratio), used in
    the paper's token-level form s_{i,t} = sg[s_i] * exp(logp - sg[logp]), whose value is s_i
    on every token and whose gradient is s_i * grad logp_t. With per-sequence advantages and
    the `seq_mean_token_mean` aggregation this equals the paper's sequence objective exactly.
    The paper clips far tighter than PPO (3e-4 / 4e-4), because s_i is a geometric mean;
    choose clip_low/clip_high accordingly. Off-policy weights are per sequence too:
    exp(mean_t (old_logp - behaviour_logp)).

    Args:
        inp: logp, old_logp, advantages, mask (B, T); behaviour_logp (B, T) optional.
        params: clip_low, clip_high, dual_clip, is_cap.

    Returns:
        (B, T) per-token loss (0 off the mask) and detached scalar metrics.
    """
    seq_log_ratio = masked_mean(inp.logp - inp.old_logp, inp.mask, dim=-1)
    ratio = torch.exp(seq_log_ratio.detach()[:, None] + inp.logp - inp.logp.detach())
    log_w = None
    if inp.behaviour_logp is not None:
        seq_log_w = masked_mean(inp.old_logp - inp.behaviour_logp, inp.mask, dim=-1)
        log_w = seq_log_w[:, None].expand_as(inp.logp)
    weight, w_metrics = _behaviour_weight(log_w, inp.mask, params)
    loss, clip_metrics = _clipped_surrogate(ratio, inp.advantages, inp.mask, params)
    loss, metrics = _finish(loss, weight, inp, ratio)
    return loss, {**metrics, **clip_metrics, **w_metrics}


@POLICY_LOSSES.register("cispo", uses=frozenset({"clip_low", "clip_high", "is_cap"}))
def cispo(inp: PolicyLossInput, params: PolicyLossParams) -> tuple[Tensor, dict[str, Tensor]]:
    """Clipped importance-sampling policy optimisation: clip the weight, keep every token.

    MiniMax-M1 (MiniMax 2025, https://arxiv.org/abs/2506.13585): -sg(clip(r, 1 - clip_low,
    1 + clip_high)) * A * log pi_theta. PPO's clip drops the gradient of a token whose ratio
    left the range (often the rare "fork" tokens reasoning hinges on); here the weight is
    clipped and detached, so every token keeps a REINFORCE gradient of bounded size. The
    paper leaves the lower bound open (a large clip_low) and tunes clip_high. With one
    optimiser step per batch r = 1: the plain policy gradient.

    Args:
        inp: logp, old_logp, advantages, mask (B, T); behaviour_logp (B, T) optional.
        params: clip_low, clip_high, is_cap.
    """
    ratio = torch.exp(inp.logp - inp.old_logp)
    r = ratio.detach()
    weight_is = r.clamp(1.0 - params.clip_low, 1.0 + params.clip_high)
    loss = -weight_is * inp.advantages * inp.logp
    log_w = None if inp.behaviour_logp is None else inp.old_logp - inp.behaviour_logp
    weight, w_metrics = _behaviour_weight(log_w, inp.mask, params)
    loss, metrics = _finish(loss, weight, inp, ratio)
    clipped = {
        "clip_ratio/low": masked_mean((r < 1.0 - params.clip_low).float(), inp.mask),
        "clip_ratio/high": masked_mean((r > 1.0 + params.clip_high).float(), inp.mask),
    }
    clipped["clip_ratio"] = clipped["clip_ratio/low"] + clipped["clip_ratio/high"]
    return loss, {**metrics, **clipped, **w_metrics}


@POLICY_LOSSES.register("sapo", uses=frozenset({"sapo_tau_pos", "sapo_tau_neg", "is_cap"}))
def sapo(inp: PolicyLossInput, params: PolicyLossParams) -> tuple[Tensor, dict[str, Tensor]]:
    """Soft adaptive policy optimisation: a smooth gate in place of the hard clip.

    Gao et al. 2025, https://arxiv.org/abs/2511.20347: -f(r) * A with f(r) = (4 / tau)
    sigmoid(tau (r - 1)), tau = sapo_tau_pos for A > 0 and sapo_tau_neg for A < 0. The
    gradient weight f'(r) = 4 sigmoid(x)(1 - sigmoid(x)), x = tau (r - 1), is 1 at r = 1 (the
    policy gradient) and decays smoothly as the ratio leaves 1, faster for negative
    advantages (tau_neg > tau_pos), instead of dropping to 0 at a clip edge.

    Args:
        inp: logp, old_logp, advantages, mask (B, T); behaviour_logp (B, T) optional.
        params: sapo_tau_pos, sapo_tau_neg, is_cap.
    """
    ratio = torch.exp(inp.logp - inp.old_logp)
    tau = torch.where(inp.advantages > 0, params.sapo_tau_pos, params.sapo_tau_neg)
    tau = tau.to(ratio.dtype)
    gate = torch.sigmoid(tau * (ratio - 1.0)) * (4.0 / tau)
    loss = -gate * inp.advantages
    log_w = None if inp.behaviour_logp is None else inp.old_logp - inp.behaviour_logp
    weight, w_metrics = _behaviour_weight(log_w, inp.mask, params)
    loss, metrics = _finish(loss, weight, inp, ratio)
    x = (tau * (ratio.detach() - 1.0)).sigmoid()
    metrics["sapo/gate_grad_mean"] = masked_mean(4.0 * x * (1.0 - x), inp.mask)
    return loss, {**metrics, **w_metrics}

"""The critic of value-based recipes (PPO with GAE, VAPO): values, value loss, its step.

    make_train_batch  V_old(s_t) of the batch, one pass without gradients -> the advantage
                      estimator (gae / length_adaptive_gae) -> advantages and returns
    update            value loss 0.5 (V - R)^2 (clipped around V_old with value_clip),
                      aggregated like the policy loss and added to each micro-batch's loss;
                      a head on the policy's backbone weighs it by value_coef
    warm-up           the first value_warmup_steps steps train only the critic against the
                      returns (lam_critic; VAPO: 1.0, Monte-Carlo targets): the policy is not
                      stepped, and a head trains without gradients into the shared backbone

The critic has its own optimiser (AdamW, `[critic] lr`, the `[optim]` schedule over all its
updates) over its own parameters: the whole critic when separate, the head alone when it sits
on the policy's backbone (the backbone belongs to the policy's optimiser).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn
from torch.optim.lr_scheduler import LambdaLR

from ascent.algos import AggregationScale, explained_variance, masked_mean, value_loss
from ascent.config.llm import LLMConfig
from ascent.models import ValueModel, load_critic
from ascent.models.forward import response_values
from ascent.rollout import RolloutBatch


@dataclass
class Critic:
    model: ValueModel
    optimizer: torch.optim.Optimizer
    scheduler: LambdaLR
    shared: bool  # a head on the policy's backbone
    coef: float  # weight of the value loss in the summed loss (value_coef for a head, else 1)
    clip: float | None  # value_clip

    def own_parameters(self) -> list[nn.Parameter]:
        module = self.model.head if self.shared else self.model
        return [p for p in module.parameters() if p.requires_grad]

    def state_dict(self) -> dict[str, Any]:
        weights = self.model.head.state_dict() if self.shared else self.model.state_dict()
        return {
            "weights": weights,
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        (self.model.head if self.shared else self.model).load_state_dict(state["weights"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])


def build_critic(
    cfg: LLMConfig,
    policy: nn.Module,
    device: torch.device,
    total_updates: int,
    schedule: Callable[[int], Callable[[int], float]],
) -> Critic:
    """The critic `[critic]` describes; `schedule(total)` gives the LR factor function."""
    c = cfg.critic
    model = load_critic(c, cfg.model, policy, device)
    shared = c.architecture == "head"
    params = model.head.parameters() if shared else model.parameters()
    o = cfg.optim
    optimizer = torch.optim.AdamW(
        [p for p in params if p.requires_grad],
        lr=c.lr,
        betas=tuple(o.betas),
        eps=o.eps,
        weight_decay=o.weight_decay,
    )
    return Critic(
        model=model,
        optimizer=optimizer,
        scheduler=LambdaLR(optimizer, schedule(total_updates)),
        shared=shared,
        coef=c.value_coef if shared else 1.0,
        clip=c.value_clip,
    )


@torch.no_grad()
def batch_values(critic: Critic, rollout: RolloutBatch, micro: int) -> Tensor:
    """(B, R) V(s_t) of the batch, in micro-batches, without gradients."""
    parts = [
        response_values(critic.model, rollout.select(slice(i, i + micro)))
        for i in range(0, len(rollout), micro)
    ]
    return torch.cat(parts)


def critic_loss(
    critic: Critic,
    rollout: RolloutBatch,
    old_values: Tensor,
    returns: Tensor,
    aggregate: Callable[[Tensor, Tensor, AggregationScale], Tensor],
    scale: AggregationScale,
) -> tuple[Tensor, dict[str, Tensor]]:
    """The weighted, aggregated value loss of one micro-batch and its metrics."""
    mask = rollout.response_mask
    values = response_values(critic.model, rollout)
    per_token, metrics = value_loss(values, old_values, returns, mask, critic.clip)
    metrics["value_loss"] = masked_mean(per_token.detach(), mask)
    return critic.coef * aggregate(per_token, mask, scale), metrics


def critic_step(critic: Critic, max_grad_norm: float) -> dict[str, float]:
    """Clip the critic's own gradient, step its optimiser and schedule."""
    params = critic.own_parameters()
    for p in params:
        if p.grad is None:
            p.grad = torch.zeros_like(p)
    norm = torch.nn.utils.clip_grad_norm_(params, max_grad_norm)
    lr = critic.scheduler.get_last_lr()[0]
    critic.optimizer.step()
    critic.scheduler.step()
    return {"critic_grad_norm": float(norm), "critic_lr": lr}


def value_metrics(values: Tensor, returns: Tensor, mask: Tensor) -> dict[str, float]:
    """How well the values at sampling time predicted the returns they are trained towards."""
    return {
        "explained_variance": float(explained_variance(values, returns, mask)),
        "values/mean": float(masked_mean(values, mask)),
        "returns/mean": float(masked_mean(returns, mask)),
        "value_error": float(masked_mean((values - returns).abs(), mask)),
    }

"""The critic of value-based recipes (PPO with GAE, VAPO): `values(rollout)` and
`update(batch, step)`, behind the same narrow interface whether it is a model of its own
(`Critic`, here) or a head on the actor's backbone (`ascent.train.actor.ActorHead`).

    make_train_batch  V_old(s_t) of the batch, one pass without gradients -> the advantage
                      estimator (gae / length_adaptive_gae) -> advantages and returns
    update            value loss 0.5 (V - R)^2 (clipped around V_old with value_clip),
                      aggregated like the policy loss, over the same mini-batches
                      (updates.py), with its own optimiser (AdamW, `[critic] lr`, the
                      `[optim]` schedule over all its updates)
    warm-up           the first value_warmup_steps steps train only the critic against the
                      returns (lam_critic; VAPO: 1.0, Monte-Carlo targets), the policy frozen

Like the actor, its parameters and optimiser state are float32 and its forward runs in the
compute dtype; on several ranks it is sharded with FSDP2.
"""

from __future__ import annotations

import contextlib
from typing import Any, Protocol

import torch
from torch import Tensor, nn
from torch.optim.lr_scheduler import LambdaLR

from ascent.algos import AggregationScale, explained_variance, masked_mean, value_loss
from ascent.algos.aggregation import Aggregation
from ascent.config.llm_sections import TrainSection
from ascent.rollout import RolloutBatch
from ascent.train.distributed import Dist
from ascent.train.forward import response_values
from ascent.train.optim_state import load_keeping_settings, load_schedule
from ascent.train.train_batch import MetricMeans, TrainBatch
from ascent.train.updates import (
    accumulate,
    clip_and_norm,
    global_scale,
    mini_batches,
    per_micro_batch,
)


class CriticWorker(Protocol):
    def values(self, rollout: RolloutBatch) -> Tensor:
        """(B, R) V(s_t), without gradients."""
        ...

    def update(self, batch: TrainBatch, step: int, *, warmup: bool) -> dict[str, float]: ...


class Critic:
    """A value model of its own, with its own optimiser and schedule."""

    def __init__(
        self,
        model: nn.Module,
        optimizer: torch.optim.Optimizer,
        scheduler: LambdaLR,
        *,
        aggregate: Aggregation,
        norm_const: float,
        clip: float | None,
        train: TrainSection,
        seed: int,
        dist: Dist,
        compute_dtype: torch.dtype,
    ) -> None:
        self.model = model
        self.optimizer = optimizer
        self.scheduler = scheduler
        self.aggregate = aggregate
        self.norm_const = norm_const
        self.clip = clip
        self.train = train
        self.seed = seed
        self.dist = dist
        self.compute_dtype = compute_dtype

    def _compute(self) -> contextlib.AbstractContextManager[Any]:
        if self.compute_dtype == torch.float32 or self.dist.distributed:
            return contextlib.nullcontext()
        return torch.autocast(self.dist.device.type, dtype=self.compute_dtype)

    @torch.no_grad()
    def values(self, rollout: RolloutBatch) -> Tensor:
        with self._compute():
            return per_micro_batch(
                rollout, self.train, self.dist, lambda part: response_values(self.model, part)
            )

    def update(self, batch: TrainBatch, step: int, *, warmup: bool) -> dict[str, float]:
        """This step's optimiser steps on the value loss (warm-up or not: the critic always
        trains; the warm-up only keeps the actor still)."""
        stats = MetricMeans()
        for rows in mini_batches(len(batch), self.train, self.seed, step, self.dist):
            rows = rows.to(batch.advantages.device)
            scale = global_scale(batch.rollout.response_mask[rows], self.norm_const, self.dist)
            self.optimizer.zero_grad(set_to_none=True)

            def loss_fn(piece: TrainBatch, scale: AggregationScale = scale):
                with self._compute():
                    loss, metrics = self._loss(piece, scale)
                return loss * self.dist.world_size, metrics

            total = accumulate(batch, rows, self.train, self.dist, loss_fn, stats.add)
            norm = clip_and_norm(
                [p for p in self.model.parameters() if p.requires_grad], self.train.max_grad_norm
            )
            stats.add(
                {
                    "value_loss_sum": total,
                    "critic_grad_norm": norm,
                    "critic_lr": self.scheduler.get_last_lr()[0],
                }
            )
            self.optimizer.step()
            self.scheduler.step()
        return stats.means(self.dist)

    def _loss(self, piece: TrainBatch, scale: AggregationScale) -> tuple[Tensor, dict[str, Any]]:
        mask = piece.rollout.response_mask
        values = response_values(self.model, piece.rollout)
        per_token, metrics = value_loss(values, piece.old_values, piece.returns, mask, self.clip)
        metrics["value_loss"] = masked_mean(per_token.detach(), mask)
        return self.aggregate(per_token, mask, scale), metrics

    def checkpoint_state(self) -> dict[str, Any]:
        from torch.distributed.checkpoint.state_dict import get_state_dict

        model, optim = get_state_dict(self.model, self.optimizer)
        return {"critic": model, "critic_optimizer": optim}

    def load_checkpoint_state(self, state: dict[str, Any]) -> None:
        from torch.distributed.checkpoint.state_dict import set_state_dict

        load_keeping_settings(
            self.optimizer,
            lambda: set_state_dict(
                self.model,
                self.optimizer,
                model_state_dict=state["critic"],
                optim_state_dict=state["critic_optimizer"],
            ),
        )

    def schedule_state(self) -> dict[str, Any]:
        return {"critic_scheduler": self.scheduler.state_dict()}

    def load_schedule_state(self, state: dict[str, Any]) -> None:
        load_schedule(self.scheduler, state["critic_scheduler"])


def value_metrics(values: Tensor, returns: Tensor, mask: Tensor) -> dict[str, float]:
    """How well the values at sampling time predicted the returns they are trained towards."""
    return {
        "explained_variance": float(explained_variance(values, returns, mask)),
        "values/mean": float(masked_mean(values, mask)),
        "returns/mean": float(masked_mean(returns, mask)),
        "value_error": float(masked_mean((values - returns).abs(), mask)),
    }

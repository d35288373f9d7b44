"""The actor: the policy and everything that trains it (optimiser, schedule, precision,
sharding), behind the narrow interface the controller (`controller.Controller.step`) drives.

    logprobs(rollout)          log pi(a_t | s_t) of a batch, no gradients
    update(batch, step)        this step's optimiser steps (updates.py); returns metrics
    live_module()              the module to decode with in place (the engine's fast path)
    weights()                  the full weights as (name, tensor), for an engine's own copy
    checkpoint_state() / load  what a checkpoint keeps (parameters and optimiser sharded)

The loss of a micro-batch, term by term (each present only when the recipe asks for it):

    policy loss (ppo_clip / gspo)   aggregated by [algorithm] loss_agg
    + kl_coef * KL(pi || pi_ref)    per token, same aggregation (kl_mode = "loss")
    - entropy_coef * entropy        per token, same aggregation
    + nll_coef * NLL(correct rows)  token mean over the correct rows' tokens (VAPO)
    + value_coef * value loss       with a value head on the policy's backbone (`ActorHead`)

Precision: parameters and Adam's moments are float32 (master weights); the forward runs in
the configured compute dtype (bf16 autocast on one device, FSDP2's MixedPrecisionPolicy on
several). An update of lr 1e-6 on a weight of 1e-2 would round away in bf16 parameters; in
float32 it is kept (tests/train/test_precision.py).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn
from torch.optim.lr_scheduler import LambdaLR

from ascent.algos import PolicyLossInput, masked_mean, positive_nll, value_loss
from ascent.algos.aggregation import token_mean
from ascent.config.llm_sections import TrainSection
from ascent.rollout import RolloutBatch
from ascent.train.distributed import Dist
from ascent.train.forward import response_logprobs, response_values
from ascent.train.optim_state import load_keeping_settings, load_schedule
from ascent.train.parts import AlgorithmParts
from ascent.train.sharding import adapter_weights, full_weights, live_module
from ascent.train.train_batch import MetricMeans, TrainBatch
from ascent.train.updates import (
    accumulate,
    clip_and_norm,
    global_scale,
    mini_batches,
    per_micro_batch,
)


@dataclass
class ValueHeadState:
    """A value head on the actor's backbone (`[critic] architecture = "head"`)."""

    model: nn.Module  # a ValueModel whose trunk is the policy's
    optimizer: torch.optim.Optimizer
    scheduler: LambdaLR
    coef: float  # value_coef: weight of the value loss in the actor's loss
    clip: float | None  # value_clip


class Actor:
    def __init__(
        self,
        model: nn.Module,
        optimizer: torch.optim.Optimizer,
        scheduler: LambdaLR,
        *,
        parts: AlgorithmParts,
        train: TrainSection,
        seed: int,
        dist: Dist,
        compute_dtype: torch.dtype,
        head: ValueHeadState | None = None,
    ) -> None:
        self.model = model
        self.optimizer = optimizer
        self.scheduler = scheduler
        self.parts = parts
        self.train = train
        self.seed = seed
        self.dist = dist
        self.compute_dtype = compute_dtype
        self.head = head

    # -- reading the policy ------------------------------------------------------------------

    def compute(self) -> contextlib.AbstractContextManager[Any]:
        """Autocast to the compute dtype on one device (FSDP2 casts by its own policy)."""
        if self.compute_dtype == torch.float32 or self.dist.distributed:
            return contextlib.nullcontext()
        return torch.autocast(self.dist.device.type, dtype=self.compute_dtype)

    @torch.no_grad()
    def logprobs(self, rollout: RolloutBatch, *, adapters: bool = True) -> Tensor:
        """(B, R) log-probs under the current policy, in micro-batches. `adapters=False`: the
        base model under LoRA adapters (the reference of a LoRA run)."""
        adapter_off = self.model.disable_adapter() if not adapters else contextlib.nullcontext()
        with adapter_off, self.compute():
            return self._in_micro_batches(
                rollout, lambda part: response_logprobs(self.model, part, self.parts.temperature)[0]
            )

    @torch.no_grad()
    def values(self, rollout: RolloutBatch) -> Tensor:
        """(B, R) V(s_t) of the value head (only with `[critic] architecture = "head"`)."""
        assert self.head is not None
        with self.compute():
            return self._in_micro_batches(
                rollout, lambda part: response_values(self.head.model, part)
            )

    def _in_micro_batches(self, rollout: RolloutBatch, fn) -> Tensor:
        return per_micro_batch(rollout, self.train, self.dist, fn)

    def live_module(self) -> contextlib.AbstractContextManager[nn.Module]:
        """The policy module with full weights, for decoding in place (see sharding.py)."""
        return live_module(self.model, self.compute())

    def weights(self, adapters_only: bool = False) -> Iterator[tuple[str, Tensor]]:
        """The policy's full weights under the plain model's names (LoRA merged, shards
        gathered), one tensor at a time: what an engine with its own copy loads; or, for an
        engine that applies LoRA itself (`takes_adapters`), the adapters alone."""
        return adapter_weights(self.model) if adapters_only else full_weights(self.model)

    # -- training ----------------------------------------------------------------------------

    def update(
        self, batch: TrainBatch, step: int, *, train_policy: bool = True
    ) -> dict[str, float]:
        """All optimiser steps of one RL step; the mean of their metrics over ranks.

        `train_policy = False` is the critic warm-up of a value head: only the head steps,
        and the backbone runs without gradients, so the policy is exactly unchanged.
        """
        if self.head is not None:
            self.head.model.train_trunk = train_policy
        stats = MetricMeans()
        for rows in mini_batches(len(batch), self.train, self.seed, step, self.dist):
            rows = rows.to(batch.advantages.device)
            self._optimiser_step(batch, rows, stats, train_policy)
        return stats.means(self.dist)

    def _optimiser_step(
        self, batch: TrainBatch, rows: Tensor, stats: MetricMeans, train_policy: bool
    ) -> None:
        """Accumulate one mini-batch's gradient over micro-batches, clip, step.

        Completions whose advantages are all 0 are left out of the forward/backward when
        they cannot change the loss (`AlgorithmParts.skip_zero_advantage`; one process only:
        across ranks every rank must run its share of micro-batches): same gradient, fewer
        rows. Token-weighted metrics then describe the rows trained on.
        """
        mask = batch.rollout.response_mask[rows]
        scale = global_scale(mask, self.parts.norm_const, self.dist)
        nll_scale = None
        if self.parts.nll_coef and batch.positive is not None:
            nll_scale = global_scale(mask * batch.positive[rows, None], 1.0, self.dist)
        if self.parts.skip_zero_advantage and not self.dist.distributed:
            active = batch.advantages[rows].ne(0).any(-1)
            stats.add({"frac_rows_skipped": 1.0 - float(active.float().mean())})
            rows = rows[active]
        self.optimizer.zero_grad(set_to_none=True)
        if self.head is not None:
            self.head.optimizer.zero_grad(set_to_none=True)

        def loss_fn(piece: TrainBatch) -> tuple[Tensor, dict[str, Tensor]]:
            with self.compute():
                loss, metrics = (
                    self._policy_terms(piece, scale, nll_scale)
                    if train_policy
                    else (torch.zeros((), device=piece.advantages.device), {})
                )
                if self.head is not None:
                    value, value_metrics = self._value_terms(piece, scale)
                    loss, metrics = loss + value, {**metrics, **value_metrics}
            return loss * self.dist.world_size, metrics

        total = accumulate(batch, rows, self.train, self.dist, loss_fn, stats.add)
        stats.add({"loss": total})
        if self.head is not None:
            head_params = [p for p in self.head.model.head.parameters() if p.requires_grad]
            self._average_over_ranks(head_params)
            norm = clip_and_norm(head_params, self.train.max_grad_norm)
            stats.add({"critic_grad_norm": norm, "critic_lr": self.head.scheduler.get_last_lr()[0]})
            self.head.optimizer.step()
            self.head.scheduler.step()
        if train_policy:
            params = [p for p in self.model.parameters() if p.requires_grad]
            norm = clip_and_norm(params, self.train.max_grad_norm)
            stats.add({"grad_norm": norm, "lr": self.scheduler.get_last_lr()[0]})
            self.optimizer.step()
            self.scheduler.step()

    def _average_over_ranks(self, params: list[nn.Parameter]) -> None:
        """The mean over ranks of the gradients of parameters every rank holds whole (a
        value head): what FSDP2 does for the sharded ones, so that every rank takes the same
        step and the head stays one head."""
        if not self.dist.distributed:
            return
        for p in params:
            if p.grad is None:
                p.grad = torch.zeros_like(p)
            torch.distributed.all_reduce(p.grad)
            p.grad /= self.dist.world_size

    def _policy_terms(
        self, batch: TrainBatch, scale: Any, nll_scale: Any
    ) -> tuple[Tensor, dict[str, Tensor]]:
        """Policy loss, KL, entropy and NLL of one micro-batch, aggregated (its share)."""
        parts = self.parts
        mask = batch.rollout.response_mask
        logp, entropy = response_logprobs(
            self.model,
            batch.rollout,
            parts.temperature,
            entropy="loss" if parts.entropy_coef else "metric",
        )
        old = logp.detach() if batch.old_logp is None else batch.old_logp
        per_token, metrics = parts.policy_loss(
            PolicyLossInput(
                logp=logp,
                old_logp=old,
                advantages=batch.advantages,
                mask=mask,
                behaviour_logp=batch.behaviour_logp,
            ),
            parts.loss_params,
        )
        if parts.kl is not None and parts.kl_in_loss:
            kl = parts.kl(logp, batch.ref_logp)
            per_token = per_token + parts.kl_coef * kl
            metrics["kl"] = masked_mean(kl.detach(), mask)
        if parts.entropy_coef:
            per_token = per_token - parts.entropy_coef * entropy
        metrics["entropy"] = masked_mean(entropy.detach(), mask)
        loss = parts.aggregate(per_token, mask, scale)
        if nll_scale is not None:
            nll = token_mean(positive_nll(logp, mask, batch.positive), mask, nll_scale)
            loss = loss + parts.nll_coef * nll
            keep = mask.bool() & batch.positive[:, None]
            metrics["nll_loss"] = masked_mean(-logp.detach(), keep)
        return loss, metrics

    def _value_terms(self, batch: TrainBatch, scale: Any) -> tuple[Tensor, dict[str, Tensor]]:
        head = self.head
        mask = batch.rollout.response_mask
        values = response_values(head.model, batch.rollout)
        per_token, metrics = value_loss(values, batch.old_values, batch.returns, mask, head.clip)
        metrics["value_loss"] = masked_mean(per_token.detach(), mask)
        return head.coef * self.parts.aggregate(per_token, mask, scale), metrics

    # -- checkpoints -------------------------------------------------------------------------

    def checkpoint_state(self) -> dict[str, Any]:
        """Parameters and optimiser state keyed by parameter name (shards under FSDP), for
        torch.distributed.checkpoint, plus the schedules as plain values."""
        from torch.distributed.checkpoint.state_dict import get_state_dict

        model, optim = get_state_dict(self.model, self.optimizer)
        state = {"model": model, "optimizer": optim}
        if self.head is not None:
            head, head_optim = get_state_dict(self.head.model.head, self.head.optimizer)
            state |= {"value_head": head, "value_head_optimizer": head_optim}
        return state

    def load_checkpoint_state(self, state: dict[str, Any]) -> None:
        """Weights and optimiser moments from a checkpoint; the optimiser's settings stay
        the configured ones (optim_state.py)."""
        from torch.distributed.checkpoint.state_dict import set_state_dict

        load_keeping_settings(
            self.optimizer,
            lambda: set_state_dict(
                self.model,
                self.optimizer,
                model_state_dict=state["model"],
                optim_state_dict=state["optimizer"],
            ),
        )
        if self.head is not None:
            head = self.head
            load_keeping_settings(
                head.optimizer,
                lambda: set_state_dict(
                    head.model.head,
                    head.optimizer,
                    model_state_dict=state["value_head"],
                    optim_state_dict=state["value_head_optimizer"],
                ),
            )

    def schedule_state(self) -> dict[str, Any]:
        state = {"scheduler": self.scheduler.state_dict()}
        if self.head is not None:
            state["value_head_scheduler"] = self.head.scheduler.state_dict()
        return state

    def load_schedule_state(self, state: dict[str, Any]) -> None:
        load_schedule(self.scheduler, state["scheduler"])
        if self.head is not None:
            load_schedule(self.head.scheduler, state["value_head_scheduler"])


class ActorHead:
    """The `Critic` interface of a value head that lives on the actor's backbone: values come
    from the actor, and the head trains inside the actor's update (after the warm-up, jointly
    with the policy, weighted by value_coef)."""

    def __init__(self, actor: Actor) -> None:
        self.actor = actor

    def values(self, rollout: RolloutBatch) -> Tensor:
        return self.actor.values(rollout)

    def update(self, batch: TrainBatch, step: int, *, warmup: bool) -> dict[str, float]:
        if not warmup:
            return {}  # trained by the actor's update, with the policy
        return self.actor.update(batch, step, train_policy=False)

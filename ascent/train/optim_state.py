"""Optimiser and schedule state from a checkpoint, under the settings configured now.

torch's `load_state_dict` brings back an optimiser's hyperparameters (learning rate, betas,
eps, weight decay) with its moments, and a scheduler's base rates with its position, so a
run resumed with `--set optim.lr=...` would silently keep the old values. A resume takes the
moments and the position from the checkpoint and every setting from the config.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch.optim.lr_scheduler import LambdaLR


def load_keeping_settings(optimizer: torch.optim.Optimizer, load: Callable[[], Any]) -> None:
    """Run `load` (which fills `optimizer` from a checkpoint) and put the configured
    hyperparameters of each parameter group back."""
    configured = [{k: v for k, v in g.items() if k != "params"} for g in optimizer.param_groups]
    load()
    for group, settings in zip(optimizer.param_groups, configured, strict=True):
        group.update(settings)


def load_schedule(scheduler: LambdaLR, state: dict[str, Any]) -> None:
    """A schedule's position from `state`, its base rates from the config: each group's rate
    becomes the configured base rate times the schedule's factor at the restored step."""
    base = list(scheduler.base_lrs)
    scheduler.load_state_dict(state)
    scheduler.base_lrs = base
    step = scheduler.last_epoch
    rates = [lr * factor(step) for lr, factor in zip(base, scheduler.lr_lambdas, strict=True)]
    for group, lr, rate in zip(scheduler.optimizer.param_groups, base, rates, strict=True):
        group["lr"], group["initial_lr"] = rate, lr
    scheduler._last_lr = rates  # what get_last_lr() reports until the next step

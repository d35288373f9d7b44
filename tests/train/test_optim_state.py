"""A resumed optimiser keeps its moments and takes the configured settings."""

from __future__ import annotations

import torch
from torch.optim.lr_scheduler import LambdaLR

from ascent.train.optim_state import load_keeping_settings, load_schedule


def factor(step: int) -> float:
    return 1.0 / (1.0 + step)


def trained(lr: float, betas: tuple[float, float], steps: int):
    torch.manual_seed(0)
    weight = torch.nn.Parameter(torch.randn(3))
    optimizer = torch.optim.AdamW([weight], lr=lr, betas=betas, weight_decay=0.0)
    scheduler = LambdaLR(optimizer, factor)
    for _ in range(steps):
        optimizer.zero_grad()
        (weight**2).sum().backward()
        optimizer.step()
        scheduler.step()
    return weight, optimizer, scheduler


def test_moments_and_position_come_back_and_the_settings_are_the_new_ones():
    _, old_opt, old_sched = trained(0.1, (0.9, 0.999), steps=3)
    saved_opt, saved_sched = old_opt.state_dict(), old_sched.state_dict()

    weight, optimizer, scheduler = trained(0.5, (0.8, 0.99), steps=0)
    load_keeping_settings(optimizer, lambda: optimizer.load_state_dict(saved_opt))
    load_schedule(scheduler, saved_sched)

    group = optimizer.param_groups[0]
    assert group["betas"] == (0.8, 0.99)
    assert group["lr"] == 0.5 * factor(3) and group["initial_lr"] == 0.5
    assert scheduler.get_last_lr() == [0.5 * factor(3)]
    old_state = old_opt.state[old_opt.param_groups[0]["params"][0]]
    state = optimizer.state[weight]
    assert torch.equal(state["exp_avg"], old_state["exp_avg"])
    assert torch.equal(state["exp_avg_sq"], old_state["exp_avg_sq"])
    assert int(state["step"]) == 3

    optimizer.zero_grad()
    (weight**2).sum().backward()
    optimizer.step()
    scheduler.step()
    assert scheduler.get_last_lr() == [0.5 * factor(4)]  # the schedule goes on from step 3


def test_plain_torch_loading_would_have_kept_the_old_rate():
    """What load_keeping_settings is for: torch restores the checkpoint's hyperparameters."""
    _, old_opt, _ = trained(0.1, (0.9, 0.999), steps=1)
    _, optimizer, _ = trained(0.5, (0.8, 0.99), steps=0)
    optimizer.load_state_dict(old_opt.state_dict())
    assert optimizer.param_groups[0]["betas"] == (0.9, 0.999)

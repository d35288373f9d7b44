"""The critic of value-based recipes: warm-up freezes the policy, the update stays exact, and
a run with a critic, a replay buffer and a reward history resumes exactly."""

from __future__ import annotations

import pytest
import torch

from ascent.train.checkpoint import load_checkpoint
from ascent.train.llm import train_llm
from ascent.train.llm_setup import build_run
from ascent.train.llm_step import rl_step
from ascent.train.rundir import RunDir
from tests.train.test_llm_loop import assert_same, config, one_update, stop_at

GAE = ['algorithm.advantage="gae"', "critic.lr=1e-3"]


def snapshot(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.clone() for k, v in module.state_dict().items()}


@pytest.mark.parametrize("architecture", ["separate", "head"])
def test_critic_warmup_trains_only_the_critic_then_the_policy_learns(tmp_path, architecture):
    cfg = config(
        tmp_path, *GAE, f'critic.architecture="{architecture}"', "critic.value_warmup_steps=2"
    )
    run = build_run(cfg, torch.device("cpu"))
    policy, critic = snapshot(run.policy), snapshot(run.critic.model)
    lr_before = run.scheduler.get_last_lr()
    for step in (1, 2):
        metrics, _ = rl_step(run, step)
        assert metrics["critic_warmup"] == 1.0 and "value_loss" in metrics
        assert "clip_ratio" not in metrics and "grad_norm" not in metrics
    assert_same(policy, run.policy.state_dict(), atol=0)  # not one weight moved
    assert run.scheduler.get_last_lr() == lr_before  # nor did the policy's schedule
    moved = [k for k, v in run.critic.model.state_dict().items() if not torch.equal(v, critic[k])]
    assert "head.weight" in moved
    if architecture == "separate":
        assert any(k.startswith("trunk.") for k in moved)  # its own backbone trains too
    metrics, _ = rl_step(run, 3)
    assert "critic_warmup" not in metrics and "grad_norm" in metrics
    assert any(not torch.equal(v, policy[k]) for k, v in run.policy.state_dict().items())
    run.reward.close()


def test_a_value_head_shares_the_policy_backbone_and_optimises_only_its_head(tmp_path):
    run = build_run(config(tmp_path, *GAE, 'critic.architecture="head"'), torch.device("cpu"))
    policy_params = {id(p) for p in run.policy.parameters()}
    assert {id(p) for p in run.critic.model.trunk.parameters()} <= policy_params
    assert [id(p) for p in run.critic.own_parameters()] == [
        id(p) for p in run.critic.model.head.parameters()
    ]
    run.reward.close()


@pytest.mark.parametrize("architecture", ["separate", "head"])
def test_update_with_a_critic_does_not_depend_on_the_micro_batch_split(tmp_path, architecture):
    arch = f'critic.architecture="{architecture}"'
    whole = one_update(config(tmp_path, *GAE, arch))
    split = one_update(config(tmp_path, *GAE, arch, "train.micro_batch_size=4"))
    assert_same(whole, split, atol=1e-5)


def test_resume_with_critic_replay_and_history_equals_one_uninterrupted_run(tmp_path, monkeypatch):
    extras = [
        *GAE,
        "critic.value_warmup_steps=1",
        "sampling.replay_ratio=0.5",
        "algorithm.is_cap=2.0",
        "sampling.history_resampling=true",
        "data.train_size=3",
        "algorithm.nll_coef=0.1",
    ]
    straight = config(tmp_path, *extras, name="straight")
    train_llm(straight, RunDir.create(straight))

    split = config(tmp_path, *extras, "train.save_steps=0", name="split")
    with monkeypatch.context() as patch:
        stop_at(2, patch)
        with pytest.raises(KeyboardInterrupt):
            train_llm(split, RunDir.create(split))
    train_llm(split, RunDir.create(split, resume=tmp_path / "split"))
    a, b = (
        load_checkpoint(tmp_path / name / "checkpoints" / "step-000004")
        for name in ("straight", "split")
    )
    assert_same(a["model"], b["model"])
    assert_same(a["critic"]["weights"], b["critic"]["weights"])
    assert len(a["replay"]["items"]) == len(b["replay"]["items"]) > 0
    assert a["history"] == b["history"] and a["sampler"] == b["sampler"]

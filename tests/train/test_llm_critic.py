"""The critic of value-based recipes: warm-up freezes the policy, the update stays exact, and
a run with a critic, a replay buffer and a reward history resumes exactly."""

from __future__ import annotations

import pytest
import torch

from ascent.rundir import RunDir
from ascent.train.checkpoint import load_checkpoint
from ascent.train.llm import train_llm
from ascent.train.llm_setup import build_run
from ascent.train.shards import load_shards
from tests.train.test_llm_loop import assert_same, config, one_update, stop_at, weights

GAE = ['algorithm.advantage="gae"', "critic.lr=1e-3"]


def snapshot(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.clone() for k, v in module.state_dict().items()}


@pytest.mark.parametrize("architecture", ["separate", "head"])
def test_critic_warmup_trains_only_the_critic_then_the_policy_learns(tmp_path, architecture):
    cfg = config(
        tmp_path, *GAE, f'critic.architecture="{architecture}"', "critic.value_warmup_steps=2"
    )
    run = build_run(cfg, torch.device("cpu"))
    value_model = run.critic.model if architecture == "separate" else run.actor.head.model
    policy, critic = snapshot(run.actor.model), snapshot(value_model)
    lr_before = run.actor.scheduler.get_last_lr()
    for step in (1, 2):
        metrics, _ = run.step(step)
        assert metrics["critic_warmup"] == 1.0 and "value_loss" in metrics
        assert "clip_ratio" not in metrics and "grad_norm" not in metrics
    assert_same(policy, run.actor.model.state_dict(), atol=0)  # not one weight moved
    assert run.actor.scheduler.get_last_lr() == lr_before  # nor did the policy's schedule
    moved = [k for k, v in value_model.state_dict().items() if not torch.equal(v, critic[k])]
    assert "head.weight" in moved
    if architecture == "separate":
        assert any(k.startswith("trunk.") for k in moved)  # its own backbone trains too
    metrics, _ = run.step(3)
    assert "critic_warmup" not in metrics and "grad_norm" in metrics
    assert any(not torch.equal(v, policy[k]) for k, v in run.actor.model.state_dict().items())
    run.close()


def test_a_value_head_shares_the_policy_backbone_and_optimises_only_its_head(tmp_path):
    run = build_run(config(tmp_path, *GAE, 'critic.architecture="head"'), torch.device("cpu"))
    head = run.actor.head
    policy_params = {id(p) for p in run.actor.model.parameters()}
    assert {id(p) for p in head.model.trunk.parameters()} <= policy_params
    optimised = [id(p) for group in head.optimizer.param_groups for p in group["params"]]
    assert optimised == [id(p) for p in head.model.head.parameters()]
    run.close()


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
    a, b = (tmp_path / name / "checkpoints" / "step-000004" for name in ("straight", "split"))
    assert_same(weights(a), weights(b))
    critics = []
    for ckpt in (a, b):
        critic = build_run(straight, torch.device("cpu")).critic
        template = critic.checkpoint_state()
        load_shards(ckpt, template)
        critics.append(template["critic"])
    assert_same(*critics)
    states = [load_checkpoint(c) for c in (a, b)]
    assert states[0]["history"] == states[1]["history"]
    assert states[0]["sampler"] == states[1]["sampler"]
    replays = [torch.load(c / "rank-0.pt", weights_only=True)["replay"]["items"] for c in (a, b)]
    assert len(replays[0]) == len(replays[1]) > 0

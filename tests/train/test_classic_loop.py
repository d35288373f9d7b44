"""The classic PPO loop end to end: smoke run, metrics, summary, resume, eval."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from ascent.algos import PolicyLossParams
from ascent.configfile import load_config
from ascent.errors import AscentError
from ascent.models.actor_critic import ActorCritic
from ascent.train import run_training
from ascent.train.checkpoint import load_checkpoint
from ascent.train.classic import make_optimizer, ppo_loss, ppo_update
from ascent.train.classic_rollout import Samples

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
METRICS = {
    "env_steps",
    "episode/count",
    "episode/return_mean",
    "episode/return_max",
    "episode/length_mean",
    "episode/return_last20",
    "loss/policy",
    "loss/value",
    "loss/total",
    "policy/entropy",
    "policy/approx_kl",
    "policy/clip_frac",
    "policy/clip_range",
    "value/explained_variance",
    "optim/grad_norm",
    "optim/lr_actor",
    "optim/lr_critic",
    "perf/sps",
}
SMALL = """
[run]
output_dir = "{out}"
name = "smoke"
threads = 1
[env]
id = "{env}"
num_envs = 4
[train]
total_timesteps = {steps}
rollout_steps = 32
batch_size = 64
update_epochs = 2
save_every = {save_every}
[logging]
progress = false
"""


def small_config(tmp_path: Path, steps: int = 256, env: str = "CartPole-v1", save_every: int = 0):
    path = tmp_path / "small.toml"
    path.write_text(
        SMALL.format(out=tmp_path / "runs", steps=steps, env=env, save_every=save_every)
    )
    return path


def test_smoke_run_of_256_steps_logs_every_metric_and_writes_a_summary(tmp_path, run_cli):
    code, out, err = run_cli("train", str(small_config(tmp_path)))
    assert code == 0, err
    run = tmp_path / "runs" / "smoke"
    lines = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert [x["step"] for x in lines] == [1, 2]  # 256 steps = 2 updates of 4 envs x 32 steps
    assert set(lines[0]) >= METRICS
    assert [x["env_steps"] for x in lines] == [128, 256]
    # Linear annealing over 2 updates: the full rate, then half of it.
    assert [x["optim/lr_actor"] for x in lines] == pytest.approx([3e-4, 1.5e-4])
    assert [x["optim/lr_critic"] for x in lines] == pytest.approx([1e-3, 5e-4])
    summary = json.loads((run / "summary.json").read_text())
    assert summary["env_steps"] == 256
    assert summary["solved_at_step"] is None
    assert summary["wall_s"] > 0
    assert 8 <= summary["last20_mean_return"] <= 100  # a barely trained CartPole policy
    assert (run / "checkpoints" / "step-000002").is_dir()
    assert "summary.json" in out


def test_eval_runs_greedy_episodes_and_prints_mean_and_std(tmp_path, run_cli):
    assert run_cli("train", str(small_config(tmp_path)))[0] == 0
    run = tmp_path / "runs" / "smoke"
    code, out, err = run_cli("eval", str(run), "--episodes", "3")
    assert code == 0, err
    assert "CartPole-v1: mean return" in out and "over 3 episodes" in out
    assert run_cli("eval", str(run), "--episodes", "3")[1] == out  # greedy: deterministic
    code, _, err = run_cli("eval", str(tmp_path))  # not a run directory
    assert code == 2 and "without config.toml" in err


def test_episodes_option_is_refused_for_an_llm_eval(tmp_path, run_cli):
    path = tmp_path / "llm.toml"
    path.write_text("[train]\ntotal_steps = 1\n")
    code, _, err = run_cli("eval", str(path), "--episodes", "3")
    assert code == 2 and "--episodes is for classic PPO runs" in err


def test_continuous_actions_train_on_pendulum(tmp_path):
    cfg = load_config(small_config(tmp_path, steps=128, env="Pendulum-v1"))
    summary = json.loads(run_training(cfg).read_text())
    assert summary["env_steps"] == 128
    state = load_checkpoint(tmp_path / "runs" / "smoke")
    assert "log_std" in state["agent"]


def test_resume_gives_the_weights_of_an_unbroken_run(tmp_path):
    # 4 updates in one go, checkpoints after updates 2 and 4.
    full = load_config(small_config(tmp_path, steps=512, save_every=2))
    run_training(full)
    run = tmp_path / "runs" / "smoke"
    # A copy killed right after the checkpoint of update 2, then resumed for 2 more updates.
    broken = tmp_path / "runs" / "broken"
    shutil.copytree(run, broken)
    shutil.rmtree(broken / "checkpoints" / "step-000004")
    (broken / "checkpoints" / "best.json").unlink()
    resumed_cfg = load_config(small_config(tmp_path, steps=512, save_every=2), ["run.name=broken"])
    run_training(resumed_cfg, resume=broken)
    a = load_checkpoint(run / "checkpoints" / "step-000004")
    b = load_checkpoint(broken / "checkpoints" / "step-000004")
    for key, value in a["agent"].items():
        torch.testing.assert_close(b["agent"][key], value, atol=1e-6, rtol=0)
    assert a["runner"]["env_steps"] == b["runner"]["env_steps"] == 512
    lines = (broken / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(x)["step"] for x in lines] == [1, 2, 3, 4]  # no update counted twice


def test_first_minibatch_of_an_update_has_ratio_one():
    """Before the first optimiser step pi == pi_old: no clipping, no KL, and with whitened
    advantages (mean 0) the surrogate -mean(ratio * A) is 0."""
    cfg = load_config(EXAMPLES / "ppo_cartpole.toml")
    torch.manual_seed(0)
    agent = ActorCritic(4, 2, continuous=False, hidden_sizes=(64, 64), activation="tanh")
    obs = torch.randn(64, 4)
    actions, logp = agent.sample(obs)
    mask = torch.ones(64, dtype=torch.bool)
    mask[5] = False  # an autoreset step: excluded from every term
    batch = Samples(
        obs, actions, logp, agent.value(obs).detach(), torch.randn(64), torch.randn(64), mask
    )
    loss, metrics = ppo_loss(agent, batch, cfg.train, PolicyLossParams(0.2, 0.2))
    assert float(metrics["loss/policy"]) == pytest.approx(0.0, abs=1e-6)
    assert float(metrics["policy/approx_kl"]) == pytest.approx(0.0, abs=1e-7)
    assert float(metrics["policy/clip_frac"]) == 0.0
    # value loss: 0.5 * mean over the 63 decision steps of (V - R)^2.
    err = (batch.values - batch.returns)[mask]
    assert float(metrics["loss/value"]) == pytest.approx(0.5 * float((err**2).mean()), rel=1e-5)
    expected = (
        metrics["loss/policy"] + 0.5 * metrics["loss/value"] - 0.01 * metrics["policy/entropy"]
    )
    assert float(loss.detach()) == pytest.approx(float(expected), rel=1e-6)


def test_a_non_finite_gradient_stops_classic_ppo_before_the_weights_take_it():
    cfg = load_config(EXAMPLES / "ppo_cartpole.toml")
    agent = ActorCritic(4, 2, continuous=False, hidden_sizes=(16,), activation="tanh")
    optimizer = make_optimizer(agent, cfg.optim)
    obs = torch.randn(64, 4)
    actions, logp = agent.sample(obs)
    poisoned = torch.full((64,), float("nan"))
    batch = Samples(obs, actions, logp, agent.value(obs).detach(), poisoned, torch.randn(64),
                    torch.ones(64, dtype=torch.bool))  # fmt: skip
    before = [p.detach().clone() for p in agent.parameters()]
    with pytest.raises(AscentError, match="the gradient is not finite"):
        ppo_update(agent, optimizer, batch, cfg.train, PolicyLossParams(0.2, 0.2))
    assert all(torch.equal(a, b) for a, b in zip(before, agent.parameters(), strict=True))


@pytest.mark.parametrize(
    ("target_offset", "expected_loss", "expected_frac"),
    [
        # old V = V + 1, clip 0.1: the clipped prediction is V + 0.9.
        # R = V + 3: unclipped (V - R)^2 = 9 beats clipped 2.1^2 = 4.41 -> 0.5 * 9 = 4.5.
        (3.0, 4.5, 0.0),
        # R = V - 3: clipped 3.9^2 = 15.21 beats 9 -> 0.5 * 15.21 = 7.605, clip active.
        (-3.0, 7.605, 1.0),
    ],
)
def test_value_clipping_keeps_the_pessimistic_error(target_offset, expected_loss, expected_frac):
    cfg = load_config(EXAMPLES / "ppo_cartpole.toml", ["train.clip_range_vf=0.1"])
    agent = ActorCritic(4, 2, continuous=False, hidden_sizes=(64, 64), activation="tanh")
    obs = torch.randn(8, 4)
    actions, logp = agent.sample(obs)
    values = agent.value(obs).detach()
    mask = torch.ones(8, dtype=torch.bool)
    batch = Samples(obs, actions, logp, values + 1.0, torch.zeros(8), values + target_offset, mask)
    _, metrics = ppo_loss(agent, batch, cfg.train, PolicyLossParams(0.2, 0.2))
    assert float(metrics["loss/value"]) == pytest.approx(expected_loss, rel=1e-4)
    assert float(metrics["value/clip_frac"]) == expected_frac


def test_optimizer_has_an_actor_and_a_critic_learning_rate():
    cfg = load_config(EXAMPLES / "ppo_cartpole.toml")
    agent = ActorCritic(4, 2, continuous=False, hidden_sizes=(64, 64), activation="tanh")
    actor, critic = make_optimizer(agent, cfg.optim).param_groups
    assert (actor["lr"], critic["lr"], actor["eps"]) == (3e-4, 1e-3, 1e-5)
    assert {id(p) for p in critic["params"]} == {id(p) for p in agent.critic.parameters()}


def test_orthogonal_init_gives_a_near_uniform_first_policy():
    agent = ActorCritic(4, 2, continuous=False, hidden_sizes=(64, 64), activation="tanh")
    logits = agent.actor(torch.randn(256, 4)).detach()
    assert float(logits.abs().max()) < 0.1  # policy head gain 0.01
    head = agent.actor[-1].weight.detach()
    rows = head @ head.T  # orthogonal rows scaled by the gain: 0.01^2 * I
    torch.testing.assert_close(rows, 1e-4 * torch.eye(2), atol=1e-6, rtol=0)


@pytest.mark.slow
def test_default_recipe_return_rises_from_about_20_to_above_200(tmp_path):
    cfg = load_config(
        EXAMPLES / "ppo_cartpole.toml",
        [f'run.output_dir="{tmp_path}"', "logging.progress=false"],
    )
    summary = json.loads(run_training(cfg).read_text())
    lines = [
        json.loads(x)
        for x in (tmp_path / "ppo_cartpole" / "metrics.jsonl").read_text().splitlines()
    ]
    assert lines[0]["episode/return_mean"] < 40  # a random CartPole policy lasts ~20 steps
    assert summary["last20_mean_return"] > 200


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_fast_recipe_solves_cartpole_within_100k_steps(tmp_path, seed):
    cfg = load_config(
        EXAMPLES / "ppo_cartpole_fast.toml",
        [f'run.output_dir="{tmp_path}"', f"run.seed={seed}", "logging.progress=false"],
    )
    summary = json.loads(run_training(cfg).read_text())
    assert summary["solved_at_step"] is not None and summary["solved_at_step"] <= 100_000
    assert summary["last20_mean_return"] >= 475

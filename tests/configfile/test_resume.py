"""Which settings a resume may change, and which its checkpoint cannot follow."""

from __future__ import annotations

from pathlib import Path

import pytest

from ascent.configfile import load_config
from ascent.configfile.resume import config_changes

CARTPOLE = Path(__file__).resolve().parents[2] / "examples" / "ppo_cartpole.toml"


def changes(*sets: str, path: Path | None = None) -> dict[str, str | None]:
    old, new = load_config(path), load_config(path, list(sets))
    return {change.key: change.refusal for change in config_changes(old, new)}


def test_the_same_config_has_no_changes_and_the_run_location_does_not_count():
    assert changes() == {}
    assert changes('run.name="elsewhere"', 'run.output_dir="/tmp/x"') == {}


@pytest.mark.parametrize(
    "setting",
    [
        "optim.lr=1e-4",
        "train.total_steps=99",
        "rollout.group_size=4",
        "optim.betas=[0.8, 0.99]",
        "logging.progress=false",
        "rollout.temperature=0.7",
    ],
)
def test_settings_that_steer_what_comes_next_are_named_not_refused(setting):
    key = setting.split("=")[0]
    assert changes(setting) == {key: None}


@pytest.mark.parametrize(
    ("setting", "why"),
    [
        ('model.name_or_path="ascent:tiny"', "model's weights"),
        ("model.lora.enabled=true", "LoRA"),
        ("run.seed=7", "random streams"),
        ("data.arithmetic.digits=3", "prompt order"),
        ("data.eval_size=100", "held-out set"),
    ],
)
def test_settings_a_checkpoint_holds_are_refused_with_the_reason(setting, why):
    refused = {k: v for k, v in changes(setting).items() if v}
    assert list(refused) == [setting.split("=")[0]]
    assert why in refused[setting.split("=")[0]]


def test_a_critic_added_by_the_estimator_is_refused():
    got = changes('algorithm.advantage="gae"')
    assert got["critic"] == "the checkpoint holds no critic"
    assert got["algorithm.advantage"] is None  # the estimator itself may change: rloo <-> grpo
    assert changes('algorithm.advantage="rloo"') == {"algorithm.advantage": None}


def test_classic_ppo_refuses_another_environment_or_network_shape():
    assert "old environment" in changes('env.id="Acrobot-v1"', path=CARTPOLE)["env.id"]
    assert "old shape" in changes("model.hidden_sizes=[32]", path=CARTPOLE)["model.hidden_sizes"]
    assert changes("optim.lr_actor=1e-4", path=CARTPOLE) == {"optim.lr_actor": None}


def test_another_kind_of_run_is_refused():
    old, new = load_config(CARTPOLE), load_config(None)
    (change,) = config_changes(old, new)
    assert (change.key, change.old, change.new) == ("kind", "classic PPO", "LLM")
    assert change.refusal

"""Classic PPO config: SPEC defaults, batch arithmetic, env checks, settings.json merge."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from gymnasium import spaces

from ascent.config.classic import ClassicOptimSection, ClassicTrainSection, EnvSection
from ascent.configfile import load_config
from ascent.errors import ConfigError
from ascent.gym_envs import unsupported_space
from ascent.rules import ClassicConfig

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def write(directory: Path, text: str, name: str = "run.toml") -> Path:
    path = directory / name
    path.write_text(text)
    return path


def classic(tmp_path: Path, extra: str = "") -> Path:
    return write(tmp_path, f'[env]\nid = "CartPole-v1"\n{extra}')


def test_defaults_are_the_spec_classic_ppo_defaults(tmp_path):
    cfg = load_config(classic(tmp_path))
    assert isinstance(cfg, ClassicConfig)
    t, o = cfg.train, cfg.optim
    assert (t.total_timesteps, t.rollout_steps, t.update_epochs, t.batch_size) == (
        20000,
        2048,
        10,
        64,
    )
    assert (t.gamma, t.gae_lambda, t.clip_range) == (0.99, 0.95, 0.2)
    assert (t.entropy_coef, t.value_coef, t.max_grad_norm) == (0.01, 0.5, 0.5)
    assert (o.lr_actor, o.lr_critic, o.eps) == (3e-4, 1e-3, 1e-5)
    assert cfg.run.seed == 42
    assert cfg.num_updates == 10  # 20000 / 2048 rounded up to whole rollouts


def test_example_recipe_spells_out_the_defaults():
    cfg = load_config(EXAMPLES / "ppo_cartpole.toml")
    assert cfg.train == ClassicTrainSection()
    assert cfg.optim == ClassicOptimSection()
    assert cfg.env == EnvSection()


def test_fast_recipe_loads_and_stops_when_solved():
    cfg = load_config(EXAMPLES / "ppo_cartpole_fast.toml")
    assert cfg.train.stop_when_solved
    assert cfg.solved_return == 475.0  # CartPole-v1's registered reward_threshold
    assert cfg.transitions_per_update % cfg.train.batch_size == 0


def test_rollout_not_a_multiple_of_batch_size_proposes_valid_sizes(tmp_path):
    # 2048 x 1 = 2048 transitions; divisors of 2048 nearest 100 are 64 and 128; rollout_steps
    # must be a multiple of 100: 2000 or 2100.
    with pytest.raises(ConfigError) as err:
        load_config(classic(tmp_path, "[train]\nbatch_size = 100\n"))
    message = str(err.value)
    assert "2048 x 1 = 2048 transitions per update is not a multiple of batch_size (100)" in message
    assert "try batch_size = 64 or 128 or rollout_steps = 2000 or 2100" in message
    assert "\n" not in message


def test_batch_arithmetic_counts_every_env(tmp_path):
    # 100 x 3 = 300; divisors of 300 nearest 64 are 60 and 75; 3 * rollout_steps must be a
    # multiple of 64, so rollout_steps a multiple of 64: 64 or 128.
    text = "[env]\nnum_envs = 3\n[train]\nrollout_steps = 100\nbatch_size = 64\n"
    with pytest.raises(ConfigError, match="try batch_size = 60 or 75 or rollout_steps = 64 or 128"):
        load_config(write(tmp_path, text))


def test_total_timesteps_below_one_rollout_is_refused(tmp_path):
    with pytest.raises(ConfigError, match=r"less than one rollout .* = 2048"):
        load_config(classic(tmp_path, "[train]\ntotal_timesteps = 100\n"))


def test_unknown_env_id_is_a_one_line_error_with_exit_code_2(tmp_path, run_cli):
    path = write(tmp_path, '[env]\nid = "CartPol-v1"\n')
    code, _, err = run_cli("config", "show", str(path))
    assert code == 2
    assert err.count("\n") == 1
    assert "'CartPol-v1' is not a registered gymnasium environment" in err
    assert "CartPole" in err  # gymnasium's did-you-mean


def test_env_whose_observation_space_the_agent_cannot_handle_names_the_space(tmp_path, run_cli):
    runs = tmp_path / "runs"
    path = write(tmp_path, f'[run]\noutput_dir = "{runs}"\n[env]\nid = "FrozenLake-v1"\n')
    code, _, err = run_cli("train", str(path))
    assert code == 2
    assert err.count("\n") == 1
    assert "observation space Discrete(16) is not supported" in err
    assert not runs.exists()  # refused before any run directory is made


def test_unsupported_action_spaces_are_named():
    box = spaces.Box(-1.0, 1.0, (3,))
    assert unsupported_space(box, spaces.Discrete(4)) is None
    assert unsupported_space(box, spaces.Box(-2.0, 2.0, (2,))) is None
    message = unsupported_space(box, spaces.MultiDiscrete([2, 3]))
    assert message is not None and "action space MultiDiscrete([2 3])" in message
    assert "Box(" in (unsupported_space(box, spaces.Box(0.0, 1.0, (2, 2))) or "")


def test_stop_when_solved_needs_a_threshold(tmp_path):
    text = '[env]\nid = "Pendulum-v1"\n[train]\nstop_when_solved = true\n'
    with pytest.raises(
        ConfigError, match="has no reward_threshold, so set \\[train\\] solved_return"
    ):
        load_config(write(tmp_path, text))
    ok = load_config(write(tmp_path, text + "solved_return = -200.0\n"))
    assert ok.solved_return == -200.0


def test_sampling_completions_is_refused_for_classic_runs(tmp_path):
    with pytest.raises(ConfigError, match="no completions to sample"):
        load_config(classic(tmp_path, "[logging]\nsample_every = 5\n"))


def test_settings_json_fills_run_and_the_toml_wins(tmp_path):
    settings = {"output_dir": "elsewhere", "device": "cpu", "deterministic": True, "threads": 1}
    write(tmp_path, json.dumps(settings), "settings.json")
    path = classic(tmp_path, '[run]\ndevice = "auto"\n')
    cfg = load_config(path)
    assert cfg.run.device == "auto"  # given in the TOML: the TOML wins
    assert (cfg.run.output_dir, cfg.run.deterministic, cfg.run.threads) == ("elsewhere", True, 1)
    assert load_config(path, ["run.threads=2"]).run.threads == 2  # so does --set


def test_config_show_prints_the_merged_settings_and_where_they_came_from(tmp_path, run_cli):
    write(tmp_path, '{"deterministic": true, "device": "cpu"}', "settings.json")
    code, out, _ = run_cli("config", "show", str(classic(tmp_path, '[run]\ndevice = "auto"\n')))
    assert code == 0
    assert "deterministic = true" in out and 'device = "auto"' in out
    head = [line for line in out.splitlines() if line.startswith("# run.")]
    assert head == [
        f"# run.deterministic = true from {tmp_path / 'settings.json'}",
        f'# run.device = "cpu" from {tmp_path / "settings.json"} (overridden by the TOML)',
    ]


def test_settings_json_applies_only_beside_the_config(tmp_path):
    (tmp_path / "sub").mkdir()
    write(tmp_path, '{"deterministic": true}', "settings.json")
    assert not load_config(classic(tmp_path / "sub")).run.deterministic


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('{"checkpoint_dir": "ckpt"}', "unknown key 'checkpoint_dir'"),
        ('{"devise": "cpu"}', "did you mean 'device'"),
        ("{device: cpu}", "invalid JSON"),
        ('["cpu"]', "expected a JSON object"),
        ('{"device": "tpu"}', "[run] device"),
    ],
)
def test_bad_settings_json_is_a_one_line_config_error(tmp_path, text, expected):
    write(tmp_path, text, "settings.json")
    with pytest.raises(ConfigError) as err:
        load_config(classic(tmp_path))
    assert expected in str(err.value)
    assert "\n" not in str(err.value)

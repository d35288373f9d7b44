"""Config loading: defaults, overrides, and one-line errors (exit 2) for every bad input."""

from __future__ import annotations

from pathlib import Path

import pytest

from ascent.configfile import load_config
from ascent.configfile.loader import tomllib  # tomllib on 3.11+, tomli on 3.10
from ascent.errors import ConfigError
from ascent.rules import ClassicConfig, LLMConfig

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def write(tmp_path: Path, text: str, name: str = "run.toml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_builtin_default_loads_without_a_file():
    cfg = load_config(None)
    assert isinstance(cfg, LLMConfig)
    assert cfg.model.name_or_path.startswith("ascent:tiny")  # a built-in model, no download


def test_empty_file_gets_every_default_and_its_stem_as_run_name(tmp_path):
    cfg = load_config(write(tmp_path, "", "my-exp.toml"))
    assert cfg.run.name == "my-exp"
    assert cfg.algorithm.advantage == "grpo"
    assert cfg.algorithm.kl_coef == 0.001  # R1-Zero reference value from SPEC.md
    assert cfg.rollout.group_size == 8


def test_env_section_selects_a_classic_run(tmp_path):
    cfg = load_config(write(tmp_path, '[env]\nid = "CartPole-v1"\n'))
    assert isinstance(cfg, ClassicConfig)


def test_set_overrides_parse_values_as_toml(tmp_path):
    cfg = load_config(
        write(tmp_path, "[optim]\nlr = 1e-6\n"),
        ["optim.lr=3e-5", "model.name_or_path=Qwen/Qwen2.5-0.5B", "optim.betas=[0.9, 0.95]"],
    )
    assert cfg.optim.lr == pytest.approx(3e-5)
    assert cfg.model.name_or_path == "Qwen/Qwen2.5-0.5B"  # a bare word becomes a string
    assert cfg.optim.betas == (0.9, 0.95)


def test_config_is_frozen():
    cfg = load_config(None)
    with pytest.raises(ValueError):
        cfg.optim.lr = 1.0  # a run never mutates its config


@pytest.mark.parametrize(
    ("text", "overrides", "expected"),
    [
        ("a = 1\n[b\n", [], ["TOML syntax error", "line 2, column 3"]),
        ("[optimm]\nlr = 1\n", [], ["unknown section [optimm]", "did you mean [optim]"]),
        ("[optim]\nlrr = 1e-5\n", [], ["unknown key 'lrr' in [optim]", "did you mean 'lr'"]),
        ("[rollout]\nasinc = true\n", [], ["did you mean 'async'", "workers, async, max_"]),
        ('[optim]\nlr = "fast"\n', [], ["[optim] lr", "number", '"fast"']),
        ("[optim]\nlr = -1\n", [], ["[optim] lr", "greater than 0"]),
        (
            "[rollout]\ngroup_size = 6\n[train]\nbatch_size = 64\n",
            [],
            ["group_size (6) must divide batch_size (64)", "group_size 4 or 8"],
        ),
        (
            "[train]\nbatch_size = 64\nmicro_batch_size = 24\n",
            [],
            ["micro_batch_size", "must divide", "try 16 or 32"],
        ),
        (
            '[algorithm]\nadvantage = "grop"\n',
            [],
            ["unknown advantage estimator 'grop'", "did you mean 'grpo'", "dr_grpo, gae, grpo"],
        ),
        ('[algorithm]\nloss_agg = "mean"\n', [], ["unknown loss aggregation 'mean'", "token_mean"]),
        ("[algorithm]\nlam = 0.9\n", [], ["[algorithm] lam", "does not use it"]),
        ('[model]\ndtype = "f32"\n', [], ["[model] dtype", "'float32'", '"f32"']),
        ("", ["rollout.group_size=1"], ["group_size must be at least 2", "(from --set)"]),
        ("", ["optimx.lr=1"], ["unknown section [optimx]", "(from --set)"]),
        ("", ["optim.lr"], ["expected section.key=value"]),
    ],
)
def test_bad_config_gives_one_line_naming_file_key_and_fix(tmp_path, text, overrides, expected):
    path = write(tmp_path, text, "bad.toml")
    with pytest.raises(ConfigError) as info:
        load_config(path, overrides)
    message = str(info.value)
    assert "\n" not in message
    if "section.key=value" not in message:
        assert message.startswith(str(path))
    for part in expected:
        assert part in message, message


def test_missing_file_names_the_path(tmp_path):
    with pytest.raises(ConfigError, match=r"nope\.toml: config file not found"):
        load_config(tmp_path / "nope.toml")


@pytest.mark.parametrize(
    "args",
    [
        ["config", "show", "{bad}"],
        ["config", "show", "--set", "optim.lr=-1"],
        ["train", "{bad}"],
    ],
)
def test_cli_prints_one_line_and_exits_2_without_traceback(tmp_path, run_cli, args):
    bad = write(tmp_path, "[optim]\nlrr = 1\n", "bad.toml")
    code, out, err = run_cli(*[a.replace("{bad}", str(bad)) for a in args])
    assert code == 2
    assert err.startswith("error: ")
    assert err.count("\n") == 1
    assert "Traceback" not in out + err


def test_debug_flag_shows_the_traceback(tmp_path):
    from ascent.cli import main

    bad = write(tmp_path, "[optim]\nlrr = 1\n", "bad.toml")
    with pytest.raises(ConfigError):
        main(["--debug", "config", "show", str(bad)])


def test_config_show_prints_resolved_toml_that_loads_back(tmp_path, run_cli):
    path = write(tmp_path, "[optim]\nlr = 2e-6\n", "exp.toml")
    code, out, _ = run_cli("config", "show", str(path), "--set", "train.total_steps=7")
    assert code == 0
    data = tomllib.loads(out)
    assert data["optim"]["lr"] == pytest.approx(2e-6)
    assert data["train"]["total_steps"] == 7
    assert data["run"]["name"] == "exp"
    reloaded = load_config(write(tmp_path, out, "again.toml"))
    assert reloaded.model_dump() == load_config(path, ["train.total_steps=7"]).model_dump()


@pytest.mark.parametrize("example", sorted(EXAMPLES.glob("*.toml")), ids=lambda p: p.name)
def test_every_example_config_shows(example, run_cli):
    code, out, err = run_cli("config", "show", str(example))
    assert code == 0, err
    assert tomllib.loads(out)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("train", "--no-such-flag"), "No such option: --no-such-flag"),
        (("no-such-command",), "No such command 'no-such-command'"),
        (("train", "--set"), "Option '--set' requires an argument"),
    ],
)
def test_command_line_mistakes_get_a_usage_error_not_a_traceback(run_cli, args, message):
    code, _, err = run_cli(*args)
    assert code == 2 and message in err
    assert "Traceback" not in err and err.startswith(("Usage: ascent", "Error:"))

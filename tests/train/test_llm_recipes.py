"""The shipped LLM recipes: each loads, the tiny ones train, the embedded default lifts accuracy."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ascent.config import LLMConfig, load_config

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.mark.parametrize("name", ["grpo_tiny.toml", "grpo.toml"])
def test_example_recipes_load(name):
    assert isinstance(load_config(EXAMPLES / name), LLMConfig)


def test_embedded_default_is_the_tiny_warm_start_on_arithmetic_on_cpu():
    cfg = load_config(None)
    assert cfg.model.name_or_path == "ascent:tiny-arithmetic"
    assert (cfg.data.task, cfg.run.device, cfg.algorithm.advantage) == ("arithmetic", "cpu", "grpo")


@pytest.mark.parametrize("config", [None, EXAMPLES / "grpo_tiny.toml"])
def test_tiny_recipes_run_a_few_steps_from_the_command_line(run_cli, tmp_path, config):
    args = ["train"] + ([str(config)] if config else [])
    short = ["train.total_steps=3", "train.eval_steps=3", "train.save_steps=3", "data.eval_size=20"]
    sets = [f"--set={s}" for s in [*short, f'run.output_dir="{tmp_path}"']]
    code, out, err = run_cli(*args, *sets)
    assert code == 0, err
    assert "held-out accuracy before RL" in out and "held-out accuracy after RL" in out
    summary_path = Path(out.strip().splitlines()[-1].split("summary: ", 1)[1])
    summary = json.loads(summary_path.read_text())
    assert summary["steps"] == 3


@pytest.mark.slow
def test_embedded_default_lifts_held_out_accuracy_by_30_points(run_cli, tmp_path, request):
    """`ascent train` as shipped (about 4 minutes on 2 cores): run it with `pytest -m slow`."""
    selected = request.config.getoption("markexpr") or ""
    if "slow" not in selected or "not slow" in selected:
        pytest.skip("minutes long: run with -m slow")
    code, _, err = run_cli("train", f'--set=run.output_dir="{tmp_path}"')
    assert code == 0, err
    summary = json.loads((tmp_path / "tiny-grpo" / "summary.json").read_text())
    lift = summary["eval_accuracy_after"] - summary["eval_accuracy_before"]
    assert lift >= 0.30, summary

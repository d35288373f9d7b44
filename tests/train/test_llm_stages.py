"""Staged training: stage 2 starts from stage 1's final weights, with its own settings."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch

from ascent.rundir import RunDir, latest_checkpoint
from ascent.train import llm
from ascent.train.llm import train_llm
from tests.train.test_llm_loop import assert_same, config, weights

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

STAGES = (
    'stages=[{name="short", train={total_steps=2}, rollout={max_new_tokens=4}},'
    ' {name="long", train={total_steps=3}, rollout={max_new_tokens=5}, data={seed=7}}]'
)


def test_stage_two_starts_from_stage_one_final_weights_with_its_own_settings(tmp_path, monkeypatch):
    built = []
    original = llm.build_run

    def recording(cfg, dist):
        run = original(cfg, dist)
        built.append((cfg, {k: v.clone() for k, v in run.actor.model.state_dict().items()}))
        return run

    monkeypatch.setattr(llm, "build_run", recording)
    cfg = config(tmp_path, STAGES, "train.eval_steps=1", "train.save_steps=1")
    summary = train_llm(cfg, RunDir.create(cfg))

    (cfg1, start1), (cfg2, start2) = built
    first, second = summary["stages"]
    final1 = weights(latest_checkpoint(Path(first["run_dir"])))  # stage 1's last checkpoint
    assert_same(start2, final1, atol=0)  # stage 2 begins exactly where stage 1 ended
    assert any(not torch.equal(start1[k], final1[k]) for k in final1)  # and stage 1 trained
    assert cfg2.model.name_or_path == first["final_model"]
    assert (cfg1.rollout.max_new_tokens, cfg2.rollout.max_new_tokens) == (4, 5)
    assert (cfg1.train.total_steps, cfg2.train.total_steps) == (2, 3)
    assert (cfg1.data.seed, cfg2.data.seed) == (None, 7)
    written = tomllib.loads((Path(second["run_dir"]) / "config.toml").read_text())
    assert written["model"]["name_or_path"] == first["final_model"]

    assert summary["steps"] == 5 and [s["steps"] for s in summary["stages"]] == [2, 3]
    assert summary["eval_accuracy_before"] == first["eval_accuracy_before"]
    assert summary["eval_accuracy_after"] == second["eval_accuracy_after"]
    on_disk = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert on_disk["stages"][1]["name"] == "long"


def test_a_stage_ends_on_a_plateau_and_the_summary_says_why(tmp_path):
    stages = (
        'stages=[{name="math", train={total_steps=8, eval_steps=2, save_steps=2, '
        'plateau_patience=2, plateau_min_delta=10.0}}, {name="code", train={total_steps=2}}]'
    )
    cfg = config(tmp_path, stages)
    summary = train_llm(cfg, RunDir.create(cfg))
    first, second = summary["stages"]
    # a rise of 10 never comes: the 2nd evaluation after the one before RL ends the stage
    assert (first["ended"], first["steps"]) == ("plateau", 4)
    assert (second["ended"], second["steps"]) == ("total_steps", 2)
    assert Path(first["final_model"]).is_dir()  # stage 2 starts from where stage 1 stopped


def test_plateau_settings_need_evaluations():
    import pytest

    from ascent.configfile import load_config
    from ascent.errors import ConfigError

    with pytest.raises(ConfigError, match="plateau_patience: a plateau is judged on evaluations"):
        load_config(None, ["train.plateau_patience=3", "train.eval_steps=0", "train.save_steps=0"])
    with pytest.raises(ConfigError, match="plateau_min_delta: plateau_patience is 0"):
        load_config(None, ["train.plateau_min_delta=0.1"])


def test_a_stage_draws_from_weighted_sources_and_reports_accuracy_per_source(tmp_path, monkeypatch):
    drawn: dict[str, list[str]] = {}
    original = llm.build_run

    def recording(cfg, dist):
        run = original(cfg, dist)
        draw = run.rollouts.sampler.draw

        def spy(n):
            out = draw(n)
            drawn.setdefault(cfg.run.name, []).extend(d.problem.source for d in out)
            return out

        run.rollouts.sampler.draw = spy
        return run

    monkeypatch.setattr(llm, "build_run", recording)
    sources = (
        '[{name="add", weight=3, train_size=64, eval_size=12},'
        ' {name="sub", weight=1, train_size=32, eval_size=8, arithmetic={operators=["-"]}}]'
    )
    stages = f'stages=[{{name="one"}}, {{name="mixed", data={{sources={sources}}}}}]'
    cfg = config(tmp_path, stages, "train.total_steps=2", "train.eval_steps=2")
    summary = train_llm(cfg, RunDir.create(cfg))

    first, second = summary["stages"]
    assert set(drawn["01-one"]) == {""}  # stage 1: the top level's one task
    # 2 steps x 2 prompts (16 completions in groups of 8): 3 "add" for each "sub"
    assert sorted(drawn["02-mixed"]) == ["add", "add", "add", "sub"]
    assert "eval_accuracy_by_source" not in first and second["eval_problems"] == 20
    by_source = second["eval_accuracy_by_source"]
    assert set(by_source) == {"add", "sub"}
    rows = Path(second["run_dir"], "metrics.jsonl").read_text().splitlines()
    last = json.loads(rows[-1])
    assert by_source["sub"]["after"] == last["eval/sub/accuracy"]
    samples = Path(second["run_dir"], "samples", "eval-step-000002.jsonl").read_text().splitlines()
    assert {json.loads(s)["source"] for s in samples} == {"add", "sub"}

"""A run directory is data: `ascent eval RUN_DIR` and `ascent data grade --policy RUN_DIR`
never take `trust_remote_code` from it, so a shared or tampered run's Python never runs
unless the command at hand asks for it, and Python files in its model are named."""

from __future__ import annotations

import json

from ascent.configfile import dump_config, load_config, load_run_config
from ascent.evaluation.policy import load_local_policy
from ascent.models import build_tiny_model

# Imported by transformers only if it trusts the directory's code: it leaves a mark.
EVIL = """
from pathlib import Path

from transformers import LlamaForCausalLM

Path({marker!r}).write_text("the run directory's code ran")


class EvilModel(LlamaForCausalLM):
    pass
"""


def tampered_run(root):
    run = root / "run"
    model_dir = run / "final-model"
    model, tokenizer = build_tiny_model()
    model.save_pretrained(model_dir)
    tokenizer.save_pretrained(model_dir)
    (model_dir / "evil.py").write_text(EVIL.format(marker=str(model_dir / "ran.txt")))
    config = json.loads((model_dir / "config.json").read_text())
    config["auto_map"] = {"AutoModelForCausalLM": "evil.EvilModel"}
    (model_dir / "config.json").write_text(json.dumps(config))
    cfg = load_config(None, [f'run.output_dir="{root}"', "run.name=run",
                             "model.trust_remote_code=true", 'run.device="cpu"'])  # fmt: skip
    (run / "config.toml").write_text(dump_config(cfg))
    return run, model_dir


def test_trust_remote_code_is_not_taken_from_a_run_directory(tmp_path, capsys):
    run, model_dir = tampered_run(tmp_path)
    cfg, warnings = load_run_config(run)
    assert cfg.model.trust_remote_code is False
    assert len(warnings) == 1 and "--set model.trust_remote_code=true" in warnings[0]
    policy = load_local_policy(cfg, run, None)
    assert policy is not None and not (model_dir / "ran.txt").exists()
    err = capsys.readouterr().err
    assert "holds Python files (evil.py); they are not run" in err


def test_the_command_at_hand_may_trust_it_and_is_told_what_will_run(tmp_path, capsys):
    run, model_dir = tampered_run(tmp_path)
    cfg, warnings = load_run_config(run, ["model.trust_remote_code=true"])
    assert cfg.model.trust_remote_code is True and warnings == []
    load_local_policy(cfg, run, None)
    assert (model_dir / "ran.txt").exists()  # what the default keeps from happening
    assert "(evil.py); trust_remote_code is set for this command" in capsys.readouterr().err


def test_the_grade_command_reads_a_run_directory_the_same_way(tmp_path):
    from ascent.evaluation.grade import grading_config

    run, _ = tampered_run(tmp_path)
    cfg, run_dir = grading_config(run)
    assert run_dir == run and cfg.model.trust_remote_code is False


def test_a_run_config_whose_model_is_not_a_table_is_its_own_one_line_error(tmp_path, run_cli):
    (tmp_path / "config.toml").write_text("model = 1\n")
    code, _, err = run_cli("eval", str(tmp_path))
    assert code == 2 and err.count("\n") == 1
    assert "model must be a table of keys" in err and "--set" not in err

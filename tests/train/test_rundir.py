"""The run directory is never overwritten by accident; resume needs a real checkpoint."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ascent.configfile import load_config
from ascent.configfile.loader import tomllib  # tomllib on 3.11+, tomli on 3.10
from ascent.errors import AscentError, ConfigError
from ascent.rundir import RunDir
from ascent.train.checkpoint import save_checkpoint


@pytest.fixture
def cfg(tmp_path):
    return load_config(None, [f'run.output_dir="{tmp_path}"', "run.name=exp"])


def test_create_writes_the_resolved_config(cfg, tmp_path):
    run_dir = RunDir.create(cfg)
    assert run_dir.path == tmp_path / "exp"
    saved = tomllib.loads(run_dir.config_path.read_text())
    assert saved["run"]["name"] == "exp"


def test_existing_run_is_refused_without_resume_or_overwrite(cfg):
    RunDir.create(cfg)
    with pytest.raises(AscentError, match="already exists; pass --resume"):
        RunDir.create(cfg)


def test_overwrite_replaces_the_old_run(cfg):
    first = RunDir.create(cfg)
    (first.path / "old.txt").write_text("x")
    second = RunDir.create(cfg, overwrite=True)
    assert not (second.path / "old.txt").exists()


def test_overwrite_never_deletes_a_directory_that_is_not_a_run(tmp_path):
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "thesis.tex").write_text("years of work")
    cfg = load_config(None, [f'run.output_dir="{tmp_path}"', "run.name=victim"])
    with pytest.raises(AscentError, match=r"is not a run directory .* deletes only its own runs"):
        RunDir.create(cfg, overwrite=True)
    assert (victim / "thesis.tex").read_text() == "years of work"


@pytest.mark.parametrize(
    "name", [".", "..", "../victim", "../../x", "a/b", "a\\b", "x\0y", "r" * 256, "é" * 128]
)
def test_a_run_name_is_one_directory_name_never_a_path(tmp_path, name):
    with pytest.raises(ConfigError, match=r"\[run\] name: .* is not a directory name"):
        load_config(None, [f'run.output_dir="{tmp_path}"', f"run.name={json.dumps(name)}"])
    assert list(tmp_path.iterdir()) == []


def test_names_that_are_one_directory_are_accepted(tmp_path):
    for name in ("exp", "v1.2", "..hidden-ish", "r" * 255, "grpo run 3"):
        cfg = load_config(None, [f'run.output_dir="{tmp_path}"', f"run.name={json.dumps(name)}"])
        assert RunDir.create(cfg).path == tmp_path / name


def test_resume_points_at_the_latest_checkpoint(cfg):
    run_dir = RunDir.create(cfg)
    save_checkpoint(run_dir.checkpoints, 4, {})
    resumed = RunDir.create(cfg, resume=run_dir.path)
    assert resumed.resume_from.name == "step-000004" and resumed.resuming


def test_resuming_a_run_killed_before_its_first_checkpoint_starts_it_again(cfg, capsys):
    run_dir = RunDir.create(cfg)
    run_dir.metrics_path.write_text('{"step": 1}\n{"step": 2, "ti')  # cut by the kill
    (run_dir.samples_dir).mkdir()
    (run_dir.samples_dir / "step-000001.jsonl").write_text("{}\n")
    again = RunDir.create(cfg, resume=run_dir.path)
    assert again.resume_from is None and again.path == run_dir.path
    assert not run_dir.metrics_path.exists() and not run_dir.samples_dir.exists()
    assert "no checkpoint yet; starting it again from step 0" in capsys.readouterr().out
    assert run_dir.config_path.is_file()


def test_a_run_killed_between_its_lock_and_its_config_does_not_block_the_same_command(cfg):
    """Killed after taking its lock and before writing config.toml, a run leaves a directory
    holding a lone `.lock` that nobody holds: the same command starts afresh in it (not
    "already exists", and not --overwrite's "not a run directory")."""
    path = Path(cfg.run.output_dir) / cfg.run.name
    path.mkdir()
    (path / ".lock").write_text("4242\n")
    assert RunDir.check(cfg) == f"{path}: a new run directory"
    run_dir = RunDir.create(cfg)
    assert run_dir.config_path.is_file()
    assert (path / ".lock").read_text().strip() == str(os.getpid())
    # Anything beside the lock is someone's data: refused as before
    other = Path(cfg.run.output_dir) / "other"
    other.mkdir()
    (other / ".lock").write_text("")
    (other / "notes.txt").write_text("x")
    with pytest.raises(AscentError, match="already exists"):
        RunDir.create(
            load_config(None, [f'run.output_dir="{cfg.run.output_dir}"', "run.name=other"])
        )


def test_a_resume_hashes_its_checkpoint_once(cfg, monkeypatch):
    """The checkpoint's manifest is checked (every file hashed) once per resume: --resume of a
    large checkpoint should not read it twice before the run starts."""
    import ascent.rundir as rundir

    run_dir = RunDir.create(cfg)
    save_checkpoint(run_dir.checkpoints, 4, {})
    calls = []
    real = rundir.checkpoint_problem
    monkeypatch.setattr(rundir, "checkpoint_problem", lambda c: calls.append(c) or real(c))
    resumed = RunDir.create(cfg, resume=run_dir.path)
    assert resumed.resume_from.name == "step-000004"
    assert len(calls) == 1


def test_resuming_a_directory_that_is_no_run_is_refused(cfg, tmp_path):
    (tmp_path / "photos").mkdir()
    (tmp_path / "photos" / "cat.jpg").write_text("x")
    with pytest.raises(AscentError, match="not a run directory"):
        RunDir.create(cfg, resume=tmp_path / "photos")
    assert (tmp_path / "photos" / "cat.jpg").exists()


def test_resume_and_overwrite_together_are_refused(cfg, tmp_path):
    with pytest.raises(AscentError, match="contradict"):
        RunDir.create(cfg, resume=tmp_path, overwrite=True)


def test_summary_holds_the_run_paths(cfg):
    run_dir = RunDir.create(cfg)
    path = run_dir.write_summary({"steps": 3})
    data = json.loads(path.read_text())
    assert data["steps"] == 3
    assert data["paths"]["metrics"].endswith("metrics.jsonl")


def test_a_stage_name_is_one_directory_name_too(tmp_path):
    stages = 'stages=[{name="../escape", train={total_steps=2}}]'
    with pytest.raises(ConfigError, match=r"\[stages\] name: '../escape' is not a directory name"):
        load_config(None, [f'run.output_dir="{tmp_path}"', stages])


HOLDER = """
import sys
from ascent.configfile import load_config
from ascent.rundir import RunDir
RunDir.create(load_config(None, sys.argv[1:]))
print("running", flush=True)
sys.stdin.read()  # until the test closes our stdin
"""


def test_a_running_run_can_be_neither_overwritten_nor_resumed_by_another_process(cfg, tmp_path):
    overrides = [f'run.output_dir="{tmp_path}"', "run.name=exp"]
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, *overrides], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)  # fmt: skip
    try:
        assert holder.stdout.readline().strip() == "running"
        (tmp_path / "exp" / "metrics.jsonl").write_text('{"step": 1}\n')
        for attempt in ({"overwrite": True}, {"resume": tmp_path / "exp"}):
            with pytest.raises(
                AscentError, match=rf"in use by another ascent process \(PID {holder.pid}\)"
            ):
                RunDir.create(cfg, **attempt)
        assert (tmp_path / "exp" / "metrics.jsonl").read_text() == '{"step": 1}\n'  # untouched
    finally:
        holder.communicate(input="", timeout=60)
    assert RunDir.create(cfg, overwrite=True).path == tmp_path / "exp"  # free once it ended
    assert not (tmp_path / "exp" / "metrics.jsonl").exists()


def test_a_run_that_fails_while_setting_up_leaves_no_directory_behind(
    tmp_path, run_cli, monkeypatch
):
    """The corrected command must not be refused as "already exists"; a run that has logged a
    step keeps its directory (nothing it wrote is lost)."""
    from ascent.errors import AscentError
    from ascent.train import llm

    def broken(cfg, dist):
        raise AscentError("the reward could not start (simulated)")

    args = ["train", "--set", f'run.output_dir="{tmp_path}"', "--set", "train.total_steps=2",
            "--set", "train.eval_steps=0", "--set", "data.eval_size=8"]  # fmt: skip
    with monkeypatch.context() as patch:
        patch.setattr(llm, "build_run", broken)
        code, _, err = run_cli(*args)
    assert code == 2 and "simulated" in err
    assert not (tmp_path / "tiny-grpo").exists()
    code, _, err = run_cli(*args)  # the corrected command runs
    assert code == 0, err
    assert (tmp_path / "tiny-grpo" / "summary.json").is_file()


def test_out_of_memory_is_one_line_naming_the_settings_to_change(tmp_path, run_cli, monkeypatch):
    import torch

    from ascent.train.controller import Controller

    def oom(self, step):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 GiB")

    monkeypatch.setattr(Controller, "step", oom)
    code, _, err = run_cli("train", "--set", f'run.output_dir="{tmp_path}"', "--set",
                           "data.eval_size=8")  # fmt: skip
    assert code == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert "out of memory on cpu while training: lower [train] micro_batch_size (now 128)" in err
    assert "[rollout] max_new_tokens (now 6)" in err and "gradient_checkpointing = true" in err
    assert "--dry-run" in err

"""`ascent train --resume` under changed settings, end to end on the tiny model: what it
refuses, what it takes (and that a taken setting acts), and the record of each segment."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

SHORT = [
    "train.batch_size=16",
    "train.micro_batch_size=16",
    "train.eval_steps=2",
    "train.save_steps=2",
    "data.eval_size=16",
    "rollout.max_new_tokens=4",
    "logging.progress=false",
    "optim.schedule=constant",
]


def sets(*items: str) -> list[str]:
    return [arg for item in items for arg in ("--set", item)]


@pytest.fixture
def run(tmp_path, run_cli) -> Path:
    """A finished two-step run with a checkpoint at step 2 (and one setting off default)."""
    out = tmp_path / "runs"
    args = sets(
        *SHORT,
        f'run.output_dir="{out}"',
        "run.name=r",
        "train.total_steps=2",
        "rollout.group_size=4",
    )
    code, _out, err = run_cli("train", *args)
    assert code == 0, err
    return out / "r"


def metric_rows(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


def test_a_new_learning_rate_acts_from_the_first_resumed_step(run, run_cli):
    code, _out, err = run_cli(
        "train", "--resume", str(run), *sets("train.total_steps=4", "optim.lr=1e-3")
    )
    assert code == 0, err
    lrs = {row["step"]: row["lr"] for row in metric_rows(run)}
    assert lrs[1] == lrs[2] == pytest.approx(4e-5)  # the default, constant
    assert lrs[3] == lrs[4] == pytest.approx(1e-3)


def test_without_a_config_the_run_continues_as_configured_and_keeps_each_segment(run, run_cli):
    before = (run / "config.toml").read_text()
    code, out, err = run_cli("train", "--resume", str(run), *sets("train.total_steps=4"))
    assert code == 0, err
    assert f"note: {run} resumes from step-000002 with train.total_steps 2 -> 4" in out
    assert "group_size = 4" in (run / "config.toml").read_text()  # not the demo's 8
    assert [row["step"] for row in metric_rows(run)] == [1, 2, 3, 4]
    kept = (run / "config-history" / "segment-1.toml").read_text()
    assert kept.startswith("# the config of segment 1; the next resumed from step-000002 with")
    assert kept.endswith(before) and "total_steps = 2" in kept


def test_an_unchanged_resume_keeps_no_history(run, run_cli):
    code, _out, err = run_cli("train", "--resume", str(run))
    assert code == 0, err
    assert not (run / "config-history").exists()


@pytest.mark.parametrize(
    ("setting", "named"),
    [
        (
            'model.name_or_path="ascent:tiny"',
            "model.name_or_path 'ascent:tiny-arithmetic' -> "
            "'ascent:tiny' (the checkpoint holds the old model's weights)",
        ),
        ('algorithm.advantage="gae"', "critic 'none' -> 'yes' (the checkpoint holds no critic)"),
        ("run.seed=7", "run.seed 42 -> 7"),
        ("model.lora.enabled=true", "model.lora.enabled False -> True"),
    ],
)
def test_a_change_the_checkpoint_cannot_follow_is_refused_and_nothing_changes(
    run, run_cli, setting, named
):
    files = {p: p.read_bytes() for p in run.rglob("*") if p.is_file() and p.name != ".lock"}
    code, _out, err = run_cli("train", "--resume", str(run), *sets(setting))
    assert code == 2
    (line,) = err.strip().splitlines()
    assert line.startswith(f"error: --resume {run}: cannot continue under changed settings: ")
    assert named in line
    assert f"ascent train --resume {run}, no CONFIG" in line
    assert {p: p.read_bytes() for p in files} == files
    code, _out, err = run_cli("train", "--dry-run", "--resume", str(run), *sets(setting))
    assert code == 2 and named in err


def test_the_dry_run_names_the_settings_a_resume_takes(run, run_cli):
    code, out, err = run_cli("train", "--dry-run", "--resume", str(run), *sets("optim.lr=1e-3"))
    assert code == 0, err
    assert "resumes from step-000002 with optim.lr 4e-05 -> 0.001" in out

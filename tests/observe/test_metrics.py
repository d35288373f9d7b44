"""metrics.jsonl: valid JSON per line, resume drops replayed steps, trackers fail clearly."""

from __future__ import annotations

import json
import sys

import pytest

from ascent.config.run import LoggingSection
from ascent.configfile import load_config
from ascent.errors import AscentError
from ascent.observe.metrics import MetricsLogger
from ascent.observe.progress import TrainProgress
from ascent.rundir import RunDir


@pytest.fixture
def run_dir(tmp_path):
    return RunDir.create(load_config(None, [f'run.output_dir="{tmp_path}"']))


def lines(run_dir):
    return [json.loads(ln) for ln in run_dir.metrics_path.read_text().splitlines()]


def test_each_step_is_one_json_line_and_nan_becomes_null(run_dir):
    with MetricsLogger(run_dir, LoggingSection()) as log:
        log.log(1, {"reward": 0.5, "kl": float("nan")})
        log.log(2, {"reward": 0.75})
    rows = lines(run_dir)
    assert [r["step"] for r in rows] == [1, 2]
    assert rows[0]["kl"] is None and rows[1]["reward"] == 0.75


def test_log_every_thins_the_file(run_dir):
    with MetricsLogger(run_dir, LoggingSection(log_every=2)) as log:
        for step in range(1, 6):
            log.log(step, {"reward": float(step)})
    assert [r["step"] for r in lines(run_dir)] == [2, 4]


def test_resume_drops_steps_after_the_checkpoint_and_a_cut_line(run_dir):
    with MetricsLogger(run_dir, LoggingSection()) as log:
        for step in range(1, 5):
            log.log(step, {"reward": float(step)})
    with open(run_dir.metrics_path, "a") as fh:
        fh.write('{"step": 5, "rew')  # the process was killed mid-write
    with MetricsLogger(run_dir, LoggingSection(), resume_step=2) as log:
        log.log(3, {"reward": 30.0})
    assert [(r["step"], r["reward"]) for r in lines(run_dir)] == [(1, 1.0), (2, 2.0), (3, 30.0)]


def test_missing_tracker_package_names_the_extra(run_dir, monkeypatch):
    monkeypatch.setitem(sys.modules, "wandb", None)  # makes `import wandb` fail
    with pytest.raises(AscentError, match=r"pip install 'ascent\[trackers\]'"):
        MetricsLogger(run_dir, LoggingSection(trackers=["wandb"]))


def test_plain_progress_lines_when_not_a_terminal(capsys):
    with TrainProgress(10, {"reward": "reward", "kl": "kl"}) as bar:
        for step in range(1, 11):
            bar.update(step, {"reward": step / 10, "kl": 0.0004})
    out = capsys.readouterr().out
    assert "train 10/10" in out and "reward 1.000" in out and "kl 4.00e-04" in out

"""kill -9 at any moment loses nothing: a run SIGKILLed anywhere, the middle of writing a
checkpoint or a metrics line included, resumes with `--resume` and ends exactly as a run that
was never stopped: every step once in metrics.jsonl, a loadable final-model/, the same weights.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM

from ascent.configfile import load_config
from ascent.train import run_training
from tests.train.test_llm_loop import SHORT

PROJECT = Path(__file__).resolve().parents[2]
STEPS = 6  # the kill-point test; the random-kill test runs RANDOM_STEPS
RANDOM_STEPS = 120
SETTINGS = [*SHORT, "run.threads=1"]  # total_steps is set per test


def overrides(root: Path, name: str, steps: int = STEPS) -> list[str]:
    return [*SETTINGS, f"train.total_steps={steps}", f'run.output_dir="{root}"', f"run.name={name}"]


def launch(point: str, *ascent_args: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "tests.train.kill_points", point, *ascent_args],
        cwd=PROJECT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "TOKENIZERS_PARALLELISM": "false"},
    )


def train_args(root: Path, name: str, resume: bool, steps: int = STEPS) -> list[str]:
    sets = [arg for item in overrides(root, name, steps) for arg in ("--set", item)]
    return ["train", *sets, *(["--resume", str(root / name)] if resume else [])]


def assert_ends_like_an_unbroken_run(run: Path, straight: Path, steps: int = STEPS) -> None:
    logged = [json.loads(line)["step"] for line in (run / "metrics.jsonl").open()]
    assert logged == list(range(1, steps + 1))
    summary = json.loads((run / "summary.json").read_text())
    assert summary["steps"] == steps and not summary["interrupted"]
    model = AutoModelForCausalLM.from_pretrained(run / "final-model")
    assert model.num_parameters() > 0
    ours = load_file(run / "final-model" / "model.safetensors")
    theirs = load_file(straight / "final-model" / "model.safetensors")
    for key, value in theirs.items():
        assert torch.allclose(ours[key], value, atol=1e-6, rtol=0), key
    after = json.loads((straight / "summary.json").read_text())["eval_accuracy_after"]
    assert summary["eval_accuracy_after"] == after
    assert [p.name for p in run.rglob("*") if ".tmp" in p.name] == []  # no debris left


def unbroken(root: Path, steps: int) -> Path:
    """The same run, never stopped (run as `ascent train` runs it: threads, seeds)."""
    run_training(load_config(None, overrides(root, "straight", steps)))
    return root / "straight"


@pytest.mark.timeout(600)
def test_killed_at_every_kind_of_moment_the_run_resumes_to_the_same_end(tmp_path):
    kills = [
        "step:1",  # before the first checkpoint: --resume starts it again
        "checkpoint-write:2",  # state.pt half written
        "metrics-line:3",  # a line cut in half after the step-2 checkpoint
        "checkpoint-rename:4",  # a complete checkpoint not yet in place
        "step:5",  # between checkpoints: step 5 is logged again, once
        "export",  # after the last checkpoint, final-model/ half in place
    ]
    for i, point in enumerate(kills):
        proc = launch(point, *train_args(tmp_path, "killed", resume=i > 0))
        out, _ = proc.communicate(timeout=240)
        assert proc.returncode == -signal.SIGKILL, f"{point}: not killed\n{out}"
        assert "Traceback" not in out
    proc = launch("none", *train_args(tmp_path, "killed", resume=True))
    out, _ = proc.communicate(timeout=240)
    assert proc.returncode == 0, out
    assert_ends_like_an_unbroken_run(tmp_path / "killed", unbroken(tmp_path, STEPS))


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_killed_at_random_moments_the_run_resumes_to_the_same_end(tmp_path):
    rng = random.Random(20261203)
    kills = 0
    resume = False
    while True:
        proc = launch("none", *train_args(tmp_path, "random", resume, RANDOM_STEPS))
        resume = True
        try:
            out, _ = proc.communicate(timeout=rng.uniform(2.0, 9.0))
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGKILL)
            proc.communicate()
            kills += 1
            continue
        assert proc.returncode == 0, out
        break
    assert kills >= 3
    straight = unbroken(tmp_path, RANDOM_STEPS)
    assert_ends_like_an_unbroken_run(tmp_path / "random", straight, RANDOM_STEPS)

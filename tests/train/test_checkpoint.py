"""Checkpoints: atomic, pruned to the last K plus the best, and survivable mid-save kills."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest
import torch

from ascent.errors import AscentError
from ascent.rundir import best_checkpoint, latest_checkpoint, list_checkpoints
from ascent.train.checkpoint import (
    capture_rng_state,
    load_checkpoint,
    restore_rng_state,
    save_checkpoint,
)


def test_save_then_load_round_trips_tensors_and_counters(tmp_path):
    weights = {"w": torch.arange(6.0).reshape(2, 3)}
    save_checkpoint(tmp_path, 5, {"model": weights, "step": 5, "data_pos": 17})
    state = load_checkpoint(tmp_path)
    assert state["step"] == 5 and state["data_pos"] == 17
    assert torch.equal(state["model"]["w"], weights["w"])


def test_keeps_last_k_and_the_best_by_validation_metric(tmp_path):
    metrics = {1: 0.2, 2: 0.9, 3: 0.1, 4: 0.3, 5: 0.4}
    for step, metric in metrics.items():
        save_checkpoint(tmp_path, step, {"step": step}, metric=metric, keep_last=2)
    kept = [p.name for p in list_checkpoints(tmp_path)]
    assert kept == ["step-000002", "step-000004", "step-000005"]  # best (2) + last two
    assert best_checkpoint(tmp_path).name == "step-000002"
    assert latest_checkpoint(tmp_path).name == "step-000005"


def test_resaving_a_step_replaces_it(tmp_path):
    save_checkpoint(tmp_path, 3, {"v": 1})
    save_checkpoint(tmp_path, 3, {"v": 2})
    assert load_checkpoint(tmp_path)["v"] == 2
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".tmp")] == []


def test_write_extra_lands_inside_the_checkpoint(tmp_path):
    path = save_checkpoint(tmp_path, 1, {}, write_extra=lambda d: (d / "model.txt").write_text("x"))
    assert (path / "model.txt").read_text() == "x"


def test_loading_a_run_without_checkpoints_is_a_clear_error(tmp_path):
    with pytest.raises(AscentError, match="no complete checkpoint"):
        load_checkpoint(tmp_path)


@pytest.mark.timeout(60)
def test_killing_the_process_mid_save_leaves_the_previous_checkpoint_loadable(tmp_path):
    save_checkpoint(tmp_path, 1, {"v": torch.ones(3)})
    marker = tmp_path / "writing"
    script = textwrap.dedent(
        f"""
        import time, pathlib, torch
        from ascent.train.checkpoint import save_checkpoint
        def slow(d):
            (d / "model.bin").write_bytes(b"0" * 1000)
            pathlib.Path({str(marker)!r}).write_text("now")
            time.sleep(60)
        root = pathlib.Path({str(tmp_path)!r})
        save_checkpoint(root, 2, {{"v": torch.zeros(3)}}, write_extra=slow)
        """
    )
    proc = subprocess.Popen([sys.executable, "-c", script])
    deadline = time.time() + 30
    while not marker.exists() and time.time() < deadline:
        time.sleep(0.05)
    assert marker.exists(), "the child never reached the middle of its save"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert latest_checkpoint(tmp_path).name == "step-000001"
    assert torch.equal(load_checkpoint(tmp_path)["v"], torch.ones(3))
    # The next save cleans the half-written directory up.
    save_checkpoint(tmp_path, 3, {"v": torch.full((3,), 3.0)})
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".tmp")]


def test_rng_state_round_trip_reproduces_the_same_draws():
    state = capture_rng_state()
    first = (random.random(), np.random.rand(), torch.rand(2))
    restore_rng_state(state)
    second = (random.random(), np.random.rand(), torch.rand(2))
    assert first[0] == second[0] and first[1] == second[1]
    assert torch.equal(first[2], second[2])


def test_best_json_is_valid_json(tmp_path):
    save_checkpoint(tmp_path, 1, {}, metric=0.5)
    assert json.loads((tmp_path / "best.json").read_text()) == {"metric": 0.5, "step": 1}

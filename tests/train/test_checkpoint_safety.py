"""Checkpoints are data, never code: a hostile, truncated or foreign `state.pt` is refused in
one line by every command that loads one, and nothing in it runs."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
import torch

from ascent.configfile import load_config
from ascent.errors import AscentError
from ascent.rundir import MANIFEST_FILE, RunDir, latest_checkpoint
from ascent.train.checkpoint import STATE_FILE, check_plain, load_checkpoint, save_checkpoint
from ascent.train.llm import train_llm
from tests.train.test_llm_loop import SHORT


class Payload:
    """What an attacker ships: unpickling it runs a shell command."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def plant_payload(ckpt: Path, marker: Path) -> None:
    torch.save({"model": Payload(marker), "kind": "llm"}, ckpt / STATE_FILE)


def one_line(message: str) -> bool:
    return bool(message.strip()) and "\n" not in message.strip()


def test_a_pickle_payload_is_refused_and_never_runs(tmp_path):
    save_checkpoint(tmp_path, 1, {"kind": "llm", "model": {}})
    marker = tmp_path / "pwned"
    plant_payload(latest_checkpoint(tmp_path), marker)
    # The payload is real: an unrestricted load runs it.
    torch.load(latest_checkpoint(tmp_path) / STATE_FILE, weights_only=False)
    assert marker.exists()
    marker.unlink()
    with pytest.raises(AscentError) as err:
        load_checkpoint(tmp_path, "llm")
    assert not marker.exists()
    message = str(err.value)
    assert one_line(message) and STATE_FILE in message and "could run code" in message


@pytest.mark.parametrize("cut", [0, 10, 200])
def test_a_truncated_checkpoint_is_one_line_naming_the_file(tmp_path, cut):
    save_checkpoint(tmp_path, 1, {"kind": "llm", "model": {"w": torch.ones(64, 64)}})
    file = latest_checkpoint(tmp_path) / STATE_FILE
    file.write_bytes(file.read_bytes()[:cut])
    with pytest.raises(AscentError) as err:
        load_checkpoint(tmp_path, "llm")
    assert one_line(str(err.value)) and str(file) in str(err.value)
    assert "truncated" in str(err.value)


def test_a_checkpoint_of_another_kind_or_missing_parts_is_refused_by_name(tmp_path):
    save_checkpoint(tmp_path, 1, {"kind": "classic", "agent": {}})
    with pytest.raises(AscentError, match="a checkpoint of a classic run, but a llm run"):
        load_checkpoint(tmp_path, "llm")
    save_checkpoint(tmp_path, 2, {"kind": "llm"})
    with pytest.raises(AscentError, match=r"incomplete checkpoint \(no model, optimizer\)"):
        load_checkpoint(tmp_path, "llm", required=("model", "optimizer"))
    torch.save([1, 2, 3], latest_checkpoint(tmp_path) / STATE_FILE)
    with pytest.raises(AscentError, match="holds a list"):
        load_checkpoint(tmp_path, "llm")


def test_saving_anything_but_tensors_and_plain_values_is_refused(tmp_path):
    check_plain({"a": [1, 2.5, "x", None, (True, torch.zeros(2))], 3: {"b": torch.float32}})
    with pytest.raises(TypeError, match=r"state\['sampler'\]\['pool'\] is a numpy.ndarray"):
        save_checkpoint(tmp_path, 1, {"sampler": {"pool": __import__("numpy").arange(3)}})
    with pytest.raises(TypeError, match="Payload"):
        save_checkpoint(tmp_path, 1, {"x": [Payload(tmp_path / "m")]})
    assert latest_checkpoint(tmp_path) is None  # nothing half-written became visible


@pytest.fixture(scope="module")
def trained_run(tmp_path_factory) -> Path:
    """A finished 2-step tiny GRPO run with one checkpoint."""
    root = tmp_path_factory.mktemp("runs")
    overrides = [*SHORT, "train.total_steps=2", f'run.output_dir="{root}"', "run.name=shared"]
    cfg = load_config(None, overrides)
    train_llm(cfg, RunDir.create(cfg))
    return root / "shared"


def hostile_copy(trained_run: Path, tmp_path: Path) -> tuple[Path, Path]:
    """A copy of the run whose checkpoint carries the payload, without a final-model/ (so
    that serve and eval fall back to the checkpoint, as they do for an unfinished run)."""
    run = tmp_path / "shared-run"
    shutil.copytree(trained_run, run)
    shutil.rmtree(run / "final-model")
    marker = tmp_path / "pwned"
    plant_payload(latest_checkpoint(run), marker)
    return run, marker


@pytest.mark.parametrize(
    "command", ["serve", "train --resume", "train --resume, no manifest", "eval"]
)
def test_commands_on_a_run_dir_with_a_malicious_checkpoint_exit_2_in_one_line(
    trained_run, tmp_path, run_cli, command
):
    run, marker = hostile_copy(trained_run, tmp_path)
    if command.endswith("no manifest"):  # as a checkpoint from before manifests
        (latest_checkpoint(run) / MANIFEST_FILE).unlink()
    if command == "serve":
        args = ["serve", str(run), "--port", "0"]
    elif command == "eval":
        problems = 'eval.problems="ascent:gsm8k_test"'
        args = ["eval", str(run), "--set", "eval.policy=local", "--set", problems]
    else:
        args = ["train", str(run / "config.toml"), "--resume", str(run)]
    code, out, err = run_cli(*args)
    assert not marker.exists(), "the payload ran"
    assert code == 2, (out, err)
    assert one_line(err) and "Traceback" not in err + out
    if command == "train --resume":  # the manifest tells before anything is read
        assert f"{STATE_FILE}: " in err and "its manifest says" in err
    else:
        assert STATE_FILE in err and "could run code" in err

"""Each checkpoint carries a manifest of its files' sizes and hashes, so `--resume` knows
which to trust: a damaged newest checkpoint is passed over for the newest intact one, with a
note; damaged shards and a full disk are one line, never a traceback."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from ascent.configfile import load_config
from ascent.errors import AscentError
from ascent.rundir import MANIFEST_FILE, RunDir, checkpoint_problem, list_checkpoints
from ascent.train.checkpoint import save_checkpoint
from ascent.train.llm import train_llm
from tests.train.test_llm_loop import SHORT


def test_the_manifest_lists_every_file_with_its_size_and_hash(tmp_path):
    path = save_checkpoint(tmp_path, 3, {"kind": "llm", "w": torch.ones(8)})
    manifest = json.loads((path / MANIFEST_FILE).read_text())
    files = sorted(p.relative_to(path).as_posix() for p in path.rglob("*") if p.is_file())
    assert sorted(manifest["files"]) == [f for f in files if f != MANIFEST_FILE]
    import hashlib

    for name, entry in manifest["files"].items():
        data = (path / name).read_bytes()
        assert entry == {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    assert checkpoint_problem(path) is None


def test_each_kind_of_damage_is_named(tmp_path):
    path = save_checkpoint(tmp_path, 1, {"kind": "llm", "w": torch.ones(64)})
    state = path / "state.pt"
    original = state.read_bytes()
    state.write_bytes(original[:-3])
    assert checkpoint_problem(path) == (
        f"state.pt: {len(original) - 3} bytes, its manifest says {len(original)}"
    )
    state.write_bytes(original[:-1] + bytes([original[-1] ^ 1]))
    assert checkpoint_problem(path) == "state.pt: its contents changed since it was written"
    state.unlink()
    assert checkpoint_problem(path) == "state.pt: missing"
    state.write_bytes(original)
    (path / MANIFEST_FILE).write_text("{not json")
    assert checkpoint_problem(path) == f"{MANIFEST_FILE}: unreadable"
    (path / MANIFEST_FILE).unlink()  # a checkpoint from before manifests: nothing to check
    assert checkpoint_problem(path) is None


@pytest.fixture(scope="module")
def two_checkpoints(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("runs")
    cfg = load_config(None, [*SHORT, f'run.output_dir="{root}"', "run.name=r"])
    train_llm(cfg, RunDir.create(cfg))
    assert [p.name for p in list_checkpoints(root / "r" / "checkpoints")] == [
        "step-000002",
        "step-000004",
    ]
    return root / "r"


def damaged_copy(run: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "r"
    shutil.copytree(run, copy)
    shards = next((copy / "checkpoints" / "step-000004" / "shards").glob("*.distcp"))
    shards.write_bytes(shards.read_bytes()[: shards.stat().st_size // 2])
    return copy


def test_resume_passes_over_a_damaged_checkpoint_to_the_newest_intact(
    two_checkpoints, tmp_path, run_cli
):
    run = damaged_copy(two_checkpoints, tmp_path)
    code, out, err = run_cli("train", "--resume", str(run), "--set", "train.total_steps=5")
    assert code == 0, err
    assert (
        f"note: {run}/checkpoints/step-000004 is damaged (shards/__0_0.distcp: " in out
    ) and "resuming from step-000002, the newest intact checkpoint" in out
    steps = [json.loads(line)["step"] for line in (run / "metrics.jsonl").open()]
    assert steps == [1, 2, 3, 4, 5]


def test_damaged_shards_with_nothing_intact_are_one_line(two_checkpoints, tmp_path, run_cli):
    run = damaged_copy(two_checkpoints, tmp_path)
    shutil.rmtree(run / "checkpoints" / "step-000002")
    code, out, err = run_cli("train", "--resume", str(run))
    assert code == 2
    (line,) = err.strip().splitlines()
    assert "step-000004" in line and "shards/__0_0.distcp" in line and "Traceback" not in out


def test_shards_damaged_beyond_the_manifest_are_one_line(two_checkpoints, tmp_path, run_cli):
    """torch's CheckpointException is a BaseException: `except Exception` missed it."""
    run = tmp_path / "r"
    shutil.copytree(two_checkpoints, run)
    for ckpt in list_checkpoints(run / "checkpoints"):
        (ckpt / MANIFEST_FILE).unlink()  # as a checkpoint written before manifests
        shards = next((ckpt / "shards").glob("*.distcp"))
        shards.write_bytes(shards.read_bytes()[:1000])
    code, out, err = run_cli("train", "--resume", str(run))
    assert code == 2, out + err
    (line,) = err.strip().splitlines()
    assert "shards" in line and "do not load" in line and "Traceback" not in out + err


@pytest.fixture
def small_disk(tmp_path):
    """A 20 MB tmpfs: room for the run and one checkpoint of the tiny model (13 MB), not two."""
    mount = tmp_path / "disk"
    mount.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=20m", "tmpfs", str(mount)], capture_output=True
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here: {done.stderr.decode().strip()}")
    yield mount
    subprocess.run(["umount", "-l", str(mount)], check=False)


def test_a_full_disk_stops_the_run_in_one_line_with_the_last_checkpoint_intact(small_disk):
    args = [f'run.output_dir="{small_disk}"', "run.name=full", "train.total_steps=4"]
    sets = [a for s in [*SHORT, *args] for a in ("--set", s)]
    done = subprocess.run(
        [sys.executable, "-m", "ascent", "train", *sets],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 2, done.stdout + done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith("error: no space left on the disk of ")
    assert "step-000002 is intact" in line and "--resume" in line
    run = small_disk / "full"
    ckpts = list_checkpoints(run / "checkpoints")
    assert [p.name for p in ckpts] == ["step-000002"]
    assert checkpoint_problem(ckpts[0]) is None
    assert not list((run / "checkpoints").glob(".tmp-*"))  # the partial save is gone


def test_load_shards_failure_is_an_ascent_error(tmp_path):
    from ascent.train.shards import load_shards, save_shards

    save_shards(tmp_path, {"model": {"w": torch.ones(256)}})
    data = next((tmp_path / "shards").glob("*.distcp"))
    data.write_bytes(b"")
    with pytest.raises(AscentError, match="do not load"):
        load_shards(tmp_path, {"model": {"w": torch.zeros(256)}})

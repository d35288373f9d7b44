"""TensorBoard, W&B and SwanLab really receive the metrics, read back from their own files, and
`--resume` continues the same tracker run. W&B and SwanLab run offline: no test uses the network.
"""

from __future__ import annotations

import json
import struct
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from ascent.config.run import LoggingSection
from ascent.configfile import load_config
from ascent.errors import AscentError
from ascent.observe.metrics import MetricsLogger
from ascent.observe.trackers import IDS_FILE, run_id
from ascent.rundir import RunDir

ALL = ["tensorboard", "wandb", "swanlab"]


@pytest.fixture(autouse=True)
def offline(tmp_path, monkeypatch):
    """W&B and SwanLab offline, with their per-user files under tmp_path and no credentials."""
    home = tmp_path / "home"
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("SWANLAB_MODE", "offline")
    for var in ("WANDB_CONFIG_DIR", "WANDB_CACHE_DIR", "WANDB_DATA_DIR", "WANDB_ARTIFACT_DIR"):
        monkeypatch.setenv(var, str(home / var.lower()))
    monkeypatch.setenv("SWANLAB_ROOT", str(home / ".swanlab"))
    for var in ("WANDB_API_KEY", "SWANLAB_API_KEY", "WANDB_RUN_ID", "SWANLAB_RUN_ID"):
        monkeypatch.delenv(var, raising=False)


@pytest.fixture
def run_dir(tmp_path):
    return RunDir.create(load_config(None, [f'run.output_dir="{tmp_path}"']))


def next_second() -> None:
    """Event files and offline run folders are named after the second they start in; a real
    resume is seconds later, and so is this one, so they sort in the order they were written."""
    time.sleep(1.0 - time.time() % 1.0 + 0.01)


def jsonl_rows(run_dir: RunDir) -> dict[int, dict[str, float]]:
    """metrics.jsonl by step, as a tracker receives it: numbers only (null is not sent)."""
    rows = [json.loads(line) for line in run_dir.metrics_path.read_text().splitlines()]
    return {
        row["step"]: {k: v for k, v in row.items() if k not in ("step", "time") and v is not None}
        for row in rows
    }


# ---- reading each tracker's own files back ----------------------------------------------


def tensorboard_rows(run_dir: RunDir) -> dict[int, dict[str, float]]:
    """What TensorBoard shows: every scalar by step, after it applied purge_step."""
    from tensorboard.backend.event_processing.event_accumulator import (
        SCALARS,
        EventAccumulator,
    )

    acc = EventAccumulator(str(run_dir.path / "tensorboard"), size_guidance={SCALARS: 0})
    acc.Reload()
    rows: dict[int, dict[str, float]] = {}
    for tag in acc.Tags()["scalars"]:
        events = acc.Scalars(tag)
        assert len({e.step for e in events}) == len(events), f"{tag}: a step shown twice"
        for event in events:
            rows.setdefault(event.step, {})[tag] = event.value
    return rows


def log_records(path: Path, ident: bytes) -> Iterator[bytes]:
    """The records of a W&B (.wandb) or SwanLab (.swanlab) run file. Both use LevelDB's log
    format: a 7-byte file header, then 32 KiB blocks of chunks, each `crc32 u32, length u16,
    type u8` (1 whole record, 2 first, 3 middle, 4 last part); a block's tail shorter than a
    chunk header is zero padding."""
    block, data = 32768, path.read_bytes()
    assert data[:4] == ident, f"{path}: not a {ident!r} file"
    pos, record = 7, b""
    while pos + 7 <= len(data):
        if block - pos % block < 7:
            pos += block - pos % block
            continue
        _, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        record += data[pos + 7 : pos + 7 + length]
        pos += 7 + length
        if kind in (1, 4):
            yield record
            record = b""


def wandb_runs(run_dir: RunDir) -> list[tuple[str, dict[int, dict[str, float]]]]:
    """(run id, history by step) of each offline W&B session in the run directory, in order."""
    import wandb
    from wandb.proto.wandb_internal_pb2 import Record

    wandb.teardown()  # wandb-core writes the run file after finish(); its shutdown waits for it
    sessions = []
    for path in sorted(run_dir.path.glob("wandb/offline-run-*/run-*.wandb")):
        run, history = "", {}
        for raw in log_records(path, b":W&B"):
            record = Record.FromString(raw)
            if record.HasField("run"):
                run = record.run.run_id
            elif record.HasField("history"):
                row = {i.key or "/".join(i.nested_key): json.loads(i.value_json)
                       for i in record.history.item}  # fmt: skip
                user = {k: v for k, v in row.items() if not k.startswith("_")}
                history[record.history.step.num] = user
        sessions.append((run, history))
    return sessions


def swanlab_runs(run_dir: RunDir) -> list[tuple[str, dict[int, dict[str, float]]]]:
    """(run id, scalars by step) of each offline SwanLab session in the run directory."""
    from swanlab.proto.swanlab.record.v1.record_pb2 import Record

    sessions = []
    for path in sorted(run_dir.path.glob("swanlog/run-*/run-*.swanlab")):
        run, scalars = "", {}
        for raw in log_records(path, b":SWL"):
            record = Record.FromString(raw)
            if record.HasField("start"):
                run = record.start.id
            elif record.HasField("scalar"):
                scalar = record.scalar
                scalars.setdefault(scalar.step, {})[scalar.key] = scalar.value.number
        sessions.append((run, scalars))
    return sessions


def merged(sessions: list[tuple[str, dict[int, dict[str, float]]]]) -> dict[int, dict]:
    rows: dict[int, dict] = {}
    for _, history in sessions:
        rows.update(history)
    return rows


# ---- the tests ------------------------------------------------------------------------------


def test_each_tracker_receives_what_metrics_jsonl_holds(run_dir):
    with MetricsLogger(run_dir, LoggingSection(trackers=ALL), config={"seed": 1}) as log:
        log.log(1, {"reward": 0.25, "kl": float("nan"), "perf/sps": 12})
        log.log(2, {"reward": 0.5, "kl": 0.001, "perf/sps": 14})
    expected = jsonl_rows(run_dir)
    assert expected[1] == {"reward": 0.25, "perf/sps": 12}  # NaN is null, sent to no tracker

    assert tensorboard_rows(run_dir) == {
        step: pytest.approx(row, rel=1e-6)
        for step, row in expected.items()  # float32
    }
    [(wandb_id, history)] = wandb_runs(run_dir)
    assert history == expected
    [(swanlab_id, scalars)] = swanlab_runs(run_dir)
    assert scalars == expected
    ids = json.loads((run_dir.path / IDS_FILE).read_text())
    assert ids == {"wandb": wandb_id, "swanlab": swanlab_id}


def test_resume_continues_each_tracker_run_and_shows_replayed_steps_once(run_dir):
    cfg = LoggingSection(trackers=ALL)
    with MetricsLogger(run_dir, cfg) as log:  # checkpoint at 2, killed after logging step 3
        for step in (1, 2, 3):
            log.log(step, {"reward": float(step)})
    next_second()
    with MetricsLogger(run_dir, cfg, resume_step=2) as log:
        for step in (3, 4):
            log.log(step, {"reward": 10.0 * step})
    expected = jsonl_rows(run_dir)
    assert expected == {1: {"reward": 1.0}, 2: {"reward": 2.0}, 3: {"reward": 30.0},
                        4: {"reward": 40.0}}  # fmt: skip

    # TensorBoard: one log dir, two event files; purge_step hides the first attempt's step 3
    assert len(list((run_dir.path / "tensorboard").iterdir())) == 2
    assert tensorboard_rows(run_dir) == expected
    # W&B and SwanLab: both sessions are the same run (one id), the second one from step 3
    for sessions in (wandb_runs(run_dir), swanlab_runs(run_dir)):
        assert len(sessions) == 2 and sessions[0][0] == sessions[1][0]
        assert sorted(sessions[1][1]) == [3, 4]
        assert merged(sessions) == expected


def test_a_run_started_from_step_0_is_a_new_tracker_run(tmp_path):
    first = run_id(tmp_path, "wandb", resuming=False)
    assert run_id(tmp_path, "wandb", resuming=True) == first
    assert run_id(tmp_path, "swanlab", resuming=True) != first  # made when first asked for
    assert run_id(tmp_path, "wandb", resuming=False) != first


def test_a_tracker_that_cannot_start_is_one_line_and_the_others_are_closed(run_dir, monkeypatch):
    import wandb

    wandb.teardown()  # W&B reads its environment once per process, at its first run
    monkeypatch.setenv("WANDB_MODE", "online")  # online with no API key: refused before any I/O
    try:
        with pytest.raises(AscentError, match=r"wandb did not start .*WANDB_MODE=offline") as err:
            MetricsLogger(run_dir, LoggingSection(trackers=["swanlab", "wandb"]))
    finally:
        wandb.teardown()
    assert "\n" not in str(err.value)
    # swanlab, opened first, was finished: a new SwanLab run can start in this process
    MetricsLogger(run_dir, LoggingSection(trackers=["swanlab"])).close()


def test_a_training_run_resumed_after_a_crash_continues_its_tracker_runs(
    tmp_path, run_cli, monkeypatch
):
    from ascent.train.controller import Controller
    from tests.train.test_llm_loop import SHORT

    original = Controller.step

    def crash_in_step_4(run, step):
        if step == 4:
            raise RuntimeError("simulated crash")
        return original(run, step)

    sets = [*SHORT, "train.eval_steps=0", f'run.output_dir="{tmp_path}"', "run.name=tracked",
            f"logging.trackers={json.dumps(ALL)}"]  # fmt: skip
    args = [a for s in sets for a in ("--set", s)]
    with monkeypatch.context() as patch:
        patch.setattr(Controller, "step", crash_in_step_4)
        with pytest.raises(RuntimeError, match="simulated crash"):
            run_cli("train", *args)
    run_dir = RunDir(tmp_path / "tracked")
    assert sorted(jsonl_rows(run_dir)) == [1, 2, 3]  # step 3 logged, checkpoint at step 2
    next_second()
    code, _, err = run_cli("train", *args, "--resume", str(run_dir.path))
    assert code == 0, err

    expected = jsonl_rows(run_dir)
    assert sorted(expected) == [1, 2, 3, 4]
    assert tensorboard_rows(run_dir) == {
        step: pytest.approx(row, rel=1e-5) for step, row in expected.items()
    }
    for sessions in (wandb_runs(run_dir), swanlab_runs(run_dir)):
        assert [run for run, _ in sessions] == [sessions[0][0]] * 2
        assert sorted(sessions[1][1]) == [3, 4]
        # the resumed session logged the replayed steps again: metrics.jsonl's values
        for step in (3, 4):
            assert sessions[1][1][step] == pytest.approx(expected[step])

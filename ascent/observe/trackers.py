"""Adapters for optional experiment trackers; each imports its package only when asked for.

Each writes inside the run directory:

    tensorboard/        event files: `tensorboard --logdir RUN_DIR/tensorboard`
    wandb/              W&B's run files (an offline run: `wandb sync RUN_DIR/wandb/offline-run-*`)
    swanlog/            SwanLab's run files (an offline run: `swanlab sync RUN_DIR/swanlog/run-*`)
    tracker_ids.json    the W&B and SwanLab run ids of this run directory

Online or offline is each package's own setting, read from the environment: WANDB_MODE=offline
and SWANLAB_MODE=offline keep everything on disk and never touch the network; online, both
packages' default, needs a login first (`wandb login`, `swanlab login`).

`--resume` continues the same tracker run. TensorBoard writes to the same directory with
`purge_step` set to the first replayed step, so TensorBoard hides what the interrupted attempt
logged after the checkpoint. W&B and SwanLab get the run id this run directory was given when it
started (tracker_ids.json) and reopen that run. Their servers refuse a step at or below the last
one they hold, so a step replayed after a resume keeps the value logged before the interruption
(ascent resumes exactly, so only timings such as tokens_per_s can differ).
A tracker that cannot start stops the run before it trains, with a one-line AscentError.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

from ascent.errors import AscentError, one_line
from ascent.rundir import write_json_atomic

IDS_FILE = "tracker_ids.json"
_HINTS = {
    "wandb": "run `wandb login`, or set WANDB_MODE=offline to keep the run in RUN_DIR/wandb",
    "swanlab": "run `swanlab login`, or set SWANLAB_MODE=offline to keep the run in "
    "RUN_DIR/swanlog",
}


class Tracker(Protocol):
    def log(self, step: int, metrics: Mapping[str, float]) -> None: ...

    def close(self) -> None: ...


def _require(module: str, tracker: str) -> Any:
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError:
        raise AscentError(
            f"[logging] trackers includes '{tracker}' but its package is not installed; "
            f"run: pip install 'ascent[trackers]' (or remove '{tracker}')"
        ) from None


def _start_failed(tracker: str, exc: Exception) -> AscentError:
    return AscentError(
        f"[logging] trackers: {tracker} did not start ({type(exc).__name__}: "
        f"{one_line(str(exc))}); {_HINTS[tracker]}, or remove '{tracker}'"
    )


def run_id(run_dir: Path, tracker: str, *, resuming: bool) -> str:
    """The id of this run directory's `tracker` run: kept in tracker_ids.json when resuming,
    new otherwise (a run started again from step 0 is a new tracker run)."""
    path = run_dir / IDS_FILE
    try:
        ids = json.loads(path.read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        ids = {}
    if not resuming or not ids.get(tracker):
        ids[tracker] = secrets.token_hex(8)  # 16 of [0-9a-f]: valid for both W&B and SwanLab
        write_json_atomic(path, ids)
    return ids[tracker]


class TensorBoardTracker:
    def __init__(self, run_dir: Path, resume_step: int | None) -> None:
        _require("tensorboard", "tensorboard")
        from torch.utils.tensorboard import SummaryWriter

        # TensorBoard hides events at or after purge_step that were written before this one:
        # the steps an interrupted attempt logged after its checkpoint (or all of them when
        # the run starts again from step 0).
        purge_step = 0 if resume_step is None else resume_step + 1
        self._writer = SummaryWriter(log_dir=str(run_dir / "tensorboard"), purge_step=purge_step)

    def log(self, step: int, metrics: Mapping[str, float]) -> None:
        for key, value in metrics.items():
            self._writer.add_scalar(key, value, step)

    def close(self) -> None:
        self._writer.close()


class WandbTracker:
    def __init__(
        self, run_dir: Path, project: str, config: dict[str, Any], resume_step: int | None
    ) -> None:
        wandb = _require("wandb", "wandb")
        run = run_id(run_dir, "wandb", resuming=resume_step is not None)
        try:
            self._run = wandb.init(
                project=project, name=run_dir.name, dir=str(run_dir), config=config,
                id=run, resume="allow",
            )  # fmt: skip
        except Exception as exc:
            raise _start_failed("wandb", exc) from exc

    def log(self, step: int, metrics: Mapping[str, float]) -> None:
        self._run.log(dict(metrics), step=step)

    def close(self) -> None:
        self._run.finish()


class SwanlabTracker:
    def __init__(
        self, run_dir: Path, project: str, config: dict[str, Any], resume_step: int | None
    ) -> None:
        swanlab = _require("swanlab", "swanlab")
        run = run_id(run_dir, "swanlab", resuming=resume_step is not None)
        try:
            self._run = swanlab.init(
                project=project, name=run_dir.name, log_dir=str(run_dir / "swanlog"),
                config=config, id=run, resume="allow",
            )  # fmt: skip
        except Exception as exc:
            raise _start_failed("swanlab", exc) from exc

    def log(self, step: int, metrics: Mapping[str, float]) -> None:
        self._run.log(dict(metrics), step=step)

    def close(self) -> None:
        self._run.finish()


def open_tracker(
    kind: str,
    run_dir: Path,
    *,
    project: str,
    config: dict[str, Any],
    resume_step: int | None,
) -> Tracker:
    """Start `kind` for the run in `run_dir`; `resume_step` is the checkpoint's step when the
    run resumes (None when it starts from step 0)."""
    if kind == "tensorboard":
        return TensorBoardTracker(run_dir, resume_step)
    if kind == "wandb":
        return WandbTracker(run_dir, project, config, resume_step)
    if kind == "swanlab":
        return SwanlabTracker(run_dir, project, config, resume_step)
    raise AscentError(
        f"[logging] trackers: unknown tracker '{kind}'; use tensorboard, wandb or swanlab"
    )

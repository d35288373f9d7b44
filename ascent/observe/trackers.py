"""Adapters for optional experiment trackers; each imports its package only when asked for."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

from ascent.errors import AscentError


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


class TensorBoardTracker:
    def __init__(self, run_dir: Path) -> None:
        _require("tensorboard", "tensorboard")
        from torch.utils.tensorboard import SummaryWriter

        self._writer = SummaryWriter(log_dir=str(run_dir / "tensorboard"))

    def log(self, step: int, metrics: Mapping[str, float]) -> None:
        for key, value in metrics.items():
            self._writer.add_scalar(key, value, step)

    def close(self) -> None:
        self._writer.close()


class WandbTracker:
    def __init__(self, run_dir: Path, project: str, name: str, config: dict[str, Any]) -> None:
        wandb = _require("wandb", "wandb")
        self._run = wandb.init(project=project, name=name, dir=str(run_dir), config=config)

    def log(self, step: int, metrics: Mapping[str, float]) -> None:
        self._run.log(dict(metrics), step=step)

    def close(self) -> None:
        self._run.finish()


class SwanlabTracker:
    def __init__(self, run_dir: Path, project: str, name: str, config: dict[str, Any]) -> None:
        swanlab = _require("swanlab", "swanlab")
        self._swanlab = swanlab
        swanlab.init(project=project, experiment_name=name, logdir=str(run_dir), config=config)

    def log(self, step: int, metrics: Mapping[str, float]) -> None:
        self._swanlab.log(dict(metrics), step=step)

    def close(self) -> None:
        self._swanlab.finish()


def open_tracker(
    kind: str, run_dir: Path, project: str, name: str, config: dict[str, Any]
) -> Tracker:
    if kind == "tensorboard":
        return TensorBoardTracker(run_dir)
    if kind == "wandb":
        return WandbTracker(run_dir, project, name, config)
    if kind == "swanlab":
        return SwanlabTracker(run_dir, project, name, config)
    raise AscentError(
        f"[logging] trackers: unknown tracker '{kind}'; use tensorboard, wandb or swanlab"
    )

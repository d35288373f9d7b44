"""The run directory: `runs/<name>/` and the rule that nothing in it is lost by accident.

    config.toml      the resolved config the run used
    metrics.jsonl    one JSON object per logged step
    samples/         sample completions / episodes
    checkpoints/     see ascent.train.checkpoint
    summary.json     written at the end of every run

An existing run directory is never overwritten unless the user says `--overwrite`; `--resume`
continues it from its latest checkpoint. A run killed before its first checkpoint has nothing
to continue from: `--resume` starts it again in place (its partial metrics and samples are
dropped, so every step is logged once). A staged run resumes stage by stage (llm_stages.py).
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ascent.config import AnyConfig, dump_config
from ascent.errors import AscentError
from ascent.train.checkpoint import (
    FINAL_MODEL,
    latest_checkpoint,
    write_json_atomic,
    write_text_atomic,
)


@dataclass(frozen=True)
class RunDir:
    path: Path
    resume_from: Path | None = None  # the checkpoint to continue from, when resuming
    resuming: bool = False  # --resume was given (a staged run resumes its stages)

    @property
    def checkpoints(self) -> Path:
        return self.path / "checkpoints"

    @property
    def metrics_path(self) -> Path:
        return self.path / "metrics.jsonl"

    @property
    def samples_dir(self) -> Path:
        return self.path / "samples"

    @property
    def summary_path(self) -> Path:
        return self.path / "summary.json"

    @property
    def config_path(self) -> Path:
        return self.path / "config.toml"

    @classmethod
    def create(
        cls, cfg: AnyConfig, *, resume: Path | None = None, overwrite: bool = False
    ) -> RunDir:
        if resume is not None and overwrite:
            raise AscentError("--resume and --overwrite contradict each other; pass one of them")
        if resume is not None:
            return cls._resume(Path(resume), cfg)
        path = Path(cfg.run.output_dir) / cfg.run.name
        if path.exists() and any(path.iterdir()):
            if not overwrite:
                raise AscentError(
                    f"run directory {path} already exists; pass --resume {path} to continue it, "
                    "--overwrite to replace it, or --set run.name=NEW for a new run"
                )
            shutil.rmtree(path)
        path.mkdir(parents=True, exist_ok=True)
        run_dir = cls(path)
        write_text_atomic(run_dir.config_path, dump_config(cfg))
        return run_dir

    @classmethod
    def _resume(cls, path: Path, cfg: AnyConfig) -> RunDir:
        if not path.is_dir():
            raise AscentError(f"--resume {path}: no such run directory; check the path")
        ckpt = latest_checkpoint(path)
        staged = bool(getattr(cfg, "stages", None))
        if ckpt is None and not staged:
            if not (path / "config.toml").is_file():
                raise AscentError(
                    f"--resume {path}: not a run directory (no config.toml, no checkpoint); "
                    "check the path"
                )
            print(f"note: {path} has no checkpoint yet; starting it again from step 0")
            for partial in ("metrics.jsonl", "summary.json"):
                (path / partial).unlink(missing_ok=True)
            shutil.rmtree(path / "samples", ignore_errors=True)
        run_dir = cls(path, resume_from=ckpt, resuming=True)
        write_text_atomic(run_dir.config_path, dump_config(cfg))
        return run_dir

    def write_summary(self, summary: dict[str, Any]) -> Path:
        paths = {
            "run_dir": str(self.path),
            "config": str(self.config_path),
            "metrics": str(self.metrics_path),
            "checkpoints": str(self.checkpoints),
            "samples": str(self.samples_dir),
        }
        if (self.path / FINAL_MODEL).is_dir():
            paths["final_model"] = str(self.path / FINAL_MODEL)
        write_json_atomic(self.summary_path, {**summary, "paths": paths})
        return self.summary_path

"""Training: the LLM RL loop, the classic PPO loop, and what they share (run dir, checkpoints)."""

from __future__ import annotations

from pathlib import Path

from ascent.config import AnyConfig, ClassicConfig, LLMConfig
from ascent.train.rundir import RunDir
from ascent.train.runtime import setup_runtime


def run_training(cfg: AnyConfig, *, resume: Path | None = None, overwrite: bool = False) -> Path:
    """Run one training job described by `cfg`; return the path of its summary.json."""
    run_dir = RunDir.create(cfg, resume=resume, overwrite=overwrite)
    setup_runtime(cfg.run)
    if isinstance(cfg, ClassicConfig):
        from ascent.train.classic import train_classic

        train_classic(cfg, run_dir)
    elif isinstance(cfg, LLMConfig):
        from ascent.train.llm import train_llm

        train_llm(cfg, run_dir)
    else:  # pragma: no cover - the loader only builds the two kinds above
        raise TypeError(f"unknown config type {type(cfg).__name__}")
    return run_dir.summary_path


__all__ = ["RunDir", "run_training"]

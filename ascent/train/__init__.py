"""Training: the LLM RL loop, the classic PPO loop, and what they share (run dir, checkpoints).

`run_training` runs one job on this process's rank: one process by default, or one of the
ranks of `ascent train --nproc N` / torchrun (`Dist.from_env`).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import torch

from ascent.configfile import AnyConfig
from ascent.errors import AscentError
from ascent.rules import ClassicConfig, LLMConfig
from ascent.rundir import RunDir, release
from ascent.runtime import setup_runtime
from ascent.train.checkpoint import disk_full, disk_full_message
from ascent.train.distributed import Dist


def create_run_dir(
    cfg: AnyConfig, dist: Dist, *, resume: Path | None = None, overwrite: bool = False
) -> RunDir:
    """Rank 0 creates (or resumes) the run directory; every rank gets the same `RunDir`."""
    run_dir = RunDir.create(cfg, resume=resume, overwrite=overwrite) if dist.main else None
    return dist.broadcast(run_dir)


def check_world_size(cfg: AnyConfig, world: int) -> None:
    """Refuse (one line) a config that cannot run on `world` ranks."""
    from ascent.errors import ConfigError
    from ascent.rules.llm_rules import world_size_rules

    if world == 1:
        return
    if not isinstance(cfg, LLMConfig):
        raise ConfigError("--nproc runs LLM recipes; classic PPO runs in one process")
    try:
        world_size_rules(cfg, world)
    except ValueError as err:
        raise ConfigError(f"{cfg.source}: {err} (--nproc {world})") from None


def train_rank(
    config: str | None, overrides: list[str], resume: str | None, overwrite: bool
) -> str:
    """One rank of `ascent train --nproc N`, in a process the launcher started."""
    from ascent.configfile import load_config

    cfg = load_config(config, overrides)
    resume_path = Path(resume) if resume else None
    return str(run_training(cfg, resume=resume_path, overwrite=overwrite))


def run_training(
    cfg: AnyConfig,
    *,
    resume: Path | None = None,
    overwrite: bool = False,
    dist: Dist | None = None,
) -> Path:
    """Run one training job described by `cfg`; return the path of its summary.json."""
    if dist is None:
        dist = Dist.from_env(cfg.run.device)
    if dist.distributed:
        check_world_size(cfg, dist.world_size)
    if isinstance(cfg, LLMConfig):  # refused before the run directory is written
        from ascent.train.llm_preflight import preflight

        preflight(cfg, dist)
    run_dir = create_run_dir(cfg, dist, resume=resume, overwrite=overwrite)  # locked
    failed = True
    try:
        setup_runtime(cfg.run, dist.world_size)
        if isinstance(cfg, ClassicConfig):
            from ascent.train.classic import train_classic

            train_classic(cfg, run_dir)
        elif isinstance(cfg, LLMConfig):
            from ascent.train.llm import train_llm

            try:
                train_llm(cfg, run_dir, dist)
            except (MemoryError, torch.OutOfMemoryError):
                raise AscentError(out_of_memory(cfg, dist)) from None
        else:  # pragma: no cover - the loader only builds the two kinds above
            raise TypeError(f"unknown config type {type(cfg).__name__}")
        failed = False
    except OSError as err:
        if not disk_full(err):
            raise
        raise AscentError(disk_full_message(run_dir.path, "writing the run's files")) from None
    finally:
        release(run_dir.path)
        if failed and resume is None and dist.main and not_started(run_dir.path):
            # a run that failed while setting up leaves nothing behind, so the corrected
            # command is not refused as "already exists"
            shutil.rmtree(run_dir.path, ignore_errors=True)
    return run_dir.summary_path


def out_of_memory(cfg: LLMConfig, dist: Dist) -> str:
    """The one line an out-of-memory error becomes: the settings that shrink the peak, with
    their values, and where to see the estimate."""
    t, r, m = cfg.train, cfg.rollout, cfg.model
    fixes = [f"lower [train] micro_batch_size (now {t.micro_batch_size})"]
    if t.max_tokens_per_micro_batch is None:
        fixes.append("set [train] max_tokens_per_micro_batch")
    fixes.append(f"shorten [rollout] max_new_tokens (now {r.max_new_tokens})")
    if not m.gradient_checkpointing:
        fixes.append("set [model] gradient_checkpointing = true")
    return (
        f"out of memory on {dist.device} while training: {', '.join(fixes)}; `ascent train "
        "CONFIG --dry-run` prints the estimated peak, and --resume RUN_DIR continues from the "
        "last checkpoint"
    )


# What a run writes once it has taken a step (or finished a stage): its directory is kept.
STARTED = ("metrics.jsonl", "checkpoints", "summary.json", "final-model", "stages")


def not_started(path: Path) -> bool:
    """True when the run directory holds nothing a step wrote: a failure in setting up."""
    return path.is_dir() and not any((path / name).exists() for name in STARTED)


__all__ = ["Dist", "RunDir", "check_world_size", "create_run_dir", "run_training", "train_rank"]

"""Sections every run has, whatever it trains: `[run]` and `[logging]`."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from ascent.config.base import Section

MAX_NAME_BYTES = 255  # the longest file name Linux, macOS and Windows file systems allow


def check_dir_name(value: str, where: str) -> str:
    """A name that becomes one directory under another: one path component, never a path
    (`.`, `..` or a `/` would put the run, and what `--overwrite` deletes, elsewhere)."""
    bad = (
        value in (".", "..")
        or any(c in value for c in "/\\\0")
        or len(value.encode("utf-8")) > MAX_NAME_BYTES
    )
    if bad:
        shown = value if len(value) <= 40 else value[:40] + "..."
        raise ValueError(
            f"{where}: {shown!r} is not a directory name (one name, not '.' or '..': no '/', "
            f"'\\' or NUL, at most {MAX_NAME_BYTES} bytes); e.g. name = \"my-run\""
        )
    return value


class RunSection(Section):
    """`[run]`: where a run writes, how it is seeded, and what hardware it uses."""

    name: str = Field(
        "",
        description="Run name; the run directory is output_dir/name (empty: the config file stem).",
    )
    output_dir: str = Field("runs", description="Directory that holds one sub-directory per run.")

    seed: int = Field(42, ge=0, description="Seed for torch, numpy, Python and data shuffling.")
    device: str = Field(
        "auto",
        pattern=r"^(auto|cpu|cuda(:\d+)?|mps)$",
        description="auto (CUDA when available, else CPU), cpu, cuda, cuda:N or mps.",
    )
    threads: int = Field(
        0,
        ge=0,
        description="torch CPU threads; 0: half the cores (min 1), leaving room for reward work.",
    )
    deterministic: bool = Field(
        False, description="Ask torch for deterministic kernels (slower; for exact reproduction)."
    )
    preflight: bool = Field(
        False,
        description="Before training, check on one batch that the engine's log-probs match the "
        "trainer's, what top-p / top-k leave out, and that a weight sync reaches the engine "
        "(as `ascent doctor --numerics`); a sync that does not stops the run. LLM runs, one "
        "process, not agentic.",
    )

    @field_validator("name")
    @classmethod
    def _one_directory(cls, value: str) -> str:
        return check_dir_name(value, "[run] name")


class LoggingSection(Section):
    """`[logging]`: what a run reports, and where."""

    log_every: int = Field(
        1, ge=1, description="Write metrics every N steps (updates for classic PPO)."
    )
    progress: bool = Field(True, description="Show a live progress bar in the terminal.")
    jsonl: bool = Field(
        True, description="Append one JSON object per logged step to metrics.jsonl."
    )
    trackers: list[Literal["tensorboard", "wandb", "swanlab"]] = Field(
        default_factory=list,
        description="Extra trackers (each needs its package: pip install 'ascent[trackers]').",
    )
    project: str = Field("ascent", description="Project name for wandb / swanlab.")
    sample_every: int = Field(
        10, ge=0, description="Save sample completions every N steps (0: never)."
    )
    num_samples: int = Field(4, ge=1, description="How many completions each sample dump holds.")
    reflection_words: list[str] = Field(
        default_factory=lambda: ["wait", "recheck", "alternatively", "let me verify", "hmm"],
        description="Words and phrases whose rate in completions is the reflection/rate metric "
        "(case-insensitive, whole words; SRPO's list by default).",
    )

"""Sections of a classic actor-critic PPO run on a gymnasium environment."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import Field

from ascent.config.base import Section
from ascent.config.run import LoggingSection, RunSection


class EnvSection(Section):
    """`[env]`: the gymnasium environment."""

    id: str = Field("CartPole-v1", description="gymnasium environment id.")


class ClassicTrainSection(Section):
    """`[train]` of a classic PPO run."""


class ClassicOptimSection(Section):
    """`[optim]` of a classic PPO run."""


class ClassicConfig(Section):
    """A classic actor-critic PPO run (chosen when the config has an [env] section)."""

    run: RunSection = Field(default_factory=RunSection, description="Run directory, seed, device.")
    env: EnvSection = Field(default_factory=EnvSection, description="Environment.")
    train: ClassicTrainSection = Field(
        default_factory=ClassicTrainSection, description="PPO settings."
    )
    optim: ClassicOptimSection = Field(
        default_factory=ClassicOptimSection, description="Optimisers."
    )
    logging: LoggingSection = Field(
        default_factory=LoggingSection, description="Metrics and trackers."
    )


def merge_settings_json(raw: dict[str, Any], config_path: Path | None) -> dict[str, Any]:
    """Fold an optional settings.json beside the config into the raw TOML data (TOML wins)."""
    return raw

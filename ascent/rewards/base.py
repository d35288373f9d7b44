"""The reward-function contract and the registry of built-in reward builders.

A reward function follows TRL's contract: `f(prompts, completions, **columns) -> list[float |
None]`, one value per completion, `None` where the reward does not apply to that sample (a math
reward on a code problem). Columns are the dataset's columns, one list entry per completion.

A *builder*, registered by name in `REWARDS`, turns the config into such a function:

    @REWARDS.register("countdown", columns=("numbers", "target"))  # the columns it reads
    def build_countdown(reward_cfg: RewardSection, sandbox_cfg: SandboxSection) -> RewardFunction:
        return countdown_reward

Built-in rewards also implement `score(...) -> Scored`, which adds a per-sample detail dict
(extracted answer, sandbox status, per-test results) for logging; `CompositeReward` uses it
when present.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from ascent.config.rewards import RewardSection, SandboxSection
from ascent.errors import AscentError
from ascent.registry import Registry


class RewardFunction(Protocol):
    def __call__(
        self, prompts: list[Any], completions: list[Any], **columns: list[Any]
    ) -> list[float | None]: ...


@dataclass
class Scored:
    """A reward's values plus one detail dict per sample."""

    values: list[float | None]
    details: list[dict[str, Any]] = field(default_factory=list)


@runtime_checkable
class DetailedReward(Protocol):
    """A reward function that can also explain each value."""

    def score(self, prompts: list[Any], completions: list[Any], **columns: list[Any]) -> Scored: ...


class ScoredReward:
    """Base for rewards that implement `score`: calling one returns the values alone."""

    def score(self, prompts: list[Any], completions: list[Any], **columns: list[Any]) -> Scored:
        raise NotImplementedError

    def __call__(
        self, prompts: list[Any], completions: list[Any], **columns: list[Any]
    ) -> list[float | None]:
        return self.score(prompts, completions, **columns).values


RewardBuilder = Callable[[RewardSection, SandboxSection], RewardFunction]
REWARDS: Registry[RewardBuilder] = Registry("reward")


def completion_text(completion: Any) -> str:
    """The text of a completion: a string, or the last assistant message of a conversation."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, Sequence) and completion and isinstance(completion[-1], dict):
        return str(completion[-1].get("content", ""))
    if isinstance(completion, dict):
        return str(completion.get("content", ""))
    return str(completion)


def column(columns: dict[str, Any], name: str, n: int, reward: str) -> list[Any]:
    """A required dataset column, checked for one entry per completion."""
    if name not in columns:
        have = ", ".join(sorted(columns)) or "none"
        raise AscentError(
            f"the {reward} reward needs a '{name}' column in the dataset (columns given: {have})"
        )
    return _one_per_completion(columns, name, n)


def optional_column(columns: dict[str, Any], name: str, n: int) -> list[Any]:
    """An optional column, as a list of n entries (None where absent)."""
    if name not in columns or columns[name] is None:
        return [None] * n
    return _one_per_completion(columns, name, n)


def _one_per_completion(columns: dict[str, Any], name: str, n: int) -> list[Any]:
    values = list(columns[name])
    if len(values) != n:
        raise AscentError(
            f"column '{name}' has {len(values)} entries for {n} completions; "
            "give one per completion"
        )
    return values

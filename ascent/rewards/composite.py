"""Several reward functions, weighted into one total: what the trainer calls.

`build_reward(reward_cfg, sandbox_cfg)` resolves each name in `[reward] functions` (a name
registered in `REWARDS`, or a "package.module:function" import path to any callable with the
TRL signature) and returns a `CompositeReward`. Calling it gives a `RewardOutput`: the weighted
total per sample (components that return None for a sample are left out of its sum; when every
component returns None the total is None too, as in TRL, so the trainer can mask the sample),
each component's values (for per-component metrics), and per-sample details for logging.
"""

from __future__ import annotations

import importlib
import math
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from ascent.config.rewards import RewardSection, SandboxSection
from ascent.errors import AscentError
from ascent.rewards.base import REWARDS, DetailedReward, RewardFunction, Scored


@dataclass(frozen=True)
class RewardOutput:
    """Rewards for one batch of completions."""

    total: list[float | None]  # weighted sum per sample of the components that apply; None: none do
    components: dict[str, list[float | None]]  # each reward function's own values
    details: list[dict[str, Any]]  # per sample: {component name: its detail dict}


def is_correct(details: dict[str, dict[str, Any]]) -> bool | None:
    """Every judging reward in one row's details says correct (None: none judges correctness)."""
    flags = [d["correct"] for d in details.values() if isinstance(d, dict) and "correct" in d]
    return all(flags) if flags else None


class CompositeReward:
    """Weighted sum of named reward functions; `submit` scores a batch in the background."""

    def __init__(self, functions: dict[str, RewardFunction], weights: list[float]) -> None:
        if len(weights) != len(functions):
            raise ValueError(f"{len(weights)} weights for {len(functions)} reward functions")
        self.functions = functions
        self.weights = dict(zip(functions, weights, strict=True))
        self._executor: ThreadPoolExecutor | None = None

    @property
    def names(self) -> list[str]:
        return list(self.functions)

    def __call__(
        self, prompts: list[Any], completions: list[Any], **columns: list[Any]
    ) -> RewardOutput:
        n = len(completions)
        if len(prompts) != n:
            raise ValueError(f"{len(prompts)} prompts for {n} completions")
        components: dict[str, list[float | None]] = {}
        details: list[dict[str, Any]] = [{} for _ in range(n)]
        for name, function in self.functions.items():
            scored = _score(function, prompts, completions, columns)
            components[name] = _check_values(name, scored.values, n)
            for i, detail in enumerate(scored.details):
                details[i][name] = detail
        total: list[float | None] = []
        for i in range(n):
            parts = [
                self.weights[name] * value
                for name, values in components.items()
                if (value := values[i]) is not None
            ]
            total.append(float(sum(parts)) if parts else None)
        return RewardOutput(total, components, details)

    def submit(
        self, prompts: list[Any], completions: list[Any], **columns: list[Any]
    ) -> Future[RewardOutput]:
        """Score a batch in a background thread (e.g. while the next batch is generated)."""
        if self._executor is None:
            self._executor = ThreadPoolExecutor(1, thread_name_prefix="ascent-reward")
        return self._executor.submit(self, prompts, completions, **columns)

    def close(self) -> None:
        """Stop background work and the helpers (sandbox workers, math checkers) rewards own."""
        if self._executor is not None:
            self._executor.shutdown(wait=True)
            self._executor = None
        for function in self.functions.values():
            close = getattr(function, "close", None)
            if callable(close):
                close()

    def __enter__(self) -> CompositeReward:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _score(
    function: RewardFunction, prompts: list[Any], completions: list[Any], columns: dict[str, Any]
) -> Scored:
    if isinstance(function, DetailedReward):
        return function.score(prompts, completions, **columns)
    return Scored(list(function(prompts, completions, **columns)))


def _check_values(name: str, values: list[Any], n: int) -> list[float | None]:
    if len(values) != n:
        raise AscentError(f"reward '{name}' returned {len(values)} values for {n} completions")
    checked: list[float | None] = []
    for value in values:
        if value is None:
            checked.append(None)
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise AscentError(
                f"reward '{name}' returned {value!r}; a reward must be a number or None"
            )
        if not math.isfinite(value):
            raise AscentError(f"reward '{name}' returned {value}; rewards must be finite")
        checked.append(float(value))
    return checked


def load_callable(path: str) -> RewardFunction:
    """Import "package.module:function" and check that it is callable."""
    module_name, _, attr = path.partition(":")
    if not module_name or not attr:
        raise AscentError(f"reward {path!r}: write a custom reward as 'package.module:function'")
    try:
        module = importlib.import_module(module_name)
    except ImportError as err:
        raise AscentError(
            f"reward {path!r}: cannot import {module_name} ({err}); is it on PYTHONPATH?"
        ) from None
    target: Any = module
    for part in attr.split("."):
        if not hasattr(target, part):
            raise AscentError(f"reward {path!r}: {module_name} has no attribute {attr!r}")
        target = getattr(target, part)
    if not callable(target):
        raise AscentError(f"reward {path!r} is not callable")
    return target


def build_reward(reward_cfg: RewardSection, sandbox_cfg: SandboxSection) -> CompositeReward:
    """The config's reward functions, built and weighted."""
    functions: dict[str, RewardFunction] = {}
    for name in reward_cfg.functions:
        if ":" in name:
            functions[name] = load_callable(name)
        else:
            functions[name] = REWARDS.get(name)(reward_cfg, sandbox_cfg)
    weights = list(reward_cfg.weights) or [1.0] * len(functions)
    return CompositeReward(functions, weights)

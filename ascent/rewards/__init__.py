"""Verifiable rewards: math equivalence, sandboxed code, custom callables, weighted together.

`build_reward(reward_cfg, sandbox_cfg)` is what a trainer calls; `REWARDS` maps config names to
builders (`@REWARDS.register("name")`, see `ascent.rewards.base`). The modules that register the
built-in rewards are imported here so that their names are known as soon as this package is.
"""

from ascent.rewards import (  # noqa: F401  (register their rewards)
    code,
    countdown,
    math,
    openenv,
    reasoning_gym,
    verifiers,
)
from ascent.rewards.base import (
    REWARDS,
    DetailedReward,
    RewardBuilder,
    RewardFunction,
    Scored,
    ScoredReward,
    completion_text,
)
from ascent.rewards.composite import (
    CompositeReward,
    RewardOutput,
    build_reward,
    is_correct,
    load_callable,
)

__all__ = [
    "REWARDS",
    "CompositeReward",
    "DetailedReward",
    "RewardBuilder",
    "RewardFunction",
    "RewardOutput",
    "Scored",
    "ScoredReward",
    "build_reward",
    "completion_text",
    "is_correct",
    "load_callable",
]

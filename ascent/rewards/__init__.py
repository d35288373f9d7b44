"""Verifiable rewards: math equivalence, sandboxed code, custom callables, weighted together.

`build_reward(reward_cfg, sandbox_cfg)` is what a trainer calls; `REWARDS` maps config names to
builders (`@REWARDS.register("name")`, see `ascent.rewards.base`). The modules that register the
built-in rewards are imported here so that their names are known as soon as this package is.
"""

from ascent.rewards import code, math  # noqa: F401  (register "code" and "math")
from ascent.rewards.base import (
    REWARDS,
    DetailedReward,
    RewardBuilder,
    RewardFunction,
    Scored,
    ScoredReward,
    completion_text,
)
from ascent.rewards.composite import CompositeReward, RewardOutput, build_reward, load_callable

try:  # another module registers "countdown"; import it when it is there
    from ascent.rewards import countdown  # noqa: F401
except ModuleNotFoundError as err:
    if err.name != "ascent.rewards.countdown":
        raise

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
    "load_callable",
]

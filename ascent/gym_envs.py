"""gymnasium environments as the classic PPO agent sees them: an `[env] id` resolved to its
registered spec, and whether the MLP actor-critic can act in its spaces.

`[env] id` is checked with these when the config loads, before a run directory exists; the
vector env and the agent check the spaces again on what they build.
"""

from __future__ import annotations

import importlib
from typing import Any


def unsupported_space(observation_space: Any, action_space: Any) -> str | None:
    """Why the MLP actor-critic cannot act in an env with these spaces, in one line; None
    when it can (checked at config load and again on the vector env)."""
    from gymnasium import spaces

    if not isinstance(observation_space, spaces.Box):
        return (
            f"observation space {observation_space} is not supported: the MLP agent needs a Box "
            "(a vector or array of numbers); wrap the env to encode observations as a Box"
        )
    if isinstance(action_space, spaces.Discrete):
        if int(action_space.start) != 0:
            return f"action space {action_space} is not supported: Discrete must start at 0"
        return None
    if isinstance(action_space, spaces.Box) and len(action_space.shape) == 1:
        return None
    return (
        f"action space {action_space} is not supported: the agent handles Discrete(n) and "
        "1-D Box actions"
    )


def env_spec(env_id: str) -> Any:
    """The registered spec of `env_id` (its reward_threshold, vector entry point)."""
    import gymnasium as gym

    return gym.spec(env_id.rpartition(":")[2])  # "module:Id" registers Id on import


def check_env(env_id: str) -> None:
    """Raise ValueError (one line, with a hint) unless the agent can train on `env_id`.

    Checked when the config loads, before a run directory exists: the id must be registered
    (importing 'module:' first), the env must build, and its spaces must suit the agent.
    """
    import gymnasium as gym

    module, sep, _ = env_id.rpartition(":")
    if sep:
        try:
            importlib.import_module(module)
        except (ImportError, TypeError, ValueError) as err:  # TypeError: ".x:Id"; ValueError: ":Id"
            raise ValueError(
                f"[env] id {env_id!r}: cannot import module {module!r} ({err}); "
                "install the package that provides the environment"
            ) from None
    try:
        env_spec(env_id)
    except gym.error.Error as err:
        raise ValueError(
            f"[env] id {env_id!r} is not a registered gymnasium environment: {err} "
            "(list them with: python -c 'import gymnasium; gymnasium.pprint_registry()')"
        ) from None
    try:
        env = gym.make(env_id)
    except gym.error.Error as err:  # e.g. DependencyNotInstalled
        raise ValueError(f"[env] id {env_id!r}: cannot create the environment: {err}") from None
    problem = unsupported_space(env.observation_space, env.action_space)
    env.close()
    if problem is not None:
        raise ValueError(f"[env] id {env_id!r}: {problem}")

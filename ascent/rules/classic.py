"""The root model of a classic PPO run: `ClassicSections`' tables plus what they decide
together (updates in the run, the return that counts as solved) and the rules between them
(batch arithmetic, a solved return to stop at, the log assistant as the only API role)."""

from __future__ import annotations

import math

from pydantic import model_validator

from ascent.config.classic import ClassicSections
from ascent.gym_envs import env_spec
from ascent.rules.roles import check_assistant_role, named_roles


class ClassicConfig(ClassicSections):
    """A classic actor-critic PPO run (chosen when the config has an [env] section)."""

    @property
    def transitions_per_update(self) -> int:
        return self.train.rollout_steps * self.env.num_envs

    @property
    def num_updates(self) -> int:
        """Updates in the whole run: total_timesteps rounded up to whole rollouts."""
        return -(-self.train.total_timesteps // self.transitions_per_update)

    @property
    def solved_return(self) -> float | None:
        """[train] solved_return, or the env's registered reward_threshold."""
        if self.train.solved_return is not None:
            return self.train.solved_return
        return env_spec(self.env.id).reward_threshold

    @model_validator(mode="after")
    def _batch_arithmetic(self) -> ClassicConfig:
        t, n = self.train, self.env.num_envs
        rollout = self.transitions_per_update
        if rollout % t.batch_size:
            raise ValueError(
                f"[train] batch_size: rollout_steps x num_envs = {t.rollout_steps} x {n} = "
                f"{rollout} transitions per update is not a multiple of batch_size "
                f"({t.batch_size}); try batch_size = {_or(_divisors_near(rollout, t.batch_size))}"
                f" or rollout_steps = {_or(_rollouts_near(t.rollout_steps, n, t.batch_size))}"
            )
        if t.total_timesteps < rollout:
            raise ValueError(
                f"[train] total_timesteps ({t.total_timesteps}) is less than one rollout "
                f"(rollout_steps x num_envs = {rollout}); raise total_timesteps to at least "
                f"{rollout} or lower rollout_steps"
            )
        return self

    @model_validator(mode="after")
    def _usable(self) -> ClassicConfig:
        if self.train.stop_when_solved and self.solved_return is None:
            raise ValueError(
                f"[train] stop_when_solved: {self.env.id} has no reward_threshold, so set "
                "[train] solved_return to the mean return that counts as solved"
            )
        if self.run.preflight:
            raise ValueError(
                "[run] preflight: the numerics check compares an LLM engine with its trainer; "
                "a classic PPO run has neither; remove the key"
            )
        if self.logging.explicitly_set("sample_every") or self.logging.explicitly_set(
            "num_samples"
        ):
            raise ValueError(
                "[logging] sample_every / num_samples: classic PPO runs have no completions "
                "to sample; remove the key (use `ascent eval RUN_DIR` to watch the policy)"
            )
        return self

    @model_validator(mode="after")
    def _assistant_role(self) -> ClassicConfig:
        """The log assistant's role is the only API role a classic run calls."""
        role, roles = self.assistant.role, named_roles(self.models)
        other = [name for name in roles if name != role]
        if other:
            raise ValueError(
                f"[models] {other[0]}: a classic PPO run calls an API only for the log "
                f"assistant ([assistant] role = {role!r}); remove this role"
            )
        check_assistant_role(self.assistant, self.models)
        unused = [f"[{name}]" for name in ("api", "models") if self.explicitly_set(name)]
        if unused and not self.assistant.enabled:
            verb = "have" if len(unused) > 1 else "has"
            self._warnings = [
                f"{' and '.join(unused)} {verb} no effect: a classic PPO run calls an API only "
                "for the log assistant, and [assistant] enabled = false"
            ]
        return self


def _or(options: list[int]) -> str:
    return " or ".join(map(str, options))


def _divisors_near(n: int, around: int) -> list[int]:
    """The two divisors of n closest to `around` (for messages that propose valid values)."""
    divisors = [d for d in range(1, min(n, 1 << 16) + 1) if n % d == 0] + [n] * (n > 1 << 16)
    return sorted(sorted(divisors, key=lambda d: (abs(d - around), d))[:2])


def _rollouts_near(rollout_steps: int, num_envs: int, batch_size: int) -> list[int]:
    """rollout_steps just below and above the given one with rollout x num_envs % batch == 0."""
    step = batch_size // math.gcd(num_envs, batch_size)  # smallest s with s x num_envs % batch == 0
    lower = max(step, rollout_steps // step * step)
    return sorted({lower, lower + step})

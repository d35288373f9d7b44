"""A single-turn OpenEnv environment: add two 2-digit numbers. Needs `ascent[openenv]`.

    [data] path = "openenv:ascent.envs.openenv_addition:app"

reset(seed) poses one problem (the same seed, the same problem: what lets a trainer score a
group of completions against one problem; reset(seed, digits=3) poses a 3-digit one);
step(text) ends the episode with reward 1 when the text's last integer is the sum, else 0,
given by the environment's rubric. The observation
carries the operands zero-padded (`a`, `b`), so a prompt template can pose the problem the
way ascent's tiny model learnt to read it ("07+45=").
"""

from __future__ import annotations

import random
import re
from typing import Any
from uuid import uuid4

from openenv.core.env_server.http_server import create_app
from openenv.core.env_server.interfaces import Environment
from openenv.core.env_server.types import Action, Observation, State
from openenv.core.rubrics import Rubric
from pydantic import Field

_INTEGER = re.compile(r"-?\d+")


class AdditionAction(Action):
    text: str = Field(..., description="The model's reply; its last integer is the answer.")


class AdditionObservation(Observation):
    prompt: str = Field("", description="The question.")
    a: str = Field("", description="First operand, zero-padded to the reset's digits.")
    b: str = Field("", description="Second operand, zero-padded to the reset's digits.")


def problem(seed: int, digits: int = 2) -> tuple[int, int]:
    """The operands reset(seed) poses, each of at most `digits` digits."""
    rng = random.Random(seed)
    return rng.randrange(10**digits), rng.randrange(10**digits)


class LastIntegerRubric(Rubric):
    """1.0 when the reply's last integer is the sum, else 0.0."""

    def forward(self, action: AdditionAction, observation: AdditionObservation) -> float:
        found = _INTEGER.findall(action.text)
        return float(bool(found) and int(found[-1]) == int(observation.a) + int(observation.b))


class AdditionEnv(Environment):
    SUPPORTS_CONCURRENT_SESSIONS = True  # nothing shared: each session has its own instance

    def __init__(self) -> None:
        super().__init__(rubric=LastIntegerRubric())
        self._state = State(episode_id=None, step_count=0)
        self._operands = (0, 0)
        self._digits = 2

    def _observation(self, **fields: Any) -> AdditionObservation:
        a, b = (f"{x:0{self._digits}d}" for x in self._operands)
        return AdditionObservation(prompt=f"What is {a} + {b}?", a=a, b=b, **fields)

    def reset(
        self,
        seed: int | None = None,
        episode_id: str | None = None,
        digits: int = 2,
        **kwargs: Any,
    ) -> AdditionObservation:
        self._reset_rubric()
        seed = random.randrange(2**31) if seed is None else seed
        if not 1 <= digits <= 6:
            raise ValueError(f"digits must be 1-6, not {digits}")
        self._digits = digits
        self._operands = problem(seed, digits)
        self._state = State(episode_id=episode_id or str(uuid4()), step_count=0)
        return self._observation(done=False, reward=None)

    def step(
        self, action: AdditionAction, timeout_s: float | None = None, **kwargs: Any
    ) -> AdditionObservation:
        self._state.step_count += 1
        observation = self._observation(done=True)
        observation.reward = self._apply_rubric(action, observation)
        return observation

    @property
    def state(self) -> State:
        return self._state


app = create_app(
    AdditionEnv,
    AdditionAction,
    AdditionObservation,
    env_name="ascent_addition",
    max_concurrent_envs=64,
)

"""Which problems each step trains on, reproducibly and resumably.

Problems are visited in a seeded permutation per epoch; the whole state is (epoch, position),
so a checkpoint stores two integers and a resumed run draws exactly the problems the
uninterrupted run would have drawn.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ascent.data.problems import Problem


@dataclass(frozen=True)
class DrawnPrompt:
    uid: int  # position in the run's stream of prompts: unique, so it can serve as a group id
    problem: Problem


class PromptSampler:
    def __init__(self, problems: list[Problem], *, seed: int, shuffle: bool) -> None:
        if not problems:
            raise ValueError("no training problems to sample from")
        self._problems = problems
        self._seed = seed
        self._shuffle = shuffle
        self.epoch = 0
        self.position = 0
        self._order = self._permutation(0)

    def _permutation(self, epoch: int) -> np.ndarray:
        if not self._shuffle:
            return np.arange(len(self._problems))
        return np.random.default_rng([self._seed, epoch]).permutation(len(self._problems))

    def draw(self, n: int) -> list[DrawnPrompt]:
        """The next `n` prompts; an epoch boundary inside the draw starts a new permutation."""
        drawn = []
        for _ in range(n):
            if self.position == len(self._problems):
                self.epoch, self.position = self.epoch + 1, 0
                self._order = self._permutation(self.epoch)
            uid = self.epoch * len(self._problems) + self.position
            drawn.append(DrawnPrompt(uid, self._problems[int(self._order[self.position])]))
            self.position += 1
        return drawn

    def state_dict(self) -> dict[str, int]:
        return {"epoch": self.epoch, "position": self.position}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.epoch, self.position = int(state["epoch"]), int(state["position"])
        self._order = self._permutation(self.epoch)

"""Which problems each step trains on, reproducibly and resumably.

Problems are visited in a seeded permutation per epoch; the state is (epoch, position, pool),
so a resumed run draws exactly the problems the uninterrupted run would have drawn. The pool
is the set of problem indices an epoch visits: all of them, unless history resampling has
dropped some (`start_epoch`).

With several sources (`weights`: each source's share), an epoch is as long as the pool and
gives each source its share of the places, spread evenly through the epoch so every batch mixes
the sources in about the same proportions; a source smaller than its share is repeated.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ascent.data.problems import Problem


def apportion(shares: np.ndarray, total: int) -> list[int]:
    """`total` places split in proportion to `shares` (summing to 1), by largest remainders."""
    exact = shares * total
    counts = np.floor(exact).astype(int)
    for i in np.argsort(-(exact - counts), kind="stable")[: total - int(counts.sum())]:
        counts[i] += 1
    return counts.tolist()


@dataclass(frozen=True)
class DrawnPrompt:
    uid: int  # position in the run's stream of prompts: unique, so it can serve as a group id
    problem: Problem
    index: int = -1  # the problem's index in the sampler's problem list


class PromptSampler:
    def __init__(
        self,
        problems: list[Problem],
        *,
        seed: int,
        shuffle: bool,
        weights: dict[str, float] | None = None,
    ) -> None:
        if not problems:
            raise ValueError("no training problems to sample from")
        self._problems = problems
        self._weights = weights
        self._seed = seed
        self._shuffle = shuffle
        self._pool = np.arange(len(problems))
        self.epoch = 0
        self.position = 0
        self._uid_base = 0  # uids handed out before this epoch
        self._order = self._permutation(0)

    @property
    def pool(self) -> list[int]:
        """Indices of the problems this epoch visits."""
        return self._pool.tolist()

    def _permutation(self, epoch: int) -> np.ndarray:
        if self._weights is not None:
            return self._mixed(epoch)
        if not self._shuffle:
            return self._pool
        return self._pool[np.random.default_rng([self._seed, epoch]).permutation(len(self._pool))]

    def _mixed(self, epoch: int) -> np.ndarray:
        """The epoch's order over several sources: each source's share of len(pool) places
        (largest remainders), its problems in their own seeded order (cycled to fill its
        places), the sources interleaved evenly. Sources with nothing left in the pool drop
        out and the others share their places."""
        assert self._weights is not None
        rng = np.random.default_rng([self._seed, epoch])
        members: dict[str, list[int]] = {}
        for i in self._pool.tolist():
            members.setdefault(self._problems[i].source, []).append(i)
        live = [name for name in self._weights if name in members]
        shares = np.array([self._weights[name] for name in live]) / sum(
            self._weights[name] for name in live
        )
        counts = apportion(shares, len(self._pool))
        places: list[tuple[float, int, int]] = []
        for rank, (name, count) in enumerate(zip(live, counts, strict=True)):
            own = np.asarray(members[name], dtype=np.int64)
            if self._shuffle:
                own = own[rng.permutation(len(own))]
            for j, index in enumerate(np.resize(own, count).tolist()):
                places.append(((j + 0.5) / count, rank, index))
        places.sort()
        return np.asarray([index for _, _, index in places], dtype=np.int64)

    def remaining(self) -> int:
        """Problems of this epoch not drawn yet."""
        return len(self._order) - self.position

    def start_epoch(self, pool: list[int] | None = None) -> None:
        """Begin the next epoch now, over `pool` (problem indices; None: the same pool)."""
        self._uid_base += self.position
        if pool is not None:
            if not pool:
                raise ValueError("an epoch needs at least one problem")
            self._pool = np.asarray(sorted(pool), dtype=np.int64)
        self.epoch, self.position = self.epoch + 1, 0
        self._order = self._permutation(self.epoch)

    def draw(self, n: int) -> list[DrawnPrompt]:
        """The next `n` prompts; an epoch boundary inside the draw starts a new permutation."""
        drawn = []
        for _ in range(n):
            if self.position == len(self._order):
                self.start_epoch()
            index = int(self._order[self.position])
            uid = self._uid_base + self.position
            drawn.append(DrawnPrompt(uid, self._problems[index], index))
            self.position += 1
        return drawn

    def state_dict(self) -> dict[str, Any]:
        return {
            "epoch": self.epoch,
            "position": self.position,
            "uid_base": self._uid_base,
            "pool": self.pool,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.epoch, self.position = int(state["epoch"]), int(state["position"])
        if "pool" in state:
            self._pool = np.asarray(state["pool"], dtype=np.int64)
            self._uid_base = int(state["uid_base"])
        else:  # checkpoints from before pools: every epoch was the full list
            self._uid_base = self.epoch * len(self._problems)
        self._order = self._permutation(self.epoch)

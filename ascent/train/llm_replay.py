"""Positive replay: a share of each batch drawn from a buffer of past correct completions.

Each step's fresh completions judged correct enter a FIFO buffer of `replay_buffer_size`;
the next steps draw `replay_ratio * batch_size` of them uniformly without replacement from
those sampled at most `replay_max_staleness` steps ago (older ones are evicted). Replayed rows
come from older policies: they keep their sampling-time log-probs as the behaviour policy's,
and the policy loss weights them by pi_old / pi_behaviour truncated at `[algorithm] is_cap`.
Their advantages come from the critic (the config refuses replay with group estimators:
a replayed row has no group).

The draw is seeded by (run seed, step), so a resumed run replays what the uninterrupted run
would have; the buffer itself is checkpointed.

Metrics: replay/rows (replayed this step), replay/buffer (eligible rows), replay/mean_age.
"""

from __future__ import annotations

import json
from collections import deque
from dataclasses import dataclass, fields
from typing import Any

import numpy as np

from ascent.data import Problem
from ascent.rewards import RewardOutput
from ascent.rollout import RolloutBatch
from ascent.train.llm_rollout import Scored


@dataclass(frozen=True)
class ReplayItem:
    row: Scored  # one correct completion (one row, response trimmed to its length)
    step: int  # the step that sampled it


class PositiveReplay:
    def __init__(self, capacity: int, max_staleness: int, seed: int, pad_id: int) -> None:
        self.items: deque[ReplayItem] = deque(maxlen=capacity)
        self.max_staleness = max_staleness
        self.seed = seed
        self.pad_id = pad_id

    def __len__(self) -> int:
        return len(self.items)

    def add(self, scored: Scored, step: int) -> int:
        """Buffer the correct, freshly sampled rows of `scored`; return how many."""
        added = 0
        for i, ok in enumerate(scored.correct):
            if ok and not (scored.replayed and scored.replayed[i]):
                row = scored.subset([i])
                row = Scored(
                    row.rollout.narrow(row.rollout.response_width),
                    row.problems,
                    row.completions,
                    row.rewards,
                )
                self.items.append(ReplayItem(row, step))
                added += 1
        return added

    def evict_stale(self, step: int) -> None:
        while self.items and step - self.items[0].step > self.max_staleness:
            self.items.popleft()

    def sample(self, n: int, step: int) -> tuple[Scored | None, dict[str, float]]:
        """Up to `n` buffered rows sampled at most max_staleness steps before `step`."""
        self.evict_stale(step)
        metrics = {"replay/buffer": float(len(self.items)), "replay/rows": 0.0}
        if not self.items or n <= 0:
            return None, metrics
        rng = np.random.default_rng([self.seed, step])
        picked = sorted(rng.choice(len(self.items), size=min(n, len(self.items)), replace=False))
        items = [self.items[i] for i in picked]
        rows = Scored.concat([it.row for it in items], self.pad_id)
        rows = Scored(
            rows.rollout, rows.problems, rows.completions, rows.rewards, (True,) * len(items)
        )
        metrics["replay/rows"] = float(len(items))
        metrics["replay/mean_age"] = sum(step - it.step for it in items) / len(items)
        return rows, metrics

    def state_dict(self) -> dict[str, Any]:
        """The buffer as tensors and plain values (checkpoints are data, never pickled
        objects); reward details and problem columns travel as JSON text."""
        return {"items": [_item_state(item) for item in self.items]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.items.clear()
        self.items.extend(_item_from_state(item) for item in state["items"])


def _item_state(item: ReplayItem) -> dict[str, Any]:
    row = item.row
    (problem,) = row.problems
    return {
        "step": item.step,
        "rollout": {f.name: getattr(row.rollout, f.name) for f in fields(RolloutBatch)},
        "problem": [problem.key, problem.prompt, problem.answer, json.dumps(problem.columns)],
        "completion": row.completions[0],
        "total": row.rewards.total[0],
        "components": {name: values[0] for name, values in row.rewards.components.items()},
        "details": json.dumps(row.rewards.details[0], default=str),
    }


def _item_from_state(state: dict[str, Any]) -> ReplayItem:
    key, prompt, answer, columns = state["problem"]
    row = Scored(
        RolloutBatch(**state["rollout"]),
        [Problem(key, prompt, answer, json.loads(columns))],
        [state["completion"]],
        RewardOutput(
            [state["total"]],
            {name: [value] for name, value in state["components"].items()},
            [json.loads(state["details"])],
        ),
    )
    return ReplayItem(row, int(state["step"]))

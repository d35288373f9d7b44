"""Prompts -> rollouts -> rewards: the scored batch a step learns from, and its metrics.

`Rollouts` is the rollout side of a run, everything that turns drawn prompts into scored
completions (the prompt stream, the formatter, the engine, the reward, this rank's sampling
generator). The batch sources (llm_sampling.py) and the held-out evaluation take it, never
the whole run, so nothing that samples can reach the trainer's workers.

Metric names follow TRL where TRL has one (reward, reward_std, frac_reward_zero_std,
completions/mean_length, ...), so a TRL user reads them as before:

    reward                     mean total reward of the batch
    reward/<name>              mean of each reward function (rows where it applies)
    reward_std                 mean over groups of the within-group reward std
    frac_reward_zero_std       fraction of groups whose rewards are all equal (no signal)
    completions/mean_length    mean response length in tokens (also min, max)
    completions/clipped_ratio  fraction of responses cut by max_new_tokens
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from typing import Any

import torch
from transformers.tokenization_utils_base import PreTrainedTokenizerBase

from ascent.algos import Turns
from ascent.data import (
    DrawnPrompt,
    Problem,
    PromptFormatter,
    PromptSampler,
    RewardHistory,
    reward_columns,
)
from ascent.observe.text_metrics import text_metrics
from ascent.rewards import CompositeReward, RewardOutput, is_correct
from ascent.rollout import RolloutBatch, RolloutEngine, SamplingParams
from ascent.train.distributed import Dist


@dataclass(frozen=True)
class Scored:
    """A rollout batch with its text and rewards."""

    rollout: RolloutBatch
    problems: list[Problem]  # one per row, found through the row's group id
    completions: list[str]
    rewards: RewardOutput  # total[i] is None when no reward function applies to row i
    # Rows replayed from the positive-replay buffer (sampled by an older policy); empty: none.
    replayed: tuple[bool, ...] = field(default=())
    # Multi-turn rows (agentic episodes): their turns and episodes, which the turn-level
    # estimators credit; None: each row is one completion with one reward.
    turns: Turns | None = None

    def __len__(self) -> int:
        return len(self.completions)

    @property
    def correct(self) -> list[bool]:
        """Per row: every reward that judges correctness says correct (False when none does)."""
        return [bool(is_correct(d)) for d in self.rewards.details]

    def subset(self, rows: list[int]) -> Scored:
        if self.turns is not None:
            raise ValueError("rows of agentic episodes are credited together: not split")
        r = self.rewards
        return Scored(
            self.rollout.select(
                torch.as_tensor(rows, dtype=torch.long, device=self.rollout.group_ids.device)
            ),
            [self.problems[i] for i in rows],
            [self.completions[i] for i in rows],
            RewardOutput(
                [r.total[i] for i in rows],
                {name: [values[i] for i in rows] for name, values in r.components.items()},
                [r.details[i] for i in rows],
            ),
            tuple(self.replayed[i] for i in rows) if self.replayed else (),
        )

    def blank(self) -> Scored:
        """Its first row with nothing in it to learn from (no chosen token, no reward): what
        a rank trains on when it has no rows and the other ranks have some, so that its
        collectives meet theirs."""
        if self.turns is not None or not len(self):
            rollout = blank_rollout(self.rollout.response_mask.device)
            turns = Turns.none(tuple(rollout.response_mask.shape), rollout.response_mask.device)
            empty = RewardOutput([None], {}, [{}])
            return Scored(rollout, [], [""], empty, turns=turns if self.turns is not None else None)
        row = self.subset([0])
        rollout = replace(row.rollout, response_mask=torch.zeros_like(row.rollout.response_mask))
        empty = RewardOutput([None], {name: [None] for name in row.rewards.components}, [{}])
        return Scored(rollout, row.problems, row.completions, empty)

    @classmethod
    def concat(cls, parts: list[Scored], pad_id: int) -> Scored:
        """The rows of `parts` in order (reward components missing from a part are None)."""
        parts = [p for p in parts if len(p)] or parts[:1]
        if len(parts) == 1:
            return parts[0]
        names = sorted({n for p in parts for n in p.rewards.components})
        replayed = [flag for p in parts for flag in (p.replayed or (False,) * len(p))]
        return cls(
            RolloutBatch.concat([p.rollout for p in parts], pad_id),
            [x for p in parts for x in p.problems],
            [x for p in parts for x in p.completions],
            RewardOutput(
                [x for p in parts for x in p.rewards.total],
                {
                    n: [x for p in parts for x in p.rewards.components.get(n, [None] * len(p))]
                    for n in names
                },
                [x for p in parts for x in p.rewards.details],
            ),
            tuple(replayed) if any(replayed) else (),
        )


def blank_rollout(device: torch.device, rows: int = 1) -> RolloutBatch:
    """`rows` rows of one prompt token and one response token that the policy did not choose
    (mask 0): nothing in them to learn from."""
    z = torch.zeros((rows, 1), dtype=torch.long, device=device)
    ones = torch.ones_like(z)
    return RolloutBatch(z, ones, z, z.float(), z.float(), z[:, 0], ones[:, 0].bool(), z[:, 0])


def empty_scored(device: torch.device, *, turns: bool = False) -> Scored:
    """A batch of no rows (`turns`: of agentic episodes)."""
    rollout = blank_rollout(device, rows=0)
    no_turns = Turns.none((0, 1), device) if turns else None
    return Scored(rollout, [], [], RewardOutput([], {}, []), turns=no_turns)


@dataclass
class Rollouts:
    """The rollout side of one rank of a run (its parts are stateful: the sampler's position,
    the generator's stream, the engine's weights advance as the run does)."""

    dist: Dist
    sampler: PromptSampler
    formatter: PromptFormatter  # problem -> the text and token ids the policy sees
    engine: RolloutEngine
    tokenizer: PreTrainedTokenizerBase
    reward: CompositeReward
    sampling: SamplingParams
    generator: torch.Generator  # this rank's sampling stream (its state is checkpointed)
    group_size: int
    prompts_per_step: int  # fresh prompts per step over all ranks
    history: RewardHistory | None = None  # [sampling] history_resampling only
    reflection: re.Pattern[str] | None = None  # [logging] reflection_words, for the metrics

    def collect(self, drawn: list[DrawnPrompt] | None = None) -> tuple[RolloutBatch, list[Problem]]:
        """Sample group_size completions for this rank's share of the drawn prompts (None: the
        step's next prompts; every rank draws the same ones, so a group is never split)."""
        if drawn is None:
            drawn = self.sampler.draw(self.prompts_per_step)
        drawn = self.dist.share(drawn)
        prompts = self.formatter.encode([d.problem for d in drawn])
        rollout = self.engine.generate(
            prompts, [d.uid for d in drawn], self.group_size, self.sampling, self.generator
        )
        by_uid = {d.uid: d.problem for d in drawn}
        return rollout, [by_uid[g] for g in rollout.group_ids.tolist()]

    def score(self, rollout: RolloutBatch, problems: list[Problem]) -> Scored:
        completions = self.tokenizer.batch_decode(rollout.response_ids, skip_special_tokens=True)
        prompts = [self.formatter.rendered(p) for p in problems]
        rewards = self.reward(prompts, completions, **reward_columns(problems))
        return Scored(rollout, problems, completions, rewards)

    def close(self) -> None:
        self.reward.close()
        self.engine.close()


def group_rewards(scored: Scored) -> dict[int, list[float]]:
    """Group id -> the rewards of its rows that have one."""
    groups: dict[int, list[float]] = {}
    for g, total in zip(scored.rollout.group_ids.tolist(), scored.rewards.total, strict=True):
        if total is not None:
            groups.setdefault(int(g), []).append(total)
    return groups


def trainable(scored: Scored, needs_groups: bool) -> Scored:
    """The rows that can be learned from: those with a reward (a row no reward function
    applies to is left out, not trained on as 0) and, for group-normalised estimators, whose
    group still has another row to compare with."""
    if scored.turns is not None:  # episodes: their turns carry the credit, all are kept
        return scored
    rows = [i for i, total in enumerate(scored.rewards.total) if total is not None]
    if needs_groups:
        ids = [int(g) for g in scored.rollout.group_ids[rows].tolist()] if rows else []
        rows = [i for i, g in zip(rows, ids, strict=True) if ids.count(g) >= 2]
    return scored if len(rows) == len(scored.completions) else scored.subset(rows)


def reward_metrics(
    scored: Scored, dist: Dist | None = None, reflection: re.Pattern[str] | None = None
) -> dict[str, float]:
    """Reward, length and text statistics of the whole batch, over every rank's rows when
    `dist` spans several (rows without a reward excluded from the reward ones)."""
    text = text_metrics(scored.completions, reflection)
    view = {
        "text": {k: v * len(scored.completions) for k, v in text.items()},
        "lengths": scored.rollout.response_lengths.tolist(),
        "clipped": (~scored.rollout.finished).tolist(),
        "groups": group_rewards(scored),
        "totals": list(scored.rewards.total),
        "components": dict(scored.rewards.components),
    }
    if dist is not None and dist.distributed:
        views = dist.gather(view)
        view = {
            "text": {k: sum(v["text"].get(k, 0.0) for v in views) for k in view["text"]},
            "lengths": [x for v in views for x in v["lengths"]],
            "clipped": [x for v in views for x in v["clipped"]],
            "groups": {g: r for v in views for g, r in v["groups"].items()},
            "totals": [x for v in views for x in v["totals"]],
            "components": {
                name: [x for v in views for x in v["components"].get(name, [])]
                for name in sorted({n for v in views for n in v["components"]})
            },
        }
    lengths = torch.tensor(view["lengths"], dtype=torch.float32)
    metrics = {
        "completions/mean_length": float(lengths.mean()),
        "completions/min_length": float(lengths.min()),
        "completions/max_length": float(lengths.max()),
        "completions/clipped_ratio": sum(view["clipped"]) / len(lengths),
        "frac_unscored": sum(t is None for t in view["totals"]) / len(lengths),
        **{k: total / len(lengths) for k, total in view["text"].items()},
    }
    groups = view["groups"]
    if groups:
        values = [v for vs in groups.values() for v in vs]
        stds = [torch.tensor(vs, dtype=torch.float64).std().item() for vs in groups.values()]
        stds = [0.0 if v != v else v for v in stds]  # a group of one has no spread
        metrics["reward"] = sum(values) / len(values)
        metrics["reward_std"] = sum(stds) / len(stds)
        metrics["frac_reward_zero_std"] = sum(v < 1e-8 for v in stds) / len(stds)
    for name, values in view["components"].items():
        present = [v for v in values if v is not None]
        if present:
            metrics[f"reward/{name}"] = sum(present) / len(present)
    return metrics


def sample_rows(scored: Scored, step: int, limit: int) -> list[dict[str, Any]]:
    """The first `limit` completions of a step, for `samples/step-N.jsonl`."""
    rows = []
    for i in range(min(limit, len(scored.completions))):
        rows.append(
            {
                "step": step,
                "group": int(scored.rollout.group_ids[i]),
                "prompt": scored.problems[i].prompt,  # the task's prompt, before the template
                "completion": scored.completions[i],
                "answer": scored.problems[i].answer,
                "reward": scored.rewards.total[i],
                "details": scored.rewards.details[i],
            }
        )
    return rows

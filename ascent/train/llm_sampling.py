"""Which fresh completions a step trains on: the batch sources the step loop draws from.

A source turns the rollout side of a run (`Rollouts`) into one step's scored batch:
`FreshBatches` draws, rolls out, scores and selects on the trainer's thread; `Prefetcher`
orders the next batches ahead on a thread of its own (`[rollout] async`). Both answer `next()`
with the batch to train on, its metrics, and every completion generated for it.

- DAPO dynamic sampling (`[sampling] dynamic`, Yu et al. 2025,
  https://arxiv.org/abs/2503.14476, section 3.2): a group whose rewards are all equal has
  zero advantage everywhere, so it is dropped and more prompts are drawn and rolled out,
  round after round, until `prompts_per_step` informative groups are in hand or `max_rounds`
  extra rounds have run (then the step trains on what it has, with a warning).
- SRPO History Resampling (`[sampling] history_resampling`, see `ascent.data.history`):
  every group's outcomes are recorded per prompt; when the epoch has too few prompts left
  for a step, it ends there (the rest wait for a later epoch, as with drop_last) and the
  next epoch's pool leaves out the prompts whose rollouts were all correct.

On several ranks every rank draws the same prompts and rolls out its share; what decides
which prompts or groups go on (the reward history, the count of informative groups, which
groups come first) is gathered from all ranks, so every rank decides the same.

Metrics: the reward metrics describe every completion generated in the step on all ranks
(so `frac_reward_zero_std` is the rate before filtering), plus

    dynamic/rounds          extra generation rounds this step
    dynamic/dropped_groups  groups dropped because their rewards were all equal
    dynamic/kept_groups     informative groups trained on
    resample/*              at an epoch end: seen, kept, dropped, zero_std_before / _after
"""

from __future__ import annotations

import logging
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Protocol

from ascent.config.llm_sections import SamplingSection
from ascent.data import DrawnPrompt, ResampleReport
from ascent.runtime import caller_threads
from ascent.train.distributed import Dist
from ascent.train.llm_rollout import Rollouts, Scored, group_rewards, reward_metrics

log = logging.getLogger("ascent.train")


class BatchSource(Protocol):
    """Where a step's fresh batch comes from. A source that samples with an engine of its own
    (agentic episodes) names it as `engine`, and the controller publishes new weights to it
    too."""

    def next(self, version: int) -> tuple[Scored, dict[str, float], Scored]:
        """The batch to train on (before `trainable`), its metrics, and every completion
        generated for it (dynamic sampling's dropped groups included); `version` is the
        trainer's policy version now."""
        ...

    def updated(self, version: int, trained: bool) -> None:
        """The step is over: the policy is at `version` (`trained`: this step moved it)."""
        ...

    def close(self) -> None: ...


def draw_prompts(src: Rollouts, n: int) -> tuple[list[DrawnPrompt], ResampleReport | None]:
    """The next `n` prompts; with history resampling, an epoch that cannot fill the draw
    ends first and the next one starts over the resampled pool."""
    report = None
    sampler = src.sampler
    if src.history is not None and sampler.remaining() < n:
        pool, report = src.history.end_epoch(sampler.epoch, sampler.pool, min_pool=n)
        sampler.start_epoch(pool)
    return sampler.draw(n), report


def record_history(src: Rollouts, scored: Scored, drawn: list[DrawnPrompt]) -> None:
    """Add every scored rollout's reward and correctness (on every rank) to its prompt's
    history, so that all ranks keep the same history and resample the same pool."""
    index = {d.uid: d.index for d in drawn}
    rewards: dict[int, list[float]] = {}
    correct: dict[int, list[bool]] = {}
    for g, total, ok in zip(
        scored.rollout.group_ids.tolist(), scored.rewards.total, scored.correct, strict=True
    ):
        if total is not None:
            rewards.setdefault(g, []).append(total)
            correct.setdefault(g, []).append(ok)
    for part in src.dist.gather((rewards, correct)):
        for g in sorted(part[0]):
            src.history.record(index[g], part[0][g], part[1][g])


def informative(scored: Scored) -> tuple[Scored, int]:
    """The rows of groups whose rewards are not all equal, and how many groups were dropped."""
    groups = group_rewards(scored)
    keep = {g for g, values in groups.items() if len(set(values)) > 1}
    rows = [i for i, g in enumerate(scored.rollout.group_ids.tolist()) if g in keep]
    return scored.subset(rows), len(groups) - len(keep)


def first_groups(scored: Scored, n: int, dist: Dist | None = None) -> Scored:
    """The rows of the first `n` groups in draw order (group ids grow with it) over all
    ranks: this rank keeps those of its own rows."""
    ids = scored.rollout.group_ids.tolist()
    mine = list(dict.fromkeys(ids))
    everyone = [g for part in (dist.gather(mine) if dist else [mine]) for g in part]
    wanted = set(sorted(everyone)[:n])
    return scored.subset([i for i, g in enumerate(ids) if g in wanted])


def _global_counts(dist: Dist, batch: Scored, dropped: int) -> tuple[int, int]:
    """Informative groups in `batch` and groups `dropped`, summed over ranks."""
    kept, dropped_all = dist.all_sum([float(len(group_rewards(batch))), float(dropped)])
    return int(kept), int(dropped_all)


class FreshBatches:
    """Each step's batch sampled now, by the weights the trainer has, with DAPO dynamic
    sampling and SRPO history resampling when `[sampling]` asks for them."""

    def __init__(self, src: Rollouts, cfg: SamplingSection) -> None:
        self.src = src
        self.cfg = cfg

    def _round(self, n: int, reports: list[ResampleReport]) -> Scored:
        drawn, report = draw_prompts(self.src, n)
        if report is not None:
            reports.append(report)
        scored = self.src.score(*self.src.collect(drawn))
        if self.src.history is not None:
            record_history(self.src, scored, drawn)
        return scored

    def next(self, version: int = 0) -> tuple[Scored, dict[str, float], Scored]:
        src, cfg, n = self.src, self.cfg, self.src.prompts_per_step
        reports: list[ResampleReport] = []
        generated = [self._round(n, reports)]
        batch, metrics = generated[0], {}
        if cfg.dynamic:
            batch, dropped = informative(generated[0])
            kept, dropped = _global_counts(src.dist, batch, dropped)
            while kept < n and len(generated) <= cfg.max_rounds:
                generated.append(self._round(n, reports))
                more, more_dropped = informative(generated[-1])
                batch = Scored.concat([batch, more], src.tokenizer.pad_token_id)
                kept, round_dropped = _global_counts(src.dist, batch, more_dropped)
                dropped += round_dropped
            if kept < n:
                log.warning(
                    "dynamic sampling: %d of %d groups had mixed rewards after %d extra rounds "
                    "([sampling] max_rounds); training on those. All-equal groups dominate: the "
                    "task is too easy or too hard for the policy, or raise max_rounds",
                    kept, n, cfg.max_rounds,
                )  # fmt: skip
            batch = first_groups(batch, n, src.dist)
            metrics = {
                "dynamic/rounds": float(len(generated) - 1),
                "dynamic/dropped_groups": float(dropped),
                "dynamic/kept_groups": float(min(kept, n)),
            }
        everything = Scored.concat(generated, src.tokenizer.pad_token_id)
        metrics = {**reward_metrics(everything, src.dist, src.reflection), **metrics}
        for report in reports:
            metrics.update(report.metrics())
        return batch, metrics, everything

    def updated(self, version: int, trained: bool) -> None:
        return None  # the next batch is sampled by the engine's weights, which are new

    def close(self) -> None:
        return None


class Prefetcher:
    """Asynchronous rollouts (`[rollout] async`): the next `depth` (max_staleness) batches
    are generated and scored on a background thread while the trainer updates on this one.

    Prompts are drawn on the trainer's thread when a batch is ordered, so the sampler is never
    used by two threads. A batch ordered before an update is sampled by the weights before it:
    a batch taken at version v was sampled by a version >= v - max_staleness, and the loss
    weights its tokens by min(pi_trainer / pi_behaviour, engine_is_cap). Batches in flight
    when a run stops are dropped, and a checkpoint saves the data position from before them
    (`sampler_state`): a resumed run orders their prompts again, sampled by its own policy
    (so it trains on the same prompts as an unbroken run, not on the same completions).
    """

    def __init__(self, src: Rollouts, depth: int) -> None:
        self.src = src
        self.depth = depth
        self.pool = ThreadPoolExecutor(
            1, thread_name_prefix="ascent-rollout", initializer=caller_threads()
        )
        self.queue: deque[Future[Scored]] = deque()
        self.positions: deque[dict] = deque()  # the sampler's state before each queued draw

    def _order(self) -> None:
        src = self.src
        self.positions.append(src.sampler.state_dict())
        drawn = src.sampler.draw(src.prompts_per_step)
        self.queue.append(self.pool.submit(lambda: src.score(*src.collect(drawn))))

    def sampler_state(self) -> dict:
        """The data position a checkpoint saves: before the batches ordered and not trained
        on yet, whose prompts a resumed run draws again."""
        return self.positions[0] if self.positions else self.src.sampler.state_dict()

    def next(self, version: int = 0) -> tuple[Scored, dict[str, float], Scored]:
        if not self.queue:
            self._order()
        self.positions.popleft()
        scored = self.queue.popleft().result()
        while len(self.queue) < self.depth:
            self._order()
        return scored, reward_metrics(scored, self.src.dist, self.src.reflection), scored

    def updated(self, version: int, trained: bool) -> None:
        return None  # batches ordered from now on are sampled by the new weights

    def close(self) -> None:
        self.pool.shutdown(wait=True, cancel_futures=True)

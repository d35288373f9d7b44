"""Which fresh completions a step trains on: draw prompts, roll out, score, select.

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

from ascent.data import DrawnPrompt, ResampleReport
from ascent.train.distributed import Dist
from ascent.train.llm_rollout import Scored, collect, group_rewards, reward_metrics, score
from ascent.train.llm_setup import LLMRun

log = logging.getLogger("ascent.train")


def draw_prompts(run: LLMRun, n: int) -> tuple[list[DrawnPrompt], ResampleReport | None]:
    """The next `n` prompts; with history resampling, an epoch that cannot fill the draw
    ends first and the next one starts over the resampled pool."""
    report = None
    if run.history is not None and run.sampler.remaining() < n:
        pool, report = run.history.end_epoch(run.sampler.epoch, run.sampler.pool, min_pool=n)
        run.sampler.start_epoch(pool)
    return run.sampler.draw(n), report


def record_history(run: LLMRun, scored: Scored, drawn: list[DrawnPrompt]) -> None:
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
    for part in run.dist.gather((rewards, correct)):
        for g in sorted(part[0]):
            run.history.record(index[g], part[0][g], part[1][g])


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


def _global_counts(run: LLMRun, batch: Scored, dropped: int) -> tuple[int, int]:
    """Informative groups in `batch` and groups `dropped`, summed over ranks."""
    kept, dropped_all = run.dist.all_sum([float(len(group_rewards(batch))), float(dropped)])
    return int(kept), int(dropped_all)


def _round(run: LLMRun, n: int, reports: list[ResampleReport]) -> Scored:
    drawn, report = draw_prompts(run, n)
    if report is not None:
        reports.append(report)
    scored = score(run, *collect(run, drawn))
    if run.history is not None:
        record_history(run, scored, drawn)
    return scored


def sample_batch(run: LLMRun) -> tuple[Scored, dict[str, float], Scored]:
    """The step's fresh scored completions (before `trainable`), their metrics, and every
    completion generated in the step (dynamic sampling's dropped groups included)."""
    if run.prefetcher is not None:
        scored = run.prefetcher.take(run)
        return scored, reward_metrics(scored, run.dist, run.reflection), scored
    n, cfg = run.prompts_per_step, run.cfg.sampling
    reports: list[ResampleReport] = []
    generated = [_round(run, n, reports)]
    batch, metrics = generated[0], {}
    if cfg.dynamic:
        batch, dropped = informative(generated[0])
        kept, dropped = _global_counts(run, batch, dropped)
        while kept < n and len(generated) <= cfg.max_rounds:
            generated.append(_round(run, n, reports))
            more, more_dropped = informative(generated[-1])
            batch = Scored.concat([batch, more], run.tokenizer.pad_token_id)
            kept, round_dropped = _global_counts(run, batch, more_dropped)
            dropped += round_dropped
        if kept < n:
            log.warning(
                "dynamic sampling: %d of %d groups had mixed rewards after %d extra rounds "
                "([sampling] max_rounds); training on those. All-equal groups dominate: the "
                "task is too easy or too hard for the policy, or raise max_rounds",
                kept, n, cfg.max_rounds,
            )  # fmt: skip
        batch = first_groups(batch, n, run.dist)
        metrics = {
            "dynamic/rounds": float(len(generated) - 1),
            "dynamic/dropped_groups": float(dropped),
            "dynamic/kept_groups": float(min(kept, n)),
        }
    everything = Scored.concat(generated, run.tokenizer.pad_token_id)
    metrics = {**reward_metrics(everything, run.dist, run.reflection), **metrics}
    for report in reports:
        metrics.update(report.metrics())
    return batch, metrics, everything


class Prefetcher:
    """Asynchronous rollouts (`[rollout] async`): the next `max_staleness` batches are
    generated and scored on a background thread while the trainer updates on this one.

    Prompts are drawn on the trainer's thread when a batch is ordered, so the sampler is never
    used by two threads. A batch ordered before an update is sampled by the weights before it:
    a batch taken at version v was sampled by a version >= v - max_staleness, and the loss
    weights its tokens by min(pi_trainer / pi_behaviour, engine_is_cap). Batches in flight
    when a run stops are dropped (their prompts are not drawn again on resume).
    """

    def __init__(self, run: LLMRun) -> None:
        self.depth = run.cfg.rollout.max_staleness
        self.pool = ThreadPoolExecutor(1, thread_name_prefix="ascent-rollout")
        self.queue: deque[Future[Scored]] = deque()

    def _order(self, run: LLMRun) -> None:
        drawn = run.sampler.draw(run.prompts_per_step)
        self.queue.append(self.pool.submit(lambda: score(run, *collect(run, drawn))))

    def take(self, run: LLMRun) -> Scored:
        if not self.queue:
            self._order(run)
        scored = self.queue.popleft().result()
        while len(self.queue) < self.depth:
            self._order(run)
        return scored

    def close(self) -> None:
        self.pool.shutdown(wait=True, cancel_futures=True)

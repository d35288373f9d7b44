"""Reward workers as Ray actors: a batch's rewards scored in parallel over the cluster's nodes.

`RayRewardPool` is called like `CompositeReward` (`pool(prompts, completions, **columns)` ->
`RewardOutput`), so the trainer does not know where rewards are computed. Each worker builds
the run's reward functions itself (its own math-verify processes, its own sandbox pool on its
node, isolated as in one process). A batch is cut into one contiguous share per worker and
put back together by position, so a share retried after its worker died is counted once.

A worker that dies (its node failed, `ray.kill`) is restarted by Ray, up to `[cluster]
max_restarts` times, and the share it held is retried on the new one; restarts are counted
(`cluster/reward_restarts`). A share that cannot be scored after the retries, or within
timeout_sec, stops the run with one line.
"""

from __future__ import annotations

from typing import Any

from ascent.cluster.waits import ActorGone, NoAnswer, get_through_restarts, wait_ready
from ascent.config.cluster import ClusterSection
from ascent.config.rewards import RewardSection, SandboxSection
from ascent.errors import AscentError
from ascent.rewards import RewardOutput


class Ledger:
    """Counts the starts of named actors (a restart is a start after the first)."""

    def __init__(self) -> None:
        self.starts: dict[str, int] = {}

    def started(self, name: str) -> int:
        self.starts[name] = self.starts.get(name, 0) + 1
        return self.starts[name]

    def restarts(self, prefix: str) -> int:
        return sum(n - 1 for name, n in self.starts.items() if name.startswith(prefix))


class RewardWorker:
    """One actor: the run's reward functions, scoring the shares it is given."""

    def __init__(
        self, name: str, reward: RewardSection, sandbox: SandboxSection, ledger: Any
    ) -> None:
        import ray

        from ascent.rewards import build_reward

        self.reward = build_reward(reward, sandbox)
        ray.get(ledger.started.remote(name))

    def ready(self) -> bool:
        return True

    def score(
        self, prompts: list[Any], completions: list[str], columns: dict[str, list[Any]]
    ) -> RewardOutput:
        return self.reward(prompts, completions, **columns)


class RayRewardPool:
    def __init__(
        self, cluster: ClusterSection, reward: RewardSection, sandbox: SandboxSection
    ) -> None:
        from ascent.cluster.runtime import connect, place

        ray = connect(cluster)
        self.ray = ray
        self.cluster = cluster
        self.names = list(reward.functions)
        self.ledger = ray.remote(num_cpus=0)(Ledger).remote()
        remote = ray.remote(num_cpus=cluster.cpus_per_reward, max_restarts=cluster.max_restarts)(
            RewardWorker
        )
        self._group, strategies = place(
            cluster, {"CPU": cluster.cpus_per_reward}, cluster.reward_workers
        )
        self.workers = [
            remote.options(scheduling_strategy=where).remote(
                f"reward-{i}", reward, sandbox, self.ledger
            )
            for i, where in enumerate(strategies)
        ]
        try:
            wait_ready(ray, self.workers, cluster.startup_timeout_sec, "a reward worker")
        except BaseException:
            self.close()
            raise

    def __call__(self, prompts: list[Any], completions: list[str], **columns: Any) -> RewardOutput:
        n = len(completions)
        if n == 0:
            return RewardOutput([], {name: [] for name in self.names}, [])
        shares = [
            (worker, (prompts[a:b], completions[a:b], {k: v[a:b] for k, v in columns.items()}))
            for worker, (a, b) in zip(self.workers, _shares(n, len(self.workers)), strict=False)
            if b > a
        ]
        futures = [worker.score.remote(*args) for worker, args in shares]
        return _join(
            [self._get(future, *share) for future, share in zip(futures, shares, strict=True)]
        )

    def _get(self, future: Any, worker: Any, args: tuple) -> RewardOutput:
        """One share's rewards; a share whose worker died is scored again by its restarted
        incarnation (each share is written into the batch once, by its position)."""
        from ray.exceptions import RayTaskError

        try:
            return get_through_restarts(
                self.ray,
                future,
                lambda: worker.score.remote(*args),
                self.cluster.timeout_sec,
                self.cluster.startup_timeout_sec,
            )
        except NoAnswer:
            raise AscentError(
                f"reward workers did not score a batch within [cluster] timeout_sec "
                f"({self.cluster.timeout_sec:g} s); raise it, or add reward_workers"
            ) from None
        except ActorGone as err:
            raise AscentError(
                f"a reward worker died and could not be restarted ([cluster] max_restarts "
                f"{self.cluster.max_restarts} used up): {err}"
            ) from None
        except RayTaskError as err:
            cause = err.cause if getattr(err, "cause", None) is not None else err
            if isinstance(cause, AscentError):
                raise AscentError(str(cause)) from None
            raise AscentError(f"a reward failed on a worker: {_first_line(cause)}") from None

    def metrics(self) -> dict[str, float]:
        restarts = self.ray.get(self.ledger.restarts.remote("reward-"))
        return {"cluster/reward_restarts": float(restarts)}

    def close(self) -> None:
        from ascent.cluster.runtime import unplace

        for worker in self.workers:
            self.ray.kill(worker)
        if self.workers:
            unplace(self._group)
        self.workers = []

    def __enter__(self) -> RayRewardPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _shares(n: int, k: int) -> list[tuple[int, int]]:
    """`k` contiguous (start, end) shares of `n` rows, as equal as can be."""
    step, extra = divmod(n, k)
    bounds, start = [], 0
    for i in range(k):
        end = start + step + (1 if i < extra else 0)
        bounds.append((start, end))
        start = end
    return bounds


def _join(parts: list[RewardOutput]) -> RewardOutput:
    names = sorted({n for p in parts for n in p.components})
    return RewardOutput(
        [x for p in parts for x in p.total],
        {n: [x for p in parts for x in p.components.get(n, [None] * len(p.total))] for n in names},
        [x for p in parts for x in p.details],
    )


def _first_line(err: BaseException) -> str:
    return (str(err).strip().splitlines() or [type(err).__name__])[-1][:200]

"""Rollout replicas as Ray actors: a `RolloutEngine` whose `generate` spreads the prompts over
N replicas, each a transformers engine with a copy of the policy of its own.

Weights reach the replicas after each update through Ray's object store (`sync_weights` puts
the actor's weight stream there once; every replica loads it), tagged with the policy
version, so every row says which version sampled it. A replica that dies is restarted by Ray
(up to `[cluster] max_restarts`), given the latest weights again, and its share of the
prompts is generated anew; restarts are counted (`cluster/rollout_restarts`).

Each replica samples with its own stream, seeded per call from the trainer's generator, so
a run is reproducible for a given number of replicas.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

import torch
from torch import Tensor

from ascent.cluster.rewards import Ledger, _shares
from ascent.cluster.waits import ActorGone, NoAnswer, get_through_restarts, wait_ready
from ascent.config.cluster import ClusterSection
from ascent.config.llm_sections import ModelSection
from ascent.errors import AscentError
from ascent.rollout import RolloutBatch, SamplingParams
from ascent.rollout.sampling import draw_seeds
from ascent.rollout.transport import RayObjectStore


class RolloutReplica:
    """One actor: the run's model (loaded from [model], weights from sync) and an engine."""

    def __init__(self, name: str, model: ModelSection, pad_id: int, eos: list[int], ledger: Any):
        import ray

        from ascent.models import load_frozen, resolve_dtype
        from ascent.rollout import TransformersEngine
        from ascent.runtime import configure_cpu

        configure_cpu(1)
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
        self.device = device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        dtype = resolve_dtype(model.dtype, device)
        self.engine = TransformersEngine(
            load_frozen(model.name_or_path, model, device, dtype), pad_id=pad_id, eos_ids=eos
        )
        ray.get(ledger.started.remote(name))

    def ready(self) -> bool:
        return True

    def sync(self, weights: dict[str, Tensor], version: int) -> int:
        self.engine.sync_weights(weights.items(), version)
        return version

    def generate(
        self,
        prompts: list[list[int]],
        group_ids: list[int],
        n: int,
        params: SamplingParams,
        seed: int,
    ) -> RolloutBatch:
        generator = torch.Generator(self.device).manual_seed(seed)  # the engine's device
        return self.engine.generate(prompts, group_ids, n, params, generator).to("cpu")


class RayRolloutEngine:
    exact_logprobs = False  # the replicas' own copies: the trainer checks their numbers
    takes_adapters = False

    def __init__(
        self, cluster: ClusterSection, model: ModelSection, pad_id: int, eos: Sequence[int]
    ) -> None:
        from ascent.cluster.runtime import connect, place

        self.ray = ray = connect(cluster)
        self.cluster = cluster
        self.pad_id = pad_id
        self.version = 0
        self._weights: Any = None  # the latest weights in the object store
        self.transport = RayObjectStore(ray)
        self.ledger = ray.remote(num_cpus=0)(Ledger).remote()
        remote = ray.remote(
            num_cpus=cluster.cpus_per_rollout,
            num_gpus=cluster.gpus_per_rollout,
            max_restarts=cluster.max_restarts,
            max_task_retries=0,  # a retried generate would run on a replica's initial weights
        )(RolloutReplica)
        bundle = {"CPU": cluster.cpus_per_rollout, "GPU": cluster.gpus_per_rollout}
        self._group, strategies = place(cluster, bundle, cluster.rollout_replicas)
        self.replicas = [
            remote.options(scheduling_strategy=where).remote(
                f"rollout-{i}", model, pad_id, list(eos), self.ledger
            )
            for i, where in enumerate(strategies)
        ]
        try:
            wait_ready(ray, self.replicas, cluster.startup_timeout_sec, "a rollout replica")
        except BaseException:
            self.close()
            raise

    def sync_weights(self, weights: Iterable[tuple[str, Tensor]], version: int) -> None:
        self._weights = self.transport.send(weights, version)
        self.version = version
        for replica in self.replicas:
            self._sync(replica)

    def _sync(self, replica: Any) -> None:
        """Give `replica` the latest weights, waiting out a restart if it is in one."""

        def call() -> Any:
            return replica.sync.remote(self._weights, self.version)

        self._wait(call(), call)

    def _wait(self, future: Any, again: Callable[[], Any]) -> Any:
        try:
            return get_through_restarts(
                self.ray, future, again, self.cluster.timeout_sec, self.cluster.startup_timeout_sec
            )
        except NoAnswer:
            raise AscentError(
                f"a rollout replica did not answer within [cluster] timeout_sec "
                f"({self.cluster.timeout_sec:g} s); raise it or lower the batch"
            ) from None
        except ActorGone as err:
            raise AscentError(
                "a rollout replica died and could not be restarted ([cluster] "
                f"max_restarts {self.cluster.max_restarts} used up): {err}"
            ) from None

    def generate(
        self,
        prompts: Sequence[Sequence[int]],
        group_ids: Sequence[int],
        n: int,
        params: SamplingParams,
        generator: torch.Generator | None = None,
    ) -> RolloutBatch:
        bounds = [(a, b) for a, b in _shares(len(prompts), len(self.replicas)) if b > a]
        seeds = draw_seeds(len(bounds), generator, high=2**62)
        parts = []
        for replica, (a, b), seed in zip(self.replicas, bounds, seeds, strict=False):
            args = ([list(p) for p in prompts[a:b]], list(group_ids[a:b]), n, params, seed)
            parts.append((replica, args))
        results = self._run(parts)
        return RolloutBatch.concat(results, self.pad_id)

    def _run(self, parts: list[tuple[Any, tuple]]) -> list[RolloutBatch]:
        """Every replica's share, started together; a replica that restarts is given the
        latest weights before its share is generated anew (its new incarnation starts from
        [model])."""

        def again(replica: Any, args: tuple) -> Callable[[], Any]:
            def call() -> Any:
                if self._weights is not None:
                    self._sync(replica)
                return replica.generate.remote(*args)

            return call

        futures = [replica.generate.remote(*args) for replica, args in parts]
        return [
            self._wait(future, again(replica, args))
            for future, (replica, args) in zip(futures, parts, strict=True)
        ]

    def metrics(self) -> dict[str, float]:
        restarts = self.ray.get(self.ledger.restarts.remote("rollout-"))
        return {"cluster/rollout_restarts": float(restarts)}

    def close(self) -> None:
        from ascent.cluster.runtime import unplace

        for replica in self.replicas:
            self.ray.kill(replica)
        if self.replicas:
            unplace(self._group)
        self.replicas = []

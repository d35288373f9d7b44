"""Config section `[cluster]`: where the run's roles are placed.

[cluster]
backend = "ray"            # "local" (default): everything in the trainer's processes
address = "auto"           # a running cluster (`ray start --head`), "ray://host:10001",
                           # or unset: start a local Ray for this run
rollout_replicas = 2       # rollout engines as Ray actors (0: the trainer's own engine)
reward_workers = 2         # reward scorers as Ray actors (0: in the trainer's process)
cpus_per_reward = 1
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from ascent.config.base import Section


class ClusterSection(Section):
    """`[cluster]`: one machine's processes, or roles placed on a Ray cluster."""

    backend: Literal["local", "ray"] = Field(
        "local",
        description="local: rollouts and rewards in the trainer's processes; ray: rollout "
        "replicas and reward workers as Ray actors spread over the cluster's nodes.",
    )
    address: str | None = Field(
        None,
        description='Ray cluster to join: "auto" (a cluster started on this node with `ray '
        'start --head`), "ray://host:10001" (Ray Client), or an IP:port; unset: start a '
        "local Ray for this run.",
    )
    num_cpus: int | None = Field(
        None, ge=1, description="CPUs of the local Ray this run starts (address unset)."
    )
    rollout_replicas: int = Field(
        0, ge=0, description="Rollout engines as Ray actors, prompts spread over them (0: none)."
    )
    reward_workers: int = Field(
        0, ge=0, description="Reward scorers as Ray actors, each batch split over them (0: none)."
    )
    cpus_per_rollout: float = Field(1.0, gt=0.0, description="CPUs each rollout replica takes.")
    gpus_per_rollout: float = Field(
        0.0, ge=0.0, description="GPUs each rollout replica takes (fractions share a GPU)."
    )
    cpus_per_reward: float = Field(1.0, gt=0.0, description="CPUs each reward worker takes.")
    placement: Literal["pack", "spread"] = Field(
        "pack",
        description="How the rollout replicas' and the reward workers' placement groups (one "
        "bundle per actor) are laid out: pack (as few nodes as possible) or spread (over as "
        "many nodes as possible).",
    )
    max_restarts: int = Field(
        3, ge=0, description="Times Ray restarts an actor that died; its work is retried."
    )
    timeout_sec: float = Field(
        60.0,
        gt=0.0,
        description="Longest wait for the cluster to answer, for resources to be granted, "
        "or for one batch of rewards; past it the run stops with one line.",
    )
    startup_timeout_sec: float = Field(
        600.0,
        gt=0.0,
        description="Longest wait for an actor to start or restart (its process, torch, its "
        "model): on a busy machine that takes minutes, not the seconds of an answer.",
    )

    @model_validator(mode="after")
    def _ray_settings_need_ray(self) -> ClusterSection:
        if self.backend == "local":
            for key in type(self).model_fields:
                if key != "backend" and self.explicitly_set(key):
                    raise ValueError(
                        f'[cluster] {key}: only the ray backend uses it; set backend = "ray" '
                        "or remove the key"
                    )
        elif not (self.rollout_replicas or self.reward_workers):
            raise ValueError(
                '[cluster] backend = "ray" places nothing: set rollout_replicas and/or '
                "reward_workers (e.g. 2)"
            )
        for key, count in (("cpus_per_rollout", "rollout_replicas"),
                           ("gpus_per_rollout", "rollout_replicas"),
                           ("cpus_per_reward", "reward_workers")):  # fmt: skip
            if self.explicitly_set(key) and not getattr(self, count):
                raise ValueError(
                    f"[cluster] {key}: {count} = 0, so no actor takes it; set {count} or "
                    "remove the key"
                )
        if self.address is not None and self.num_cpus is not None:
            raise ValueError(
                "[cluster] num_cpus: it sizes a Ray this run starts, but address joins a "
                "running cluster; remove one of them"
            )
        return self

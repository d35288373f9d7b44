"""Joining (or starting) the Ray cluster of a run, and refusing early what cannot work.

Every failure a user can fix is one line, within `[cluster] timeout_sec`: Ray missing, an
address nobody answers at, a cluster without the CPUs or GPUs the placement asks for (Ray
would otherwise wait for them forever), a version of Ray on a node other than the driver's.
"""

from __future__ import annotations

import importlib
import os
import socket
import sys
from typing import Any

from ascent.config.cluster import ClusterSection
from ascent.errors import AscentError

AUTH_MODE = "RAY_AUTH_MODE"
# Ray starts its workers at nice 15, as background work; a run's rollout replicas and reward
# workers are its main work, and at nice 15 any other job on the cores starved them for
# minutes. A local Ray that ascent starts runs them at the trainer's priority.
WORKER_NICENESS = ("RAY_worker_niceness", "0")


def require_ray() -> Any:
    try:
        return importlib.import_module("ray")
    except ImportError:
        raise AscentError(
            "[cluster] backend = \"ray\" needs Ray: pip install 'ascent[ray]'"
        ) from None


def connect(cluster: ClusterSection) -> Any:
    """`ray`, initialised for this run (a no-op when it already is)."""
    ray = require_ray()
    if ray.is_initialized():
        return ray
    os.environ.setdefault("RAY_DEDUP_LOGS", "0")
    os.environ.setdefault(*WORKER_NICENESS)  # read by the local Ray that ray.init starts
    kwargs: dict[str, Any] = {"ignore_reinit_error": True, "log_to_driver": True}
    if cluster.address is None:
        kwargs["num_cpus"] = cluster.num_cpus
        kwargs["include_dashboard"] = False
    else:
        _reachable(cluster.address, min(cluster.timeout_sec, 5.0))
        kwargs["address"] = cluster.address
    try:
        ray.init(**kwargs)
    except (ConnectionError, TimeoutError, RuntimeError, ValueError) as err:
        first = (str(err).strip().splitlines() or [type(err).__name__])[0][:200]
        where = cluster.address or "a local Ray"
        raise AscentError(
            f"[cluster] address: cannot join {where} ({first}); start one with `ray start "
            '--head` and use address = "auto", or leave address unset for a local Ray'
        ) from None
    return ray


def _reachable(address: str, timeout: float) -> None:
    """Fail fast (one line) when nothing listens at host:port: Ray Client itself waits
    30 s before giving up."""
    target = address.removeprefix("ray://")
    host, sep, port = target.rpartition(":")
    if not sep or not port.isdigit():
        return  # "auto" and the like: Ray finds (or does not find) the cluster at once
    try:
        socket.create_connection((host or "127.0.0.1", int(port)), timeout=timeout).close()
    except OSError as err:
        raise AscentError(
            f"[cluster] address: nothing answers at {address} ({err.strerror or err}); start "
            "the cluster (`ray start --head`) or fix the address"
        ) from None


def join_handle(cluster: ClusterSection) -> tuple[str, str | None]:
    """What another process of the run needs to join this process's Ray cluster: its
    address (host:port) and the authentication mode Ray chose for it (a local cluster
    started by `ray.init` turns token authentication on in this process's environment)."""
    ray = connect(cluster)
    return str(ray.get_runtime_context().gcs_address), os.environ.get(AUTH_MODE)


def join(cluster: ClusterSection, handle: tuple[str, str | None]) -> Any:
    """Join the cluster another process of the run leads (`join_handle`)."""
    address, auth = handle
    if auth is not None and os.environ.get(AUTH_MODE) != auth:
        os.environ[AUTH_MODE] = auth
        if "ray" in sys.modules:  # Ray read its settings when imported: have it read them again
            from ray._raylet import Config  # what Ray itself calls when it turns tokens on

            Config.initialize("")
    return connect(cluster.model_copy(update={"address": address}))


def needed(cluster: ClusterSection, reward_pools: int = 1) -> dict[str, float]:
    """The CPUs and GPUs the configured actors ask for (`reward_pools`: one per rank)."""
    return {
        "CPU": cluster.rollout_replicas * cluster.cpus_per_rollout
        + reward_pools * cluster.reward_workers * cluster.cpus_per_reward,
        "GPU": cluster.rollout_replicas * cluster.gpus_per_rollout,
    }


def check_cluster(cluster: ClusterSection, reward_pools: int = 1) -> None:
    """Everything a run needs of the cluster, checked before any actor is started."""
    check_versions(connect(cluster))
    check_resources(cluster, reward_pools)


def check_resources(cluster: ClusterSection, reward_pools: int = 1) -> None:
    """Refuse a placement the cluster cannot satisfy (Ray would wait for it forever)."""
    ray = connect(cluster)
    have = ray.cluster_resources()
    for resource, amount in needed(cluster, reward_pools).items():
        if amount > have.get(resource, 0.0) + 1e-9:
            raise AscentError(
                f"[cluster] the placement needs {amount:g} {resource}s but the cluster has "
                f"{have.get(resource, 0.0):g}; lower rollout_replicas / reward_workers or "
                "their cpus_per_* / gpus_per_*, or add nodes"
            )


def place(cluster: ClusterSection, bundle: dict[str, float], count: int) -> tuple[Any, list[Any]]:
    """A placement group of `count` copies of `bundle`, laid out as `[cluster] placement` says
    (granted within timeout_sec or refused in one line), and the scheduling strategy that puts
    the i-th actor in the i-th bundle. A restarted actor goes back to its bundle."""
    connect(cluster)
    from ray.util.placement_group import placement_group, remove_placement_group
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    strategy = cluster.placement.upper()  # PACK or SPREAD
    one = {resource: amount for resource, amount in bundle.items() if amount > 0}
    group = placement_group([dict(one) for _ in range(count)], strategy=strategy)
    if not group.wait(timeout_seconds=cluster.timeout_sec):
        remove_placement_group(group)
        raise AscentError(
            f"[cluster] Ray did not grant {count} bundles ({strategy}) within "
            f"{cluster.timeout_sec:g} s; the cluster lacks free resources for the placement"
        )
    return group, [
        PlacementGroupSchedulingStrategy(group, placement_group_bundle_index=i)
        for i in range(count)
    ]


def unplace(group: Any) -> None:
    """Give a placement group's resources back (its actors are gone)."""
    from ray.util.placement_group import remove_placement_group

    remove_placement_group(group)


def check_versions(ray: Any) -> str:
    """Refuse a cluster with a node on another Ray than the driver's (actors would fail in
    ways that do not name the cause); the driver's version when all agree."""
    driver = ray.__version__
    others = {node: v for node, v in node_versions(ray).items() if v != driver}
    if others:
        listed = ", ".join(f"{node} has {v}" for node, v in sorted(others.items()))
        raise AscentError(
            f"[cluster] the driver runs Ray {driver} but {listed}; install one version everywhere"
        )
    return driver


def node_versions(ray: Any) -> dict[str, str]:
    """Ray's version on every alive node (from the nodes' own reports)."""
    versions = {}
    for node in ray.nodes():
        if node.get("Alive"):
            labels = node.get("Labels") or {}
            versions[node.get("NodeManagerAddress", "?")] = labels.get(
                "ray.io/ray-version", getattr(ray, "__version__", "?")
            )
    return versions

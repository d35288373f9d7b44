"""Gymnasium environments' state as plain data, for checkpoints that never hold code.

A classic PPO checkpoint continues the episodes in flight, so a resumed run is bit-identical
to an unbroken one. Pickling the env would put code into the checkpoint (and loading it would
run it), so instead the state of every layer (the vector env, each sub-env and its wrappers)
is read attribute by attribute: numbers, strings, arrays and the random generators' states.
Configuration that stepping never changes (spaces, specs, the env factories, metadata) is
skipped. An attribute of any other type means the env has state this cannot see (a physics
engine, a subprocess): `snapshot` returns None and the run resumes with fresh episodes.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from gymnasium.envs.registration import EnvSpec

_LINKS = ("env", "envs")  # the next layer(s): snapshotted as layers of their own
_CONFIG = (gym.Space, EnvSpec, enum.Enum)
_SKIPPED_KEYS = ("env_fns", "metadata", "_saved_kwargs", "_metadata", "spec", "_cached_spec")


class Unsupported(Exception):
    """An attribute whose state cannot be written as plain data."""


def snapshot(envs: gym.vector.VectorEnv) -> list[dict[str, Any]] | None:
    """Every layer's plain state, outermost first; None when some state cannot be captured."""
    try:
        return [_layer_state(layer) for layer in _layers(envs)]
    except Unsupported:
        return None


def restore(envs: gym.vector.VectorEnv, layers: list[dict[str, Any]]) -> None:
    """Put `snapshot`'s state back into a freshly built env of the same config."""
    found = _layers(envs)
    if len(found) != len(layers):
        raise ValueError(f"the env has {len(found)} layers, the checkpoint {len(layers)}")
    for layer, state in zip(found, layers, strict=True):
        for name, value in state.items():
            setattr(layer, name, _decode(value, getattr(layer, name, None)))


def _layers(envs: Any) -> list[Any]:
    layers, todo = [], [envs]
    while todo:
        layer = todo.pop(0)
        layers.append(layer)
        inner = vars(layer)
        if isinstance(inner.get("envs"), list):
            todo.extend(inner["envs"])
        if isinstance(inner.get("env"), gym.Env):
            todo.append(inner["env"])
    return layers


def _layer_state(layer: Any) -> dict[str, Any]:
    state = {}
    for name, value in vars(layer).items():
        if name in _LINKS or name in _SKIPPED_KEYS or isinstance(value, _CONFIG):
            continue
        if callable(value) and not isinstance(value, np.random.Generator):
            continue  # methods and factories bound to the layer
        state[name] = _encode(value)
    return state


def _encode(value: Any) -> Any:
    if isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, np.generic):
        return {"numpy_scalar": value.item(), "dtype": str(value.dtype)}
    if isinstance(value, np.ndarray):
        if value.dtype == object:
            raise Unsupported
        return {"ndarray": torch.from_numpy(np.array(value, copy=True)), "dtype": str(value.dtype)}
    if isinstance(value, np.random.Generator):
        return {"generator": value.bit_generator.state}
    if type(value) in (list, tuple):
        items = [_encode(v) for v in value]
        return {"tuple": items} if isinstance(value, tuple) else items
    if value is None:
        return None
    raise Unsupported(type(value).__name__)


def _decode(value: Any, current: Any) -> Any:
    if isinstance(value, list):
        return [_decode(v, None) for v in value]
    if not isinstance(value, dict):
        return value
    if "ndarray" in value:
        return value["ndarray"].numpy().astype(value["dtype"], copy=True)
    if "numpy_scalar" in value:
        return np.dtype(value["dtype"]).type(value["numpy_scalar"])
    if "tuple" in value:
        return tuple(_decode(v, None) for v in value["tuple"])
    if "generator" in value:
        return _generator(value["generator"], current)
    raise ValueError(f"unknown env state entry {sorted(value)}")


def _generator(state: dict[str, Any], current: Any) -> np.random.Generator:
    rng = current if isinstance(current, np.random.Generator) else None
    if rng is None or type(rng.bit_generator).__name__ != state["bit_generator"]:
        make: Callable[[], np.random.BitGenerator] = getattr(np.random, state["bit_generator"])
        rng = np.random.Generator(make())
    rng.bit_generator.state = state
    return rng

"""How new weights travel from the trainer to an engine: one explicit transport per engine.

The trainer hands an engine its weights as (name, tensor) pairs (`Actor.weights()`: shards
gathered, LoRA merged or the adapters alone); the engine's transport moves them to where the
engine samples, and says so by name (`engine.transport.name`, logged once per run):

    in_place      nothing travels: the engine decodes the trainer's own module
    state_dict    a detached copy in this process's memory (an engine's own model; vLLM colocated)
    safetensors   one file per version under a sync folder, written atomically, read by the
                  servers (vLLM server mode; a shared filesystem across nodes)
    ray           the Ray object store: one `ray.put` per version, fetched by every replica
    nccl          GPU to GPU: a broadcast into each vLLM server's workers through vLLM's
                  weight-transfer engine (`vllm_nccl.py`, `[rollout.vllm] weight_sync =
                  "nccl"`; refused in one line off the GPUs, not yet run on one)

Exactly one process publishes per run: on several ranks the engines that serve the whole run
are rank 0's (`ascent.train.run_engine`), and the others only take part in gathering shards.
A `send` returns the parcel the engine reads (a dict, a path, an object reference); the
previous parcel is released once the engine has the new one, so a reader never sees a
half-written version and nothing accumulates.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Protocol

from torch import Tensor

Weights = Iterable[tuple[str, Tensor]]


class Transport(Protocol):
    name: str

    def send(self, weights: Weights, version: int) -> Any:
        """Move `weights` (policy `version`) to where the engine reads them; the parcel."""
        ...

    def release(self, parcel: Any) -> None:
        """The engine holds a newer parcel: free this one."""
        ...


class InPlace:
    """The engine decodes the trainer's module: nothing is sent (the weights are not read)."""

    name = "in_place"

    def send(self, weights: Weights, version: int) -> None:
        return None

    def release(self, parcel: Any) -> None:
        pass


class StateDict:
    """A detached copy, in this process (`clone`: one the trainer's next update cannot touch,
    for an engine that loads it later; else the tensors themselves, for one that copies them
    into its own weights at once)."""

    name = "state_dict"

    def __init__(self, clone: bool = True) -> None:
        self.clone = clone

    def send(self, weights: Weights, version: int) -> dict[str, Tensor]:
        if self.clone:
            return {name: t.detach().clone() for name, t in weights}
        return {name: t.detach() for name, t in weights}

    def release(self, parcel: Any) -> None:
        pass


class SafetensorsDir:
    """`sync_dir/version-N/model.safetensors`, written under a temporary name and renamed into
    place; a released version's folder is deleted. Tied weights are written under each name
    (safetensors stores no shared tensors)."""

    name = "safetensors"

    def __init__(self, sync_dir: Path) -> None:
        self.sync_dir = sync_dir

    def send(self, weights: Weights, version: int) -> Path:
        from safetensors.torch import save_file

        target = self.sync_dir / f"version-{version:06d}"
        tmp = self.sync_dir / f".tmp-version-{version:06d}"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        state = {name: t.detach().to("cpu").clone() for name, t in weights}
        save_file(state, str(tmp / "model.safetensors"), metadata={"format": "pt"})
        shutil.rmtree(target, ignore_errors=True)
        os.replace(tmp, target)
        return target

    def release(self, parcel: Any) -> None:
        if parcel is not None:
            shutil.rmtree(parcel, ignore_errors=True)


class RayObjectStore:
    """One `ray.put` of the CPU tensors per version; replicas fetch it by reference."""

    name = "ray"

    def __init__(self, ray: Any) -> None:
        self.ray = ray

    def send(self, weights: Weights, version: int) -> Any:
        return self.ray.put({name: t.detach().cpu() for name, t in weights})  # put copies

    def release(self, parcel: Any) -> None:
        pass  # the object store frees it when no reference is left

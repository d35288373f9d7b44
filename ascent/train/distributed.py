"""Ranks of one training run: who this process is, and the few collectives the loop needs.

A run on N ranks is N copies of the same loop (SPMD, as under torchrun): every rank draws the
same global prompts and rolls out its own share, the actor and critic are sharded with FSDP2
over all ranks, and rank 0 alone logs, prints, evaluates' bookkeeping and writes the files
that are not shards. `Dist.single()` is the one-process case, where every collective is the
identity, so the loop has one code path.

Every rank must call the collectives below in the same order; the loop is written so that no
rank-dependent branch skips one (what differs per rank is data, never control flow).

`launch(nproc, fn, *args)` starts `nproc` ranks of `fn` with torch's elastic launcher
(`ascent train --nproc N`); `torchrun --nproc-per-node N -m ascent train ...` works the same,
since `Dist.from_env()` reads the variables both set. A rank that fails takes the others down
(the launcher stops them) and its error is reported in one line.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, TypeVar

import torch
import torch.distributed as dist

from ascent.errors import AscentError

T = TypeVar("T")
TIMEOUT = timedelta(minutes=30)  # longer than any rank-0-only work (export, evaluation)


@dataclass(frozen=True)
class Dist:
    rank: int = 0
    world_size: int = 1
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))

    @classmethod
    def single(cls, device: torch.device | None = None) -> Dist:
        return cls(0, 1, device or torch.device("cpu"))

    @classmethod
    def from_env(cls, device_name: str = "auto") -> Dist:
        """This process's rank: from RANK / WORLD_SIZE (set by torchrun or `launch`), joining
        the process group (nccl on CUDA, gloo on CPU); one process when they are unset."""
        world = int(os.environ.get("WORLD_SIZE", "1"))
        cuda = torch.cuda.is_available() and device_name in ("auto", "cuda")
        if world == 1:
            return cls.single(torch.device("cuda" if cuda else "cpu"))
        rank, local = int(os.environ["RANK"]), int(os.environ.get("LOCAL_RANK", "0"))
        if cuda:
            torch.cuda.set_device(local)
            device = torch.device("cuda", local)
        else:
            device = torch.device("cpu")
        if not dist.is_initialized():
            backend = "cpu:gloo,cuda:nccl" if cuda else "gloo"
            dist.init_process_group(backend, timeout=TIMEOUT)
        return cls(rank, world, device)

    @property
    def distributed(self) -> bool:
        return self.world_size > 1

    @property
    def main(self) -> bool:
        return self.rank == 0

    def share(self, items: list[T]) -> list[T]:
        """This rank's contiguous share of `items` (equal shares; the config makes the
        number of prompts per step divisible by the world size)."""
        n = len(items) // self.world_size
        return items[self.rank * n : (self.rank + 1) * n]

    def all_sum(self, values: list[float]) -> list[float]:
        """Element-wise sum over ranks (float64, so counts stay exact)."""
        if not self.distributed:
            return list(values)
        t = torch.tensor(values, dtype=torch.float64)
        dist.all_reduce(t)
        return t.tolist()

    def all_max(self, value: int) -> int:
        if not self.distributed:
            return value
        t = torch.tensor([value], dtype=torch.int64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return int(t.item())

    def any(self, flag: bool) -> bool:
        return bool(self.all_max(int(flag)))

    def gather(self, obj: T) -> list[T]:
        """Every rank's `obj`, in rank order, on every rank (small Python objects only)."""
        if not self.distributed:
            return [obj]
        out: list[Any] = [None] * self.world_size
        dist.all_gather_object(out, obj)
        return out

    def broadcast(self, obj: T) -> T:
        """Rank 0's `obj` on every rank."""
        if not self.distributed:
            return obj
        box = [obj]
        dist.broadcast_object_list(box, src=0)
        return box[0]

    def scatter(self, objs: list[T] | None) -> T:
        """Rank r's item of rank 0's list `objs` (None on the other ranks)."""
        if not self.distributed:
            assert objs is not None
            return objs[0]
        box: list[Any] = [None]
        dist.scatter_object_list(box, objs if self.main else None, src=0)
        return box[0]

    def barrier(self) -> None:
        if self.distributed:
            dist.barrier()

    def close(self) -> None:
        if self.distributed and dist.is_initialized():
            dist.destroy_process_group()


def launch(nproc: int, fn: Callable[..., Any], *args: Any) -> Any:
    """Run `fn(*args)` on `nproc` local ranks; return rank 0's result.

    `fn` must be importable (a module-level function) and its arguments picklable. Each rank
    gets RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT as under torchrun.
    """
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.launcher.api import LaunchConfig, elastic_launch

    os.environ.setdefault("OMP_NUM_THREADS", "1")  # torchrun sets it; the API does not
    config = LaunchConfig(
        min_nodes=1,
        max_nodes=1,
        nproc_per_node=nproc,
        rdzv_backend="c10d",
        rdzv_endpoint="localhost:0",
        run_id=f"ascent-{os.getpid()}",
        max_restarts=0,
        monitor_interval=0.1,
        start_method="spawn",
    )
    try:
        results = elastic_launch(config, fn)(*args)
    except ChildFailedError as err:
        rank, failure = err.get_first_failure()
        raise AscentError(f"rank {rank} failed: {_failure_line(failure)}") from None
    return results[0]


def _failure_line(failure: Any) -> str:
    """The last line of a rank's error (the exception and its message), or its exit code."""
    message = getattr(failure, "message", None)
    if isinstance(message, dict):
        message = message.get("message", "")
    text = str(message or "").strip()
    if text:
        last = [ln for ln in text.splitlines() if ln.strip()][-1].strip()
        name, sep, rest = last.partition(": ")
        if sep and name.replace(".", "").replace("_", "").isalnum():  # "pkg.SomeError: ..."
            last = rest if name.endswith(("AscentError", "ConfigError")) else last
        return last[:300]
    return f"exit code {getattr(failure, 'exitcode', '?')}"

"""Process-wide runtime settings a run needs before it touches a tensor.

Threads are set deliberately: on a small machine torch's default (one OpenMP thread per core)
collapses as soon as anything else runs, e.g. sandbox workers scoring rewards (measured on a
2-core machine: a GRPO step went from 0.094 s to 5.5 s with one other busy core; one thread
held at 0.13 s). Denormal flushing made CPU training of tiny models up to 20x faster.

The C allocator is told to give large blocks back during a training update: glibc serves a
block above its mmap threshold from a mapping of its own, unmapped when freed, but it raises
that threshold (up to 32 MiB) every time such a block is freed, so after the first backward
pass the activations and gradients of a real model come from the heap, and the heap keeps
what it held at its peak. Measured on SmolLM2-135M (benchmarks/real_model.py's GRPO step,
bf16, 2 cores): about 2.5 GB of the process's peak RSS was memory freed but kept. Fixing the
threshold at 4 MiB (and the trim threshold at 8 MiB, which glibc otherwise raises with it)
took the step's peak from 7.9 to 6.7 GB for ~10% more update time: fresh mappings fault their
pages in. Generation pays the same way (its 25 MB of logits a decode step; 15% slower), so
the thresholds are fixed only inside `large_blocks_returned()`, around an update, and set to
glibc's own ceiling (32 / 64 MiB) outside it, from `configure_cpu` on, so a run's first
generation (and its evaluation before training) does not wait for an update to get there.
1 MiB reached 5.4 GB but cost 40-45%, and transparent huge pages for the mappings
(GLIBC_TUNABLES=glibc.malloc.hugetlb=1) were slower still. A MALLOC_MMAP_THRESHOLD_ set in
the environment wins: ascent then leaves both alone.

oneDNN, which runs torch's CPU matrix products, keeps every primitive it builds in two caches
keyed by shape (its own, ONEDNN_PRIMITIVE_CACHE_CAPACITY, and torch's ideep layer's,
LRU_CACHE_CAPACITY), 1,024 entries each by default. A training run meets a new shape with
every new micro-batch length and every row count of a decode step, and each entry holds
half a megabyte or more, so the caches grew a run's memory step after step (SmolLM2's GRPO step,
bf16, checkpointed: the heap in use rose ~90 MB a step, peak RSS 4.7 GB after the 2nd step,
5.2 after the 4th, 5.9 after the 6th). At 64 entries each (set only where the environment does
not) the 4-step peak was 4.5 GB instead of 5.4, and neither generation nor the update was
slower (16 entries: the same).
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import os
import random
import socket
import sys
import threading
from collections.abc import Callable, Coroutine, Iterator
from typing import Any, TypeVar

import numpy as np
import torch

from ascent.config.run import RunSection
from ascent.errors import AscentError

T = TypeVar("T")


def resolve_threads(requested: int, ranks: int = 1) -> int:
    """`requested` threads, or for 0 half the cores shared between this machine's `ranks`
    (at least 1 each) so reward workers keep a core."""
    if requested > 0:
        return requested
    return max(1, (os.cpu_count() or 1) // 2 // ranks)


ONEDNN_CACHE_ENTRIES = 64  # per oneDNN primitive cache (see the module's docstring)
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # mallopt's parameter numbers (glibc's malloc.h)
MMAP_THRESHOLD_BYTES = 4 << 20
# Fixing the mmap threshold also stops glibc from raising the trim threshold with it (to twice
# the mmap threshold); left at its 128 KiB default, the heap's top would be given back and
# faulted in again around every medium-sized tensor.
TRIM_THRESHOLD_BYTES = 2 * MMAP_THRESHOLD_BYTES
# glibc's ceiling for its own moving thresholds (DEFAULT_MMAP_THRESHOLD_MAX on 64-bit), where
# a model's first large frees put them anyway: the setting outside an update.
CEILING_MMAP_BYTES = 32 << 20

_tune_allocator = False  # set by configure_cpu where glibc's thresholds are ascent's to set


def _mallopt(mmap: int, trim: int) -> bool:
    """Set glibc's mmap and trim thresholds; False off glibc (musl, say: its own rules)."""
    try:
        libc = ctypes.CDLL("libc.so.6")
        return bool(libc.mallopt(M_MMAP_THRESHOLD, mmap)) and bool(
            libc.mallopt(M_TRIM_THRESHOLD, trim)
        )
    except (OSError, AttributeError):
        return False


def return_large_blocks(
    threshold: int = MMAP_THRESHOLD_BYTES, trim: int = TRIM_THRESHOLD_BYTES
) -> bool:
    """Fix glibc's mmap threshold at `threshold` bytes and its trim threshold at `trim`;
    whether it was set (False off glibc, or when the environment sets the mmap threshold)."""
    if not sys.platform.startswith("linux") or "MALLOC_MMAP_THRESHOLD_" in os.environ:
        return False
    return _mallopt(threshold, trim)


@contextlib.contextmanager
def large_blocks_returned() -> Iterator[None]:
    """Inside: freed blocks of 4 MiB and more go back to the system at once (a training
    update's activations and gradients); after: glibc's ceiling again, for generation's
    sake (see the module's docstring). A no-op unless `configure_cpu` enabled it."""
    if not (_tune_allocator and return_large_blocks()):
        yield
        return
    try:
        yield
    finally:
        return_large_blocks(CEILING_MMAP_BYTES, 2 * CEILING_MMAP_BYTES)


def configure_cpu(threads: int = 0, ranks: int = 1) -> None:
    """Deliberate torch threads and denormal flushing for any process that runs a model,
    glibc's thresholds in ascent's hands (`large_blocks_returned`) and oneDNN's primitive
    caches bounded; call it before the process's first matrix product, since oneDNN reads
    its cache sizes once.

    The tokenizers library's own thread pool is switched off for the same reason: on a small
    machine it competes with reward workers for the cores torch was told it could have.
    """
    global _tune_allocator
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    for name in ("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "LRU_CACHE_CAPACITY"):
        os.environ.setdefault(name, str(ONEDNN_CACHE_ENTRIES))
    torch.set_num_threads(resolve_threads(threads, ranks))
    torch.set_flush_denormal(True)
    _tune_allocator = sys.platform.startswith("linux")
    if _tune_allocator:  # from the start, not only after a first update: generation comes first
        return_large_blocks(CEILING_MMAP_BYTES, 2 * CEILING_MMAP_BYTES)


def caller_threads() -> Callable[[], None]:
    """An initializer for a thread that will run a model: torch's thread count as the calling
    thread has it now.

    OpenMP keeps that count per thread. A new thread takes torch's process-wide setting, but
    vLLM's CPU worker sets the OpenMP threads of the thread that builds it (binding them to
    cores), and its attention kernels stop with `thread_num == thread_num (2 vs. 1)` when a
    generate call runs on a thread with another count than the one it planned with. It also
    replaces `torch.set_num_threads` with a no-op once bound, so the count is set through
    torch's own binding underneath: the same count, on this thread only."""
    threads = torch.get_num_threads()
    return lambda: torch._C.set_num_threads(threads)


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise AscentError(
            f"[run] device = {name!r} but torch sees no CUDA device "
            f'(torch {torch.__version__}); set device = "cpu" or install a CUDA build of torch'
        )
    if name == "mps" and not torch.backends.mps.is_available():
        raise AscentError('[run] device = "mps" but MPS is not available; set device = "cpu"')
    return torch.device(name)


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)
    if torch.cuda.is_available():
        torch.cuda.manual_seed_all(seed)


def setup_runtime(run: RunSection, ranks: int = 1) -> torch.device:
    """Apply `[run]` (threads, denormals, seeds, determinism) and return the device to use;
    `ranks` processes of one run share this machine's cores."""
    device = resolve_device(run.device)
    configure_cpu(run.threads, ranks)
    seed_everything(run.seed)
    if run.deterministic:
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        torch.use_deterministic_algorithms(True)
    return device


class BackgroundLoop:
    """One event loop on a daemon thread, for libraries with async clients (openenv's
    sessions, verifiers' rubrics): a reward is called from worker threads, some of which
    already run a loop of their own, and a client's connections stay bound to one loop."""

    _loop: asyncio.AbstractEventLoop | None = None
    _lock = threading.Lock()

    @classmethod
    def run(cls, coro: Coroutine[Any, Any, T]) -> T:
        with cls._lock:
            if cls._loop is None:
                cls._loop = asyncio.new_event_loop()
                threading.Thread(target=cls._loop.run_forever, daemon=True).start()
        return asyncio.run_coroutine_threadsafe(coro, cls._loop).result()


def free_local_port() -> int:
    """A TCP port free on 127.0.0.1 now, for a child server ascent starts on loopback."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])

"""A pool of sandbox workers that runs many programs in parallel, with futures.

`submit(task)` queues `task(worker)` and returns a `concurrent.futures.Future` at once, so a
trainer can hand over one batch's programs and go on generating the next batch while they run.
A task gets a worker to itself for its whole duration, which is what lets a solution be compiled
once and then run against all its tests. Workers start on first use and stop with `close()`.

Where workers get no cgroup (`cgroups.available()` is False), memory_mb and max_processes are
per process: a pool whose runs could together use more than the machine's memory says so once.
"""

from __future__ import annotations

import atexit
import functools
import logging
import os
import queue
import threading
import weakref
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TypeVar

from ascent.config.rewards import SandboxSection
from ascent.rewards.sandbox import cgroups
from ascent.rewards.sandbox.isolation import check_isolation
from ascent.rewards.sandbox.limits import Limits, RunResult
from ascent.rewards.sandbox.worker import Worker

T = TypeVar("T")
log = logging.getLogger("ascent.rewards.sandbox")


def pool_size(cfg: SandboxSection) -> int:
    """Workers for this config: `workers`, or one per CPU this process may use."""
    if cfg.workers:
        return cfg.workers
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


class SandboxPool:
    """Runs programs in `pool_size(cfg)` isolated workers; thread-safe; use as a context manager."""

    def __init__(self, cfg: SandboxSection) -> None:
        check_isolation(cfg)  # refuse at construction, not at the first program
        self.cfg = cfg
        self.size = pool_size(cfg)
        self._idle: queue.SimpleQueue[Worker] = queue.SimpleQueue()
        self._workers = [Worker(cfg, i) for i in range(self.size)]
        for worker in self._workers:
            self._idle.put(worker)
        self._executor = ThreadPoolExecutor(self.size, thread_name_prefix="ascent-sandbox")
        self._closed = False
        self._lock = threading.Lock()
        self._at_exit = functools.partial(_close_quietly, weakref.ref(self))
        atexit.register(self._at_exit)
        if not cgroups.available():
            warn_if_memory_can_run_out(cfg, self.size)

    def submit(self, task: Callable[[Worker], T]) -> Future[T]:
        """Run `task(worker)` on the next free worker; the future holds what it returns."""
        if self._closed:
            raise RuntimeError("this SandboxPool is closed")
        return self._executor.submit(self._with_worker, task)

    def submit_program(
        self, code: str, language: str, stdin: str = "", limits: Limits | None = None
    ) -> Future[RunResult]:
        """Prepare and run one program once (compiling C++ first), in the background."""
        run_limits = limits or Limits.for_run(self.cfg)
        return self.submit(lambda w: w.run_source(code, language, stdin, run_limits))

    def run_program(
        self, code: str, language: str, stdin: str = "", limits: Limits | None = None
    ) -> RunResult:
        return self.submit_program(code, language, stdin, limits).result()

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
        atexit.unregister(self._at_exit)
        self._executor.shutdown(wait=True, cancel_futures=True)
        for worker in self._workers:
            worker.stop()

    def __enter__(self) -> SandboxPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _with_worker(self, task: Callable[[Worker], T]) -> T:
        worker = self._idle.get()
        try:
            return task(worker)
        finally:
            self._idle.put(worker)


def warn_if_memory_can_run_out(cfg: SandboxSection, workers: int) -> bool:
    """Without cgroups each process of a run may use memory_mb: warn (True) when the pool's
    worst case, workers x (max_processes x memory_mb + tmp_size_mb), exceeds physical memory."""
    worst_mb = workers * (cfg.max_processes * cfg.memory_mb + cfg.tmp_size_mb)
    total_mb = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") >> 20
    if worst_mb <= total_mb:
        return False
    log.warning(
        "sandbox: no cgroup for the workers here (needs root or a delegated cgroup), so memory "
        "limits are per process: %d workers x (%d processes x %d MB + %d MB tmp) = %d MB could "
        "exceed this machine's %d MB; lower sandbox.max_processes, memory_mb or workers",
        workers,
        cfg.max_processes,
        cfg.memory_mb,
        cfg.tmp_size_mb,
        worst_mb,
        total_mb,
    )
    return True


def _close_quietly(ref: weakref.ref[SandboxPool]) -> None:
    pool = ref()
    if pool is not None:
        pool.close()


def run_program(
    code: str,
    language: str,
    stdin: str = "",
    limits: Limits | None = None,
    cfg: SandboxSection | None = None,
) -> RunResult:
    """Run one program once in a fresh single-worker sandbox (for scripts and the CLI).

    For many programs, keep a `SandboxPool` open instead: it starts its workers once.
    """
    base = cfg or SandboxSection()
    with SandboxPool(base.model_copy(update={"workers": 1})) as pool:
        return pool.run_program(code, language, stdin, limits)

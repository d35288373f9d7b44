"""A control group per sandbox worker, so that all of a run's processes share one memory limit.

rlimits count per process: RLIMIT_AS lets every forked child use memory_mb, so a run with
max_processes children could use max_processes x memory_mb. Each worker's sandbox (bubblewrap,
its zygote and every run) therefore lives in a cgroup of its own. Before each run the host sets
its memory limit to what the sandbox uses now plus the run's memory_mb (files a run writes to its
tmpfs count too), and afterwards reads the run's peak and whether the kernel's OOM killer had to
step in (runs volunteer first: oom_score_adj 1000). pids.max caps processes and threads.

cgroup v2 is used where the parent already delegates the memory and pids controllers (or is the
hierarchy's root); hosts with the v1 memory and pids hierarchies get those. Where neither can be
created (not root, no delegation), `available()` is False and the pool warns when its limits
could add up to more than the machine's memory.
"""

from __future__ import annotations

import contextlib
import errno
import itertools
import os
import re
import time
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

PREFIX = "ascent-sandbox"
_STALE = re.compile(rf"{PREFIX}-(\d+)-\d+$")
_counter = itertools.count()


@dataclass(frozen=True)
class Layout:
    """Where worker cgroups are made: one parent per hierarchy (v2: one for both)."""

    version: int
    memory_parent: Path
    pids_parent: Path


@lru_cache(maxsize=1)
def layout() -> Layout | None:
    """This process's cgroup parents if a worker cgroup can be created here, else None."""
    mounts = _mounts()
    own = _own_paths()
    found: Layout | None = None
    if "" in mounts and "" in own:
        found = _v2(Path(mounts[""]) / own[""].lstrip("/"))
    if found is None and {"memory", "pids"} <= mounts.keys() & own.keys():
        found = Layout(
            1,
            Path(mounts["memory"]) / own["memory"].lstrip("/"),
            Path(mounts["pids"]) / own["pids"].lstrip("/"),
        )
    if found is None or not _can_create(found):
        return None
    _remove_stale(found)
    return found


def available() -> bool:
    return layout() is not None


def _mounts() -> dict[str, str]:
    """Mount points: '' for cgroup2, else the v1 controller name."""
    mounts: dict[str, str] = {}
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return mounts
    for line in lines:
        left, _, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if len(fields) < 5 or len(tail) < 3:
            continue
        if tail[0] == "cgroup2":
            mounts.setdefault("", fields[4])
        elif tail[0] == "cgroup":
            for option in tail[2].split(","):
                mounts.setdefault(option, fields[4])
    return mounts


def _own_paths() -> dict[str, str]:
    """This process's cgroup path per controller ('' for the v2 hierarchy)."""
    paths: dict[str, str] = {}
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return paths
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) == 3:
            for controller in parts[1].split(",") if parts[1] else [""]:
                paths[controller] = parts[2]
    return paths


def _v2(parent: Path) -> Layout | None:
    try:
        enabled = set((parent / "cgroup.subtree_control").read_text().split())
        offered = set((parent / "cgroup.controllers").read_text().split())
    except OSError:
        return None
    if not {"memory", "pids"} <= offered:
        return None
    if not {"memory", "pids"} <= enabled:
        try:  # allowed at the hierarchy's root; elsewhere the parent must have no processes
            (parent / "cgroup.subtree_control").write_text("+memory +pids")
        except OSError:
            return None
    return Layout(2, parent, parent)


def _can_create(found: Layout) -> bool:
    probe = f"{PREFIX}-{os.getpid()}-probe"
    made: list[Path] = []
    try:
        for parent in {found.memory_parent, found.pids_parent}:
            (parent / probe).mkdir()
            made.append(parent / probe)
        return True
    except OSError:
        return False
    finally:
        for path in made:
            with contextlib.suppress(OSError):
                path.rmdir()


def _remove_stale(found: Layout) -> None:
    """Remove worker cgroups left by processes that no longer exist (empty ones only)."""
    for parent in {found.memory_parent, found.pids_parent}:
        with contextlib.suppress(OSError):
            for entry in parent.iterdir():
                match = _STALE.match(entry.name)
                if match and not Path(f"/proc/{match.group(1)}").exists():
                    with contextlib.suppress(OSError):
                        entry.rmdir()


class WorkerCgroup:
    """One worker's cgroup (v1: one directory per hierarchy); `join` lists its procs files.

    The memory files a run touches are kept open: a run costs a few preads and pwrites.
    """

    def __init__(self, found: Layout) -> None:
        name = f"{PREFIX}-{os.getpid()}-{next(_counter)}"
        self.version = found.version
        self.dirs = sorted({found.memory_parent / name, found.pids_parent / name})
        self.memory = found.memory_parent / name
        self.pids = found.pids_parent / name
        for path in self.dirs:
            path.mkdir()
        v2 = self.version == 2
        if v2:
            with contextlib.suppress(OSError):
                (self.memory / "memory.swap.max").write_text("0")
        self._fds: dict[str, int] = {}
        for key, v2_name, v1_name in (
            ("usage", "memory.current", "memory.usage_in_bytes"),
            ("limit", "memory.max", "memory.limit_in_bytes"),
            ("events", "memory.events", "memory.oom_control"),
            ("peak", "memory.peak", "memory.max_usage_in_bytes"),
        ):
            with contextlib.suppress(OSError):  # v2 memory.peak needs Linux 5.19
                path = self.memory / (v2_name if v2 else v1_name)
                self._fds[key] = os.open(path, os.O_RDWR | os.O_CLOEXEC)
        if not {"usage", "limit", "events"} <= self._fds.keys():
            self.remove()
            raise OSError(f"{self.memory} lacks the memory controller's files")
        self._oom_kills = 0
        self._start_usage = 0

    @classmethod
    def create(cls) -> WorkerCgroup | None:
        found = layout()
        return None if found is None else cls(found)

    @property
    def join(self) -> list[str]:
        """The files a process writes its pid to, to enter this cgroup."""
        return [str(path / "cgroup.procs") for path in self.dirs]

    def limit_processes(self, extra: int) -> None:
        """Allow `extra` processes and threads beyond those the sandbox has now."""
        current = int((self.pids / "pids.current").read_text())
        (self.pids / "pids.max").write_text(str(current + extra))

    def before_run(self, memory_bytes: int) -> None:
        """Cap memory at current use + `memory_bytes`; start the run's peak afresh."""
        self._start_usage = int(self._read("usage"))
        os.pwrite(self._fds["limit"], str(self._start_usage + memory_bytes).encode(), 0)
        if "peak" in self._fds:
            try:  # v1: writing 0 resets it; v2 (Linux 6.12+): any write resets this fd's view
                os.pwrite(self._fds["peak"], b"0" if self.version == 1 else b"reset", 0)
            except OSError:
                os.close(self._fds.pop("peak"))
        self._oom_kills = self._count_oom_kills()

    def after_run(self) -> tuple[int | None, bool]:
        """(the run's peak memory in bytes, or None where unknown; whether OOM kills happened)."""
        peak = None
        if "peak" in self._fds:
            peak = max(int(self._read("peak")) - self._start_usage, 0)
        return peak, self._count_oom_kills() > self._oom_kills

    def remove(self) -> None:
        """Delete the cgroup once its processes are gone (they may take a moment to exit)."""
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()
        for path in self.dirs:
            for _ in range(50):
                try:
                    path.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError as err:
                    if err.errno != errno.EBUSY:
                        break
                    time.sleep(0.01)

    def _count_oom_kills(self) -> int:
        for line in self._read("events").splitlines():
            key, _, value = line.partition(b" ")
            if key == b"oom_kill":
                return int(value)
        return 0

    def _read(self, key: str) -> bytes:
        return os.pread(self._fds[key], 4096, 0)

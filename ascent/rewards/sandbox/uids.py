"""The uids programs run as when ascent runs as root, allocated host-wide.

RLIMIT_NPROC counts the processes of a uid across the whole host, so two workers sharing a uid
(two pools, two training jobs) would share one process limit: one pool's busy run could starve
another's innocent one. Each worker therefore holds two uids of its own, one for the program and
one for its call-a-function test process, for as long as it runs: an exclusive `flock` on a
lock file per uid under /run/ascent-sandbox. A lock dies with its process, so a crashed trainer
frees its uids.
"""

from __future__ import annotations

import fcntl
import os
from dataclasses import dataclass

from ascent.errors import AscentError

LOCK_DIR = "/run/ascent-sandbox"
SLOTS = 512  # workers per host; from run_uid, two uids each
RESERVED = {65534, 65535}  # nobody and the invalid uid


@dataclass
class UidPair:
    """Uids held by one worker until `release`."""

    run_uid: int
    judge_uid: int
    _locks: tuple[int, ...]

    def release(self) -> None:
        for fd in self._locks:
            os.close(fd)
        self._locks = ()


def allocate(first_uid: int, lock_dir: str = LOCK_DIR) -> UidPair:
    """Two uids from `first_uid` upwards that no other worker on this host holds."""
    os.makedirs(lock_dir, mode=0o700, exist_ok=True)
    for slot in range(SLOTS):
        uid = first_uid + 2 * slot
        if {uid, uid + 1} & RESERVED:
            continue
        locks = []
        for each in (uid, uid + 1):
            fd = _try_lock(os.path.join(lock_dir, f"uid-{each}.lock"))
            if fd is None:
                break
            locks.append(fd)
        if len(locks) == 2:
            return UidPair(uid, uid + 1, tuple(locks))
        for fd in locks:
            os.close(fd)
    raise AscentError(
        f"all {SLOTS} sandbox worker slots from sandbox.run_uid = {first_uid} are in use on this "
        "host; stop other ascent processes or use fewer sandbox.workers"
    )


def _try_lock(path: str) -> int | None:
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd

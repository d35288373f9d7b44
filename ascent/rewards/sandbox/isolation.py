"""How a sandbox worker is started: inside bubblewrap, or (unsafe_local) as a plain process.

Under bubblewrap each worker gets its own namespaces: no network (an empty network namespace
with only loopback), its own PID namespace with the zygote as PID 1 (so it can kill every
process a run leaves), its own IPC namespace, a read-only view of the system directories the
interpreter and the compiler need and nothing else of the host's files (no home, no project, no
test data), a private size-limited /tmp and a cleared environment. As root, programs run as
an unprivileged uid of the worker's own (`uids`; root would ignore the process limit); as a
normal user, bubblewrap maps that user into a new user namespace and programs run as that user
without capabilities. Either way every run gets a seccomp filter (`inside/seccomp.py`): no new
namespaces, mounts, tracing or SysV IPC objects. Where the host allows, the whole sandbox lives
in a cgroup of its own (`cgroups`), which the command joins before bubblewrap starts.

Where bubblewrap is missing or cannot create namespaces, `check_isolation` raises an
`AscentError` that names the fix, unless the config says `unsafe_local = true`.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from ascent.config.rewards import SandboxSection
from ascent.errors import AscentError
from ascent.rewards.sandbox.uids import UidPair

INSIDE = Path(__file__).with_name("inside")  # the code that runs in the sandbox
INSIDE_IN_SANDBOX = "/ascent"
SANDBOX_ROOT = "/tmp/ascent"
# Enter each cgroup named before "--" (its cgroup.procs file), then become the command after it.
JOIN_CGROUPS = 'while [ "$1" != -- ]; do echo $$ > "$1" || exit 125; shift; done; shift; exec "$@"'

# System paths bound read-only; symlinks (merged /usr) are recreated as symlinks.
SYSTEM_PATHS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
ETC_PATHS = ("/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/alternatives")
ZYGOTE_CAPS = (
    "CAP_SETUID",
    "CAP_SETGID",
    "CAP_KILL",
    "CAP_CHOWN",
    "CAP_FOWNER",
    "CAP_DAC_OVERRIDE",
)
INSTALL_HINT = (
    "install bubblewrap (Debian/Ubuntu: apt-get install bubblewrap; or run scripts/setup.sh), "
    "or set sandbox.unsafe_local = true to run trusted code without isolation"
)


@dataclass(frozen=True)
class WorkerCommand:
    """How to start one worker's zygote, and the host directory to delete when it stops."""

    argv: list[str]
    env: dict[str, str]
    cleanup_dir: str | None


def python_executable() -> str:
    """The interpreter outside any virtualenv (programs get the standard library only)."""
    return os.path.realpath(getattr(sys, "_base_executable", None) or sys.executable)


def worker_command(
    cfg: SandboxSection, uids: UidPair | None = None, cgroups: list[str] = ()
) -> WorkerCommand:
    """The command that starts a worker's zygote under the configured isolation.

    `uids`: the worker's run and test-process uids (as root); `cgroups`: cgroup.procs files
    the worker joins before it starts.
    """
    python = python_executable()
    env = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}
    check_isolation(cfg)
    settings = {"uid": -1, "gid": -1, "judge_uid": -1, "seccomp": not cfg.unsafe_local}
    if uids is not None:
        settings.update(uid=uids.run_uid, gid=uids.run_uid, judge_uid=uids.judge_uid)
    if cfg.unsafe_local:
        tmp = tempfile.mkdtemp(prefix="ascent-sandbox-")
        settings["root"] = tmp
        argv = [python, "-I", "-S", "-B", str(INSIDE / "zygote.py"), json.dumps(settings)]
    else:
        tmp = None
        settings["root"] = SANDBOX_ROOT
        argv = [_bwrap(), *_bwrap_args(cfg, os.geteuid() == 0, python)]
        argv += [python, "-I", "-S", "-B", f"{INSIDE_IN_SANDBOX}/zygote.py", json.dumps(settings)]
    if cgroups:
        argv = ["/bin/sh", "-c", JOIN_CGROUPS, "ascent-sandbox", *cgroups, "--", *argv]
    return WorkerCommand(argv, env, tmp)


def _bwrap() -> str:
    path = shutil.which("bwrap")
    if path is None:
        raise AscentError(
            f"the code sandbox needs bubblewrap (bwrap), which is not installed: {INSTALL_HINT}"
        )
    return path


def _bwrap_args(cfg: SandboxSection, root: bool, python: str) -> list[str]:
    # Not --unshare-all: as root it adds a user namespace that maps only uid 0, and runs must
    # switch to an unprivileged uid.
    args = ["--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts"]
    args += ["--unshare-cgroup-try", "--die-with-parent", "--as-pid-1", "--new-session"]
    args += ["--clearenv"]
    args += ["--setenv", "PATH", "/usr/bin:/bin", "--setenv", "LANG", "C.UTF-8"]
    if root:  # keep only what the zygote needs to set runs up; runs drop everything
        args += ["--cap-drop", "ALL"]
        for cap in ZYGOTE_CAPS:
            args += ["--cap-add", cap]
    else:
        args += ["--unshare-user", "--disable-userns"]
    for path in SYSTEM_PATHS:
        if os.path.islink(path):
            args += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            args += ["--ro-bind", path, path]
    for path in ETC_PATHS:
        args += ["--ro-bind-try", path, path]
    prefix = os.path.realpath(sys.base_prefix)
    if not _under(prefix, SYSTEM_PATHS):
        args += _bind_readable(prefix)
    if not _under(python, (prefix, *SYSTEM_PATHS)):
        args += _bind_readable(python)
    args += ["--proc", "/proc", "--dev", "/dev"]
    args += ["--size", str(cfg.tmp_size_mb << 20), "--tmpfs", "/tmp"]
    args += ["--ro-bind", str(INSIDE), INSIDE_IN_SANDBOX]
    args += ["--remount-ro", "/", "--chdir", "/tmp", "--"]
    return args


def _under(path: str, roots: tuple[str, ...]) -> bool:
    return any(path == r or path.startswith(r + "/") for r in roots)


def _bind_readable(path: str) -> list[str]:
    """Bind `path` read-only, with parents that the run's uid may traverse (bubblewrap would
    copy a parent's mode, e.g. /root's 0700, and hide the interpreter from the program)."""
    args: list[str] = []
    parts = Path(path).parts
    for depth in range(2, len(parts)):
        args += ["--perms", "0755", "--dir", str(Path(*parts[:depth]))]
    return [*args, "--ro-bind", path, path]


def check_isolation(cfg: SandboxSection) -> None:
    """Raise `AscentError` naming the fix when the sandbox cannot isolate programs here."""
    if not sys.platform.startswith("linux"):
        raise AscentError(
            f"the code sandbox runs on Linux only (namespaces, pidfds, memfds), not on "
            f"{sys.platform}: run code rewards on a Linux machine or in a Linux container"
        )
    if cfg.unsafe_local:
        return
    root = os.geteuid() == 0
    python = python_executable()
    # Start an empty sandbox and install the system-call filter there, as every run will.
    seccomp = f"{INSIDE_IN_SANDBOX}/seccomp.py"
    argv = (_bwrap(), *_bwrap_args(cfg, root, python), python, "-I", "-S", "-B", seccomp)
    error = _probe(argv, root)
    if error:
        raise AscentError(error)


@lru_cache(maxsize=8)
def _probe(argv: tuple[str, ...], root: bool) -> str | None:
    """Start an empty sandbox once; None when it works, else the one-line reason and fix."""
    try:
        done = subprocess.run(
            argv, capture_output=True, text=True, timeout=30, env={"PATH": "/usr/bin:/bin"}
        )
    except (OSError, subprocess.TimeoutExpired) as err:
        return f"bubblewrap could not start ({err}); {INSTALL_HINT}"
    if done.returncode == 0:
        return None
    reason = (done.stderr.strip().splitlines() or ["no message"])[-1]
    if reason.startswith("seccomp: "):
        return (
            f"the code sandbox cannot filter system calls here ({reason[9:]}); run it on an "
            "x86_64 or aarch64 Linux kernel with seccomp, or set sandbox.unsafe_local = true "
            "for trusted code only"
        )
    fix = (
        "the kernel refused to create namespaces (inside a container, allow them)"
        if root
        else "enable unprivileged user namespaces (sysctl kernel.unprivileged_userns_clone=1, "
        "and on Ubuntu kernel.apparmor_restrict_unprivileged_userns=0) or run as root"
    )
    return (
        f"the code sandbox cannot isolate programs here: bubblewrap failed ({reason}); {fix}; "
        "or set sandbox.unsafe_local = true for trusted code only"
    )

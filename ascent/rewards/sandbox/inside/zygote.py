"""The sandbox's warm interpreter: it runs inside the isolation and forks one process per run.

One zygote serves one pool worker. Under bubblewrap it is PID 1 of the sandbox's own PID
namespace; with `unsafe_local` it is a plain child process. It reads requests from the host on
stdin and answers on stdout (4-byte big-endian length + JSON). For each run it forks a child
(`runner`) that confines itself and runs the program; for call-a-function tests it first forks
the test process (`calls`). The zygote enforces the wall-clock limit and, once the run ends,
kills every process the run left behind before answering, so nothing survives a run.

A run's stdin, stdout and stderr are memfds the zygote creates and reads back through its own
descriptors: a run cannot redirect them (a FIFO in their place would block the zygote). Bulk data
the zygote must never hold (test code, a checker's expected answer) follows a request on the
pipe as a payload that the forked process it is meant for reads itself; were it left unread, the
zygote answers an error and exits, since its pipe is then out of step.

Prepared programs live in the zygote's memory, out of the runs' reach: a Python program as a
code object, a compiled binary as a sealed memfd (exec'd by descriptor). Runs cannot alter them
even where they share the zygote's uid (bubblewrap as a normal user); there the zygote also
sweeps /tmp after each run, so one run leaves nothing for the next. If cleaning up fails, the
result still goes back, marked `restart`, and the zygote exits so the host starts a fresh one.

Standard library only: it runs under `python -I -S` with no access to the ascent package.
Requests: {"op": "prepare" | "run" | "drop", ...}; see `handle`. Started with one argument, a
JSON object: root (its scratch area), uid/gid for runs and judge_uid for test processes (-1:
keep its own), seccomp (install the system-call filter in runs).
"""

import contextlib
import ctypes
import errno
import gc
import json
import math
import os
import select
import signal
import struct
import sys
import time
import traceback

sys.path.append(os.path.dirname(os.path.abspath(__file__)))  # runner, calls, files, seccomp

import runner
import seccomp
from files import (
    memfd,
    read_all,
    read_back,
    read_into,
    read_kept,
    remove_tree,
    sealed_memfd,
    write_all,
)

PR_SET_DUMPABLE = 4
PR_SET_CHILD_SUBREAPER = 36
STDERR_KEEP = 65536  # bytes of stderr sent back (its tail)
ACK_TIMEOUT_MS = 30_000


class PayloadLost(Exception):
    """The process meant to read a request's payload did not: the host pipe is out of step."""


class Zygote:
    def __init__(self, cfg, host_fd):
        self.root = cfg["root"]
        self.uid, self.gid, self.judge_uid = cfg["uid"], cfg["gid"], cfg["judge_uid"]
        self.host_fd = host_fd  # payloads are read from it by the runs they are meant for
        self.is_init = os.getpid() == 1
        self.jobs = {}
        self.scratch = os.path.join(self.root, "run")  # each run's private directory, made afresh
        # Runs that share our uid could write anywhere in /tmp: clean up after each.
        self.sweeps = self.uid < 0 and self.is_init
        self.payload_taken = False
        self.restart = None  # why this zygote must stop after answering (it cannot clean up)
        self.make_root()
        self.prctl = ctypes.CDLL(None, use_errno=True).prctl
        # Runs must not read or trace this process (matters when they share its uid).
        self.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
        if not self.is_init:
            self.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
        self.seccomp = seccomp.Filter() if cfg["seccomp"] else None
        # What every run starts with: set once here, so forked runs inherit it for free.
        self.env = {
            "PATH": "/usr/bin:/bin",
            "LANG": "C.UTF-8",
            "HOME": self.scratch,
            "TMPDIR": self.scratch,
        }
        os.environ.clear()
        os.environ.update(self.env)
        runner.install_stdio()

    # -- requests ---------------------------------------------------------------------------

    def handle(self, req):
        """The reply to one request, and the buffers attached to it (zeroed once sent)."""
        self.payload_taken = False
        op = req.get("op")
        if op == "prepare":
            return self.prepare(req)
        if op == "run":
            return self.run(req)
        if op == "drop":
            job = self.jobs.pop(req["job"], {})  # a program that failed to compile has none
            if "fd" in job:
                os.close(job["fd"])
            return {"ok": True}, []
        return {"error": f"unknown op {op!r}"}, []

    def prepare(self, req):
        """Check (Python) or compile (C++) a program in a limited run, then keep it in memory."""
        job, language, code = req["job"], req["language"], req["code"]
        source = code.encode("utf-8", "surrogatepass")
        if language == "python":
            result, attached = self.execute(("check", source, None), req["limits"])
            if result["exit_code"] == 0:  # it compiled within the limits: safe to compile here
                program = compile(source, "main.py", "exec", dont_inherit=True)
                self.jobs[job] = {"language": language, "code": program}
            return result, attached
        argv = [req["compiler"], *req["flags"], "-o", "main", "main.cpp"]
        what = ("exec", req["compiler"], argv)
        result, attached = self.execute(what, req["limits"], files={"main.cpp": code}, keep="main")
        binary = result.pop("kept", None)
        if binary is not None and result["exit_code"] == 0:
            self.jobs[job] = {"language": language, "fd": sealed_memfd(binary)}
        return result, attached

    def run(self, req):
        job = self.jobs[req["job"]]
        args = req.get("args", [])
        if job["language"] == "python":
            what = ("python", job["code"], args)
        else:
            what = ("exec", job["fd"], ["main", *args])
        parts = req.get("payload", {})
        return self.execute(what, req["limits"], parts=parts, entry_point=req.get("entry_point"))

    def make_root(self):
        if os.path.islink(self.root) or (
            os.path.exists(self.root) and not os.path.isdir(self.root)
        ):
            os.unlink(self.root)
        os.makedirs(self.root, exist_ok=True)
        os.chmod(self.root, 0o711)

    def sweep(self):
        """Remove whatever a run wrote outside its own directory (runs share our uid here)."""
        for name in os.listdir("/tmp"):
            if os.path.join("/tmp", name) != self.root:
                remove_tree(os.path.join("/tmp", name))
        for name in os.listdir(self.root):
            remove_tree(os.path.join(self.root, name))
        self.make_root()

    # -- one run ----------------------------------------------------------------------------

    def execute(self, what, limits, files=None, parts=None, entry_point=None, keep=None):
        """Run once. `parts`: payload sizes on the host pipe, "tests" for the test process (with
        `entry_point`), then "stdin" and "files" for the run."""
        parts = dict(parts or {})
        os.mkdir(self.scratch, 0o700)
        stdio, judge = [], None
        try:
            if self.uid >= 0:
                os.chown(self.scratch, self.uid, self.gid)
            stdio += [memfd("stdin"), memfd("out"), memfd("err")]
            call = None
            if entry_point is not None:
                judge, call = self.start_judge(entry_point, limits, parts.pop("tests", 0))
            run = runner.Run(what, limits, self.scratch, stdio, None, files or {}, parts, call)
            result, attached = self.fork_run(run, judge)
            if judge is not None:
                attached.append(("verdict", read_into(judge[1], runner.VERDICT_BYTES)))
            if keep is not None:
                result["kept"] = read_kept(os.path.join(self.scratch, keep))
            return result, attached
        finally:
            for fd in stdio:
                os.close(fd)
            if judge is not None:
                os.close(judge[1])
            self.clean_up()

    def clean_up(self):
        try:
            remove_tree(self.scratch)
            if self.sweeps:
                self.sweep()
        except Exception as err:
            self.restart = f"cleaning up after a run failed ({err!r})"

    def start_judge(self, entry_point, limits, payload):
        """Fork the test process; it reads the test code (`payload` bytes) from the host pipe."""
        calls_r, calls_w = os.pipe()
        answers_r, answers_w = os.pipe()
        verdict_r, verdict_w = os.pipe()
        pid = os.fork()
        if pid == 0:
            for fd in (calls_r, answers_w, verdict_r):
                os.close(fd)
            runner.judge_child(self, entry_point, limits, payload, calls_w, answers_r, verdict_w)
        for fd in (calls_w, answers_r, verdict_w):
            os.close(fd)
        poller = select.poll()
        poller.register(verdict_r, select.POLLIN)
        if not poller.poll(ACK_TIMEOUT_MS) or os.read(verdict_r, 1) != b"k":
            os.kill(pid, signal.SIGKILL)
            raise PayloadLost("the test process did not take the test code")
        self.payload_taken = True
        return (pid, verdict_r), (entry_point, calls_r, answers_w)

    def fork_run(self, run, judge):
        status_r, run.status_w = os.pipe()
        start = time.monotonic()
        pid = os.fork()
        if pid == 0:
            os.close(status_r)
            runner.child(self, run)
        os.close(run.status_w)
        if run.call is not None:
            os.close(run.call[1])
            os.close(run.call[2])
        pids = [pid] if judge is None else [pid, judge[0]]
        limits = run.limits
        others = {os.getpid(), *pids[1:]}
        alone = lambda: self.is_init and run_is_alone(pid, others)  # noqa: E731
        wall_timeout = not wait_exit(
            pids, limits["wall_ms"] / 1000, limits["wall_cap_ms"] / 1000, alone
        )
        if wall_timeout:
            os.kill(pid, signal.SIGKILL)
        _, status, usage = os.wait4(pid, 0)
        wall_ms = (time.monotonic() - start) * 1000
        self.kill_leftovers(pid)
        started, error = self.read_status(status_r, any(run.parts.values()))
        result = {
            "started": started,
            "error": error,
            "exit_code": os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else None,
            "signal": os.WTERMSIG(status) if os.WIFSIGNALED(status) else None,
            "wall_timeout": wall_timeout,
            "wall_ms": round(wall_ms, 3),
            "cpu_ms": round((usage.ru_utime + usage.ru_stime) * 1000, 3),
            "memory_kb": usage.ru_maxrss,
        }
        stdout, result["stdout_bytes"] = read_back(run.stdio[1], run.limits["output_bytes"] + 1)
        stderr, result["stderr_bytes"] = read_back(run.stdio[2], STDERR_KEEP, tail=True)
        return result, [("stdout", stdout), ("stderr", stderr)]

    def kill_leftovers(self, pid):
        """Kill every process the run left (orphans, double forks, new sessions), then reap."""
        if self.is_init:
            # As PID 1 of the sandbox's namespace every process here descends from us:
            # kill(-1) reaches them all, and fork() fails once the signal is pending.
            while True:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(-1, signal.SIGKILL)
                try:
                    os.waitpid(-1, 0)
                except ChildProcessError:
                    return
        # Unsafe mode: kill the run's process group, then, as a subreaper, every orphan that
        # was re-parented to us, until we have no children left.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)
        while True:
            children = own_children()
            for child in children:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(child, signal.SIGKILL)
            try:
                while os.waitpid(-1, os.WNOHANG if children else 0)[0]:
                    pass
            except ChildProcessError:
                return
            if not children:
                return
            time.sleep(0.001)

    def read_status(self, fd, payload):
        """(started, error): the child writes 'P' once it has read its payload, 'R' as the
        program starts, 'E<errno> ...' if exec fails, or 'setup: <traceback>'."""
        data = read_all(fd, 1 << 20)
        os.close(fd)
        if data.startswith(b"P"):
            self.payload_taken, data = True, data[1:]
        elif payload:
            raise PayloadLost("the run did not take its files")
        text = data.decode("utf-8", "replace")
        if text.startswith("R"):
            return True, text[1:] or None
        return False, text or "the run ended before the program started"


def wait_exit(pids, seconds, cap_seconds, alone=lambda: False):
    """Wait for every process in `pids` to exit; False when `seconds` pass first.

    Time the first process spent waiting for a CPU does not count (the machine was busy, the
    run was not idle), up to `cap_seconds` of real time in all, while `alone()` says it is
    the run's only process: a run that forks crowds itself (a fork bomb must not buy itself
    time), and only as PID 1 of the sandbox's namespace can the zygote see every process.
    """
    fds = [os.pidfd_open(pid) for pid in pids]
    try:
        poller = select.poll()
        for fd in fds:
            poller.register(fd, select.POLLIN)
        waiting = len(fds)
        start = time.monotonic()
        queued_at_start = cpu_wait_s(pids[0])
        deadline = start + seconds
        while waiting:
            left = deadline - time.monotonic()
            if left <= 0:
                queued = cpu_wait_s(pids[0])
                if queued is None or queued_at_start is None or not alone():
                    return False
                stretched = min(start + seconds + queued - queued_at_start, start + cap_seconds)
                if stretched <= time.monotonic():
                    return False
                deadline = stretched
                continue
            for fd, _ in poller.poll(math.ceil(left * 1000)):
                poller.unregister(fd)
                waiting -= 1
        return True
    finally:
        for fd in fds:
            os.close(fd)


def run_is_alone(pid, others):
    """Whether `pid` is the only process in this PID namespace besides `others`."""
    try:
        return all(int(e) in others or int(e) == pid for e in os.listdir("/proc") if e.isdigit())
    except OSError:
        return False


def cpu_wait_s(pid):
    """Seconds `pid` has spent runnable but waiting for a CPU; None where the kernel won't say."""
    try:
        with open(f"/proc/{pid}/schedstat") as f:
            return int(f.read().split()[1]) / 1e9
    except (OSError, ValueError, IndexError):
        return None


def own_children():
    pids = []
    try:
        for tid in os.listdir("/proc/self/task"):
            with open(f"/proc/self/task/{tid}/children") as f:
                pids.extend(int(p) for p in f.read().split())
    except OSError:
        pass
    return pids


# -- the wire ---------------------------------------------------------------------------------


def read_exact(fd, n):
    data = b""
    while len(data) < n:
        chunk = os.read(fd, n - len(data))
        if not chunk:
            return None
        data += chunk
    return data


def send(fd, reply, attached=()):
    """One reply: its JSON frame, then each attached buffer raw, which is then zeroed."""
    reply["attached"] = [[name, len(buffer)] for name, buffer in attached]
    data = json.dumps(reply).encode()
    write_all(fd, struct.pack(">I", len(data)) + data)
    for _, buffer in attached:
        write_all(fd, buffer)
        buffer[:] = bytes(len(buffer))


def main(argv):
    rfd, wfd = os.dup(0), os.dup(1)  # the host's pipes move off 0/1, which runs replace
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)
    os.close(null)
    zygote = Zygote(json.loads(argv[0]), rfd)
    # Forking is the cost of a run, so keep this process lean: no threading module (its fork
    # handlers touch many pages in every child), and objects frozen out of the collector's way.
    assert "threading" not in sys.modules
    gc.freeze()
    send(wfd, {"ok": True, "pid": os.getpid()})
    while True:
        head = read_exact(rfd, 4)
        if head is None:
            return
        request = json.loads(read_exact(rfd, struct.unpack(">I", head)[0]))
        attached = []
        try:
            reply, attached = zygote.handle(request)
        except Exception:
            reply = {"error": traceback.format_exc()}
        if request.get("payload") and not zygote.payload_taken:
            zygote.restart = "a request's payload was left unread"
            reply, attached = {"error": zygote.restart}, []
        if zygote.restart:
            reply["restart"] = zygote.restart
        send(wfd, reply, attached)
        if zygote.restart:
            return


if __name__ == "__main__":
    try:
        main(sys.argv[1:])
    except OSError as err:
        if err.errno != errno.EPIPE:
            raise

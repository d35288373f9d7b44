"""What a forked run does before its program starts, and how a Python program runs in it.

A run is a child of the zygote. In order, it: takes its stdin and files (from the request's
payload, read here straight from the host's pipe, so the zygote never holds them),
starts a new session, points fds 0-2 at the run's memfds, makes itself the first choice of the
OOM killer, applies the rlimits, drops to the run uid, sets no-new-privileges, installs the
system-call filter, moves into its private directory, closes every other descriptor and starts
the program: Python in this already warm interpreter, anything else by exec.

The test process of a call-a-function run (`judge_child`) is set up the same way under its own
uid and runs `calls.run_tests`.
"""

import atexit
import builtins
import fcntl
import io
import json
import math
import os
import resource
import signal
import sys
import traceback
import types

import calls
from files import write_all

PR_SET_DUMPABLE = 4
PR_SET_NO_NEW_PRIVS = 38
VERDICT_BYTES = 4096


class Run:
    """One run as the zygote hands it to the forked child.

    what: ("python", code, args) | ("exec", path or memfd, argv) | ("check", source, None);
    scratch: the run's private directory; stdio: memfds for fds 0-2; status_w: the pipe that
    gets 'P' once the payload is read, 'R' as the program starts, or an error; files: name ->
    text for `scratch`; parts: sizes of the payload's "stdin" and "files" (JSON) on the host's
    pipe; call: (entry_point, calls_fd, answers_fd) to serve the test process's calls.
    """

    def __init__(self, what, limits, scratch, stdio, status_w, files, parts, call=None):
        self.what, self.limits, self.scratch, self.stdio = what, limits, scratch, stdio
        self.status_w, self.files, self.parts, self.call = status_w, files, parts, call


def child(zygote, run):
    """The forked run: never returns."""
    code = 127
    try:
        code = start(zygote, run)
    except BaseException:
        try:
            traceback.print_exc()
            sys.stderr.flush()
        except BaseException:
            pass
    finally:
        os._exit(code)


def start(zygote, run):
    status = fcntl.fcntl(run.status_w, fcntl.F_DUPFD_CLOEXEC, 100)  # clear of fds 0-3
    try:
        files = run.files
        if any(run.parts.values()):
            stdin = read_exact(zygote.host_fd, run.parts.get("stdin", 0))
            if run.parts.get("files"):
                files = json.loads(read_exact(zygote.host_fd, run.parts["files"]))
            os.write(status, b"P")
            write_all(run.stdio[0], stdin)
            os.lseek(run.stdio[0], 0, os.SEEK_SET)
        write_files(run.scratch, files, zygote.uid, zygote.gid)
        os.setsid()
        for target, fd in enumerate(run.stdio):
            os.dup2(fd, target)
        confine(zygote, run.limits, zygote.uid, zygote.gid)
        os.chdir(run.scratch)
        keep = {0, 1, 2, status, *(run.call[1:] if run.call else ())}
        if isinstance(run.what[1], int):
            keep.add(run.what[1])  # the memfd to exec
        close_fds_except(keep)
    except BaseException:
        os.write(status, b"setup: " + traceback.format_exc().encode())
        return 127
    kind, target, args = run.what
    if kind == "exec":
        for sig in (signal.SIGPIPE, signal.SIGXFSZ):  # Python ignores these; programs must not
            signal.signal(sig, signal.SIG_DFL)
        os.write(status, b"R")
        try:
            os.execve(target, args, zygote.env)
        except OSError as err:
            os.write(status, f"E{err.errno} {err.strerror}: {args[0]}".encode())
        return 127
    os.write(status, b"R")
    os.close(status)
    if kind == "check":
        return check_syntax(target)
    return run_python(target, args, run.call)


def judge_child(zygote, entry_point, limits, payload, calls_fd, answers_fd, verdict_fd):
    """The test process of a call-a-function run: never returns."""
    try:
        tests = json.loads(read_exact(zygote.host_fd, payload))
        os.write(verdict_fd, b"k")  # the payload is off the host's pipe
        null = os.open(os.devnull, os.O_RDWR)
        for target in (0, 1, 2):
            os.dup2(null, target)
        confine(zygote, limits, zygote.judge_uid, zygote.judge_uid)
        os.chdir("/")
        close_fds_except({0, 1, 2, calls_fd, answers_fd, verdict_fd})
        verdict = calls.run_tests(tests, entry_point, calls_fd, answers_fd, limits["output_bytes"])
    except BaseException as err:
        verdict = {"outcome": "test_error", "message": f"the test process failed: {err!r}"[:300]}
    try:
        os.write(verdict_fd, json.dumps(verdict).encode()[:VERDICT_BYTES])
    finally:
        os._exit(0)


def confine(zygote, limits, uid, gid):
    """Limits, an unprivileged uid, no new privileges, the system-call filter."""
    prefer_to_be_killed(zygote.prctl)
    # Unsandboxed (unsafe_local), a run shares the user's process count: no limit there.
    set_limits(limits, processes=zygote.is_init)
    if uid >= 0:
        os.setgroups([])
        os.setgid(gid)
        os.setuid(uid)
    zygote.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
    if zygote.seccomp is not None:
        zygote.seccomp.install()


def prefer_to_be_killed(prctl):
    """oom_score_adj 1000: over a worker's memory limit the kernel kills the run, not the
    zygote. A process that cannot be dumped has root's /proc files: dumpable for that write."""
    try:
        with open("/proc/self/oom_score_adj", "w") as f:
            f.write("1000")
    except PermissionError:
        prctl(PR_SET_DUMPABLE, 1, 0, 0, 0)
        try:
            with open("/proc/self/oom_score_adj", "w") as f:
                f.write("1000")
        finally:
            prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)


def write_files(directory, files, uid, gid):
    for name, text in files.items():
        path = os.path.join(directory, name)
        with open(path, "x", encoding="utf-8") as f:
            f.write(text)
        if uid >= 0:
            os.chown(path, uid, gid)


def set_limits(limits, processes):
    cpu = max(1, math.ceil(limits["cpu_ms"] / 1000))
    memory, output = limits["memory_bytes"], limits["output_bytes"]
    for res, value in (
        (resource.RLIMIT_CORE, 0),
        (resource.RLIMIT_AS, memory),
        (resource.RLIMIT_STACK, limits["stack_bytes"]),
        (resource.RLIMIT_FSIZE, output),
        (resource.RLIMIT_NOFILE, limits["open_files"]),
        (resource.RLIMIT_MSGQUEUE, 0),
    ):
        resource.setrlimit(res, (value, value))
    if processes:
        resource.setrlimit(resource.RLIMIT_NPROC, (limits["processes"], limits["processes"]))
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))


def close_fds_except(keep):
    low = 0
    for fd in sorted(keep):
        if fd > low:
            os.closerange(low, fd)
        low = fd + 1
    os.closerange(low, 1 << 16)


def read_exact(fd, n):
    chunks = []
    while n:
        chunk = os.read(fd, min(n, 1 << 20))
        if not chunk:
            raise EOFError("the host's pipe ended inside a request")
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


# -- Python programs --------------------------------------------------------------------------


def install_stdio():
    """Text streams on fds 0/1/2 for runs; each run dup2s its own files onto those fds."""
    sys.stdin = sys.__stdin__ = io.TextIOWrapper(
        io.BufferedReader(io.FileIO(0, "r", closefd=False)), encoding="utf-8"
    )
    sys.stdout = sys.__stdout__ = io.TextIOWrapper(
        io.BufferedWriter(io.FileIO(1, "w", closefd=False)), encoding="utf-8"
    )
    sys.stderr = sys.__stderr__ = io.TextIOWrapper(
        io.BufferedWriter(io.FileIO(2, "w", closefd=False)),
        encoding="utf-8",
        errors="backslashreplace",
        line_buffering=True,
    )


def check_syntax(source):
    try:
        compile(source, "main.py", "exec", dont_inherit=True)
    except (SyntaxError, ValueError, MemoryError, RecursionError, OverflowError):
        traceback.print_exc(limit=0)
        sys.stderr.flush()
        return 1
    return 0


def run_python(program, args, call):
    """Run a program as `python main.py` would, in this already started interpreter; with
    `call`, then answer the test process's calls of its function until the tests end."""
    name = program.co_filename
    main = types.ModuleType("__main__")
    main.__file__ = name
    main.__builtins__ = builtins
    sys.modules["__main__"] = main
    sys.argv = [name, *args]
    status = 0
    try:
        exec(program, main.__dict__)
        if call is not None:
            calls.serve(main.__dict__, *call)
    except SystemExit as stop:
        status = exit_code(stop)
    except BaseException as err:
        # Hide this frame: the traceback reads as if `python main.py` had run the program.
        traceback.print_exception(type(err), err, err.__traceback__.tb_next)
        status = 1
    try:
        threading = sys.modules.get("threading")  # not imported by the zygote: see zygote.main
        if threading is not None:
            threading._shutdown()  # join non-daemon threads, as the interpreter would at exit
        atexit._run_exitfuncs()
    except BaseException:
        traceback.print_exc()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BaseException:
            status = status or 120
    return status


def exit_code(stop):
    if stop.code is None:
        return 0
    if isinstance(stop.code, int):
        return stop.code & 0xFF
    print(stop.code, file=sys.stderr)
    return 1

"""The sandbox's warm interpreter: it runs inside the isolation and forks one process per run.

One zygote serves one pool worker. Under bubblewrap it is PID 1 of the sandbox's own PID
namespace; with `unsafe_local` it is a plain child process. It reads requests from the host on
stdin and answers on stdout (4-byte big-endian length + JSON). For each run it forks a child that
starts a new session, applies rlimits, drops to the run uid (when started as root), changes to a
fresh private directory and then runs the program: a Python program is executed in the already
warm interpreter (no interpreter start-up), anything else is exec'd. The zygote enforces the
wall-clock limit and, once the run ends, kills every process the run left behind before
answering, so nothing survives a run.

Prepared programs live in the zygote's memory, out of the runs' reach: a Python program as a
code object, a compiled binary as a sealed memfd (exec'd by descriptor). Runs cannot alter
them even where they share the zygote's uid (bubblewrap as a normal user); there the zygote
also sweeps /tmp after each run, so one run leaves nothing for the next.

Standard library only: it runs under `python -I -S` with no access to the ascent package.
Requests: {"op": "prepare" | "run" | "drop", ...}; see `handle`.
"""

import atexit
import builtins
import contextlib
import ctypes
import errno
import fcntl
import gc
import io
import json
import math
import os
import resource
import select
import signal
import struct
import sys
import time
import traceback
import types

PR_SET_DUMPABLE = 4
PR_SET_NO_NEW_PRIVS = 38
PR_SET_CHILD_SUBREAPER = 36
STDERR_KEEP = 65536  # bytes of stderr sent back (its tail)
VERDICT_FD = 3


class Zygote:
    def __init__(self, root, uid, gid):
        self.root = root
        self.uid = uid
        self.gid = gid
        self.is_init = os.getpid() == 1
        self.jobs = {}
        self.scratch = os.path.join(root, "run")  # each run's private directory, made afresh
        self.io = os.path.join(root, "io")
        # Runs that share our uid could write anywhere in /tmp: clean up after each.
        self.sweeps = uid < 0 and self.is_init
        self.make_dirs()
        libc = ctypes.CDLL(None, use_errno=True)
        self.prctl = libc.prctl
        # Runs must not read or trace this process (matters when they share its uid).
        self.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
        if not self.is_init:
            self.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
        # What every run starts with: set once here, so forked runs inherit it for free.
        self.env = {
            "PATH": "/usr/bin:/bin",
            "LANG": "C.UTF-8",
            "HOME": self.scratch,
            "TMPDIR": self.scratch,
        }
        os.environ.clear()
        os.environ.update(self.env)
        install_stdio()

    # -- requests ---------------------------------------------------------------------------

    def handle(self, req):
        op = req.get("op")
        if op == "prepare":
            return self.prepare(req)
        if op == "run":
            return self.run(req)
        if op == "drop":
            job = self.jobs.pop(req["job"], {})  # a program that failed to compile has none
            if "fd" in job:
                os.close(job["fd"])
            return {"ok": True}
        return {"error": f"unknown op {op!r}"}

    def prepare(self, req):
        """Check (Python) or compile (C++) a program in a limited run, then keep it in memory."""
        job, language, code = req["job"], req["language"], req["code"]
        source = code.encode("utf-8", "surrogatepass")
        if language == "python":
            result = self.execute(("check", source, None), req["limits"], "", {}, None)
            if result["exit_code"] == 0:  # it compiled within the limits: safe to compile here
                program = compile(source, "main.py", "exec", dont_inherit=True)
                self.jobs[job] = {"language": language, "code": program}
            return result
        argv = [req["compiler"], *req["flags"], "-o", "main", "main.cpp"]
        what = ("exec", req["compiler"], argv)
        result = self.execute(what, req["limits"], "", {"main.cpp": code}, None, keep="main")
        binary = result.pop("kept", None)
        if binary is not None and result["exit_code"] == 0:
            self.jobs[job] = {"language": language, "fd": sealed_memfd(binary)}
        return result

    def run(self, req):
        job = self.jobs[req["job"]]
        args = req.get("args", [])
        if job["language"] == "python":
            what = ("python", job["code"], args)
        else:
            what = ("exec", job["fd"], ["main", *args])
        return self.execute(
            what, req["limits"], req.get("stdin", ""), req.get("files", {}), req.get("harness")
        )

    def make_dirs(self):
        for path, mode in ((self.root, 0o711), (self.io, 0o700)):
            if os.path.islink(path) or (os.path.exists(path) and not os.path.isdir(path)):
                remove(path)
            os.makedirs(path, exist_ok=True)
            os.chmod(path, mode)

    def sweep(self):
        """Remove whatever a run wrote outside its own directory (runs share our uid here)."""
        for parent, keep in (("/tmp", self.root), (self.root, self.io)):
            for name in os.listdir(parent):
                if os.path.join(parent, name) != keep:
                    remove(os.path.join(parent, name))
        self.make_dirs()

    # -- one run ----------------------------------------------------------------------------

    def execute(self, what, limits, stdin, files, harness, keep=None):
        scratch = self.scratch
        os.mkdir(scratch, 0o700)
        for name, text in files.items():
            with open(os.path.join(scratch, name), "w", encoding="utf-8") as f:
                f.write(text)
            if self.uid >= 0:
                os.chown(os.path.join(scratch, name), self.uid, self.gid)
        if self.uid >= 0:
            os.chown(scratch, self.uid, self.gid)
        paths = {name: os.path.join(self.io, name) for name in ("in", "out", "err", "verdict")}
        for path in paths.values():  # fresh files: nothing a previous run left can redirect them
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
        with open(paths["in"], "x", encoding="utf-8", errors="surrogatepass") as f:
            f.write(stdin)
        status_r, status_w = os.pipe()
        start = time.monotonic()
        pid = os.fork()
        if pid == 0:
            os.close(status_r)
            self.child(what, limits, scratch, paths, harness, status_w)
        os.close(status_w)
        wall_timeout = not self.wait_exit(pid, limits["wall_ms"] / 1000)
        if wall_timeout:
            os.kill(pid, signal.SIGKILL)
        _, status, usage = os.wait4(pid, 0)
        wall_ms = (time.monotonic() - start) * 1000
        self.kill_leftovers(pid)
        started, error = self.read_status(status_r)
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
        limit = limits["output_bytes"]
        result["stdout"], result["stdout_bytes"] = read_text(paths["out"], limit + 1, head=True)
        result["stderr"], result["stderr_bytes"] = read_text(paths["err"], STDERR_KEEP)
        if harness is not None:
            result["verdict"] = read_text(paths["verdict"], 4096, head=True)[0]
        if keep is not None:
            with contextlib.suppress(OSError), open(os.path.join(scratch, keep), "rb") as f:
                result["kept"] = f.read()
        remove(scratch)
        if self.sweeps:
            self.sweep()
        return result

    def wait_exit(self, pid, seconds):
        """Wait for the child to exit; False when `seconds` pass first."""
        fd = os.pidfd_open(pid)
        try:
            poller = select.poll()
            poller.register(fd, select.POLLIN)
            deadline = time.monotonic() + seconds
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                if poller.poll(math.ceil(left * 1000)):
                    return True
        finally:
            os.close(fd)

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

    @staticmethod
    def read_status(fd):
        """(started, error): the child writes 'R' as the program starts, 'E<errno> ...' if exec
        fails, or 'setup: <traceback>' if it could not set the run up."""
        data = b""
        while True:
            chunk = os.read(fd, 4096)
            if not chunk:
                break
            data += chunk
        os.close(fd)
        text = data.decode("utf-8", "replace")
        if text.startswith("R"):
            return True, text[1:] or None
        return False, text or "the run ended before the program started"

    # -- the forked child -------------------------------------------------------------------

    def child(self, what, limits, scratch, paths, harness, status_w):
        """The forked run: never returns."""
        code = 127
        try:
            code = self.start_program(what, limits, scratch, paths, harness, status_w)
        except BaseException:
            try:
                traceback.print_exc()
                sys.stderr.flush()
            except BaseException:
                pass
        finally:
            os._exit(code)

    def start_program(self, what, limits, scratch, paths, harness, status_w):
        try:
            status_w = fcntl.fcntl(status_w, fcntl.F_DUPFD_CLOEXEC, 100)  # clear of fds 0-3
            os.setsid()
            redirect(paths, harness is not None)
            # Unsandboxed (unsafe_local), a run shares the user's process count: no limit there.
            set_limits(limits, processes=self.is_init)
            if self.uid >= 0:
                os.setgroups([])
                os.setgid(self.gid)
                os.setuid(self.uid)
            self.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
            os.chdir(scratch)
            os.umask(0o077)
            keep = {0, 1, 2, status_w}
            if harness is not None:
                keep.add(VERDICT_FD)
            if isinstance(what[1], int):
                keep.add(what[1])  # the memfd to exec
            close_fds_except(keep)
        except BaseException:
            os.write(status_w, b"setup: " + traceback.format_exc().encode())
            return 127
        if what[0] == "exec":
            for sig in (signal.SIGPIPE, signal.SIGXFSZ):  # Python ignores these; programs must not
                signal.signal(sig, signal.SIG_DFL)
            os.write(status_w, b"R")
            try:
                os.execve(what[1], what[2], self.env)
            except OSError as err:
                os.write(status_w, f"E{err.errno} {err.strerror}: {what[2][0]}".encode())
            return 127
        os.write(status_w, b"R")
        os.close(status_w)
        if what[0] == "check":
            return check_syntax(what[1])
        return run_python(what[1], what[2], harness)


def redirect(paths, verdict):
    """Point fds 0/1/2 (and 3 for a harness verdict) at this run's files."""
    new = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
    fds = [
        (0, paths["in"], os.O_RDONLY | os.O_NOFOLLOW),
        (1, paths["out"], new),
        (2, paths["err"], new),
    ]
    if verdict:
        fds.append((VERDICT_FD, paths["verdict"], new))
    for target, path, flags in fds:
        fd = os.open(path, flags, 0o600)
        if fd != target:
            os.dup2(fd, target)
            os.close(fd)


def set_limits(limits, processes):
    cpu = max(1, math.ceil(limits["cpu_ms"] / 1000))
    memory, output = limits["memory_bytes"], limits["output_bytes"]
    for res, value in (
        (resource.RLIMIT_CORE, 0),
        (resource.RLIMIT_AS, memory),
        (resource.RLIMIT_STACK, limits["stack_bytes"]),
        (resource.RLIMIT_FSIZE, output),
        (resource.RLIMIT_NOFILE, limits["open_files"]),
    ):
        resource.setrlimit(res, (value, value))
    if processes:
        resource.setrlimit(resource.RLIMIT_NPROC, (limits["processes"], limits["processes"]))
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))


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


def run_python(program, args, harness):
    """Run a program as `python main.py` would, in this already started interpreter."""
    name = program.co_filename
    main = types.ModuleType("__main__")
    main.__file__ = name
    main.__builtins__ = builtins
    sys.modules["__main__"] = main
    sys.argv = [name, *args]
    status = 0
    try:
        exec(program, main.__dict__)
        if harness is not None:
            check_function(main.__dict__, harness)
    except SystemExit as stop:
        status = exit_code(stop)
    except BaseException as err:
        # Hide this frame: the traceback reads as if `python main.py` had run the program.
        traceback.print_exception(type(err), err, err.__traceback__.tb_next)
        status = 1
    try:
        threading = sys.modules.get("threading")  # not imported here: see main()
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


PLAIN_TYPES = (int, float, complex, str, bytes, bool, type(None))


def plain(value, depth=0):
    """True for values built only from built-in data types (no custom __eq__ can hide here)."""
    if depth > 50:
        return False
    kind = type(value)
    if kind in PLAIN_TYPES:
        return True
    if kind in (list, tuple, set, frozenset):
        return all(plain(v, depth + 1) for v in value)
    if kind is dict:
        return all(plain(k, depth + 1) and plain(v, depth + 1) for k, v in value.items())
    return False


def check_function(namespace, harness):
    """Call-a-function tests: run the test code against the entry point, then write a verdict."""
    nonce = harness["nonce"]
    entry = harness["entry_point"]
    if entry not in namespace or not callable(namespace[entry]):
        raise NameError(f"the program defines no function {entry!r}")
    function = namespace[entry]

    def candidate(*args, **kwargs):
        value = function(*args, **kwargs)
        if not plain(value):
            raise TypeError(f"{entry} returned a {type(value).__name__}, not plain data")
        return value

    test_code = compile(harness["test"], "tests.py", "exec", dont_inherit=True)
    harness.clear()
    exec(test_code, namespace)
    namespace["check"](candidate)
    os.write(VERDICT_FD, f"pass {nonce}".encode())


def sealed_memfd(data):
    """An in-memory executable nobody can modify: the compiled program, kept by the zygote."""
    fd = os.memfd_create("main", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    write_all(fd, data)
    seals = fcntl.F_SEAL_SEAL | fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_WRITE
    fcntl.fcntl(fd, fcntl.F_ADD_SEALS, seals)
    return fd


def close_fds_except(keep):
    low = 0
    for fd in sorted(keep):
        if fd > low:
            os.closerange(low, fd)
        low = fd + 1
    os.closerange(low, 1 << 16)


def remove(path):
    """Delete a file or a directory tree, whatever modes a run gave it."""
    try:
        if os.path.isdir(path) and not os.path.islink(path):
            os.chmod(path, 0o700)
            for name in os.listdir(path):
                remove(os.path.join(path, name))
            os.rmdir(path)
        else:
            os.unlink(path)
    except FileNotFoundError:
        pass


def own_children():
    pids = []
    try:
        for tid in os.listdir("/proc/self/task"):
            with open(f"/proc/self/task/{tid}/children") as f:
                pids.extend(int(p) for p in f.read().split())
    except OSError:
        pass
    return pids


def read_text(path, limit, head=False):
    """Up to `limit` bytes of a file (its head or its tail) as text, and the file's full size."""
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if not head and size > limit:
                f.seek(size - limit)
            data = f.read(limit)
    except FileNotFoundError:
        return "", 0
    return data.decode("utf-8", "replace"), size


# -- the wire ---------------------------------------------------------------------------------


def read_exact(fd, n):
    data = b""
    while len(data) < n:
        chunk = os.read(fd, n - len(data))
        if not chunk:
            return None
        data += chunk
    return data


def write_all(fd, data):
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def main(argv):
    root, uid, gid = argv[0], int(argv[1]), int(argv[2])
    rfd, wfd = os.dup(0), os.dup(1)  # the host's pipes move off 0/1, which runs replace
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)
    os.close(null)
    zygote = Zygote(root, uid, gid)
    # Forking is the cost of a run, so keep this process lean: no threading module (its fork
    # handlers touch many pages in every child), and objects frozen out of the collector's way.
    assert "threading" not in sys.modules
    gc.freeze()
    write_all(wfd, frame({"ok": True, "pid": os.getpid()}))
    while True:
        head = read_exact(rfd, 4)
        if head is None:
            return
        request = json.loads(read_exact(rfd, struct.unpack(">I", head)[0]))
        try:
            reply = zygote.handle(request)
        except Exception:
            reply = {"error": traceback.format_exc()}
        write_all(wfd, frame(reply))


def frame(obj):
    data = json.dumps(obj).encode()
    return struct.pack(">I", len(data)) + data


if __name__ == "__main__":
    try:
        main(sys.argv[1:])
    except OSError as err:
        if err.errno != errno.EPIPE:
            raise

"""The host's side of one sandbox worker: starts its zygote and talks to it.

A `Worker` runs one request at a time. Programs are prepared once (`prepare`: Python is
syntax-checked, C++ compiled) and then run as often as needed (`run`), so a solution's tests
reuse one compiled binary. If the zygote dies or stops answering, the worker is restarted and
that request reports `sandbox_error`; a zygote that could not clean up after a run answers and
then restarts. A restarted worker prepares its programs again when they next run.

As root a worker holds two uids of its own (`uids`); where the host allows, it lives in a cgroup
of its own (`cgroups`), whose memory limit is set before each run and whose peak and OOM kills
are read after it.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import select
import shutil
import signal
import struct
import subprocess
import time
from dataclasses import dataclass
from typing import Any

from ascent.config.rewards import SandboxSection
from ascent.errors import AscentError
from ascent.rewards.sandbox import uids
from ascent.rewards.sandbox.cgroups import WorkerCgroup
from ascent.rewards.sandbox.isolation import WorkerCommand, worker_command
from ascent.rewards.sandbox.limits import Limits, RunResult, apply_verdict, result_from_wire

LANGUAGES = ("python", "cpp")
START_TIMEOUT_S = 30.0
# Extra seconds the host waits beyond a run's own wall limit before declaring the worker stuck.
HOST_GRACE_S = 10.0


_COMPILE_FAILURES = {
    "timeout": "compilation ran past compile_time_limit_ms",
    "memory_limit": "compilation ran out of compile_memory_mb",
    "output_limit": "the compiled program is larger than compile_memory_mb",
}


class WorkerDied(RuntimeError):
    """The zygote crashed or stopped answering; the worker restarts on the next request."""


@dataclass(frozen=True)
class Program:
    """A prepared program inside one worker; `compile` is the preparation's own result."""

    job: str
    language: str
    compile: RunResult

    @property
    def ok(self) -> bool:
        return self.compile.status == "ok"


class Worker:
    """One zygote process (inside its sandbox) and the pipes to it."""

    _ids = itertools.count()

    def __init__(self, cfg: SandboxSection, index: int) -> None:
        self.cfg = cfg
        self.index = index
        self._proc: subprocess.Popen[bytes] | None = None
        self._command: WorkerCommand | None = None
        self._compiler: str | None = None
        self._uids: uids.UidPair | None = None
        self._cgroup: WorkerCgroup | None = None
        self._sources: dict[str, dict[str, Any]] = {}  # job -> its prepare request
        self._live: set[str] = set()  # jobs the running zygote holds

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            return
        self.stop()
        try:
            if os.geteuid() == 0 and not self.cfg.unsafe_local:
                self._uids = uids.allocate(self.cfg.run_uid)
            self._cgroup = WorkerCgroup.create()
            join = self._cgroup.join if self._cgroup is not None else []
            self._command = worker_command(self.cfg, self._uids, join)
            self._proc = subprocess.Popen(
                self._command.argv,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env=self._command.env,
                start_new_session=True,
            )
            hello = self._receive(START_TIMEOUT_S)
            if not hello.get("ok"):
                raise WorkerDied(str(hello))
            if self._cgroup is not None:  # the run's processes, and a test process beside them
                self._cgroup.limit_processes(self.cfg.max_processes + 1)
        except (WorkerDied, OSError) as err:
            self.stop()
            raise AscentError(f"the code sandbox did not start: {err}") from None
        except BaseException:
            self.stop()
            raise
        self._live.clear()

    def stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is not None:
            if proc.poll() is None:
                # The whole session: bwrap and, with --die-with-parent, everything inside it.
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            for stream in (proc.stdin, proc.stdout, proc.stderr):
                if stream is not None:
                    stream.close()
        if self._cgroup is not None:
            self._cgroup.remove()
            self._cgroup = None
        if self._uids is not None:
            self._uids.release()
            self._uids = None
        if self._command is not None and self._command.cleanup_dir:
            shutil.rmtree(self._command.cleanup_dir, ignore_errors=True)
        self._command = None
        self._live.clear()

    # -- requests ----------------------------------------------------------------------------

    def prepare(self, code: str, language: str) -> Program:
        """Store (and for C++ compile) a program; check `Program.ok` before running it."""
        if language not in LANGUAGES:
            raise AscentError(f"unsupported language {language!r}; use one of {LANGUAGES}")
        job = f"j{next(self._ids)}"
        limits = Limits.for_compile(self.cfg)
        request: dict[str, Any] = {
            "op": "prepare",
            "job": job,
            "language": language,
            "code": code,
            "limits": limits.wire(),
        }
        if language == "cpp":
            request["compiler"] = self._compiler_path()
            request["flags"] = list(self.cfg.cpp_flags)
        self._sources[job] = request
        result = self._prepare(request)
        if result.status not in ("ok", "sandbox_error"):
            result.detail = _COMPILE_FAILURES.get(result.status, "compilation failed")
            if result.exit_code:
                result.detail += f" (exit code {result.exit_code})"
            result.status = "compile_error"
        return Program(job, language, result)

    def _prepare(self, request: dict[str, Any]) -> RunResult:
        result = self._run_request(request, Limits.for_compile(self.cfg))
        if result.status == "ok":
            self._live.add(request["job"])
        return result

    def run(
        self,
        program: Program,
        stdin: str,
        limits: Limits,
        *,
        files: dict[str, str] | None = None,
        args: list[str] | None = None,
    ) -> RunResult:
        """Run a prepared program once with `stdin`; `files` go into its directory."""
        request: dict[str, Any] = {"op": "run", "job": program.job, "limits": limits.wire()}
        if args:
            request["args"] = args
        # Sent past the zygote, to the run itself: nothing a later run could find in memory.
        payload = {"stdin": stdin.encode("utf-8", "surrogatepass")}
        if files:
            payload["files"] = json.dumps(files).encode()
        return self._run_job(program, request, limits, payload)

    def check_function(
        self,
        program: Program,
        test_code: str,
        entry_point: str,
        limits: Limits,
        setup: str | None = None,
    ) -> RunResult:
        """Run HumanEval-style test code against `entry_point`; status ok only if it all passed.

        The tests run in a process of their own that calls the program's function over a pipe
        with plain data; `setup` (the problem's prompt) runs there first, for helpers the tests
        use. The test code goes to that process alone, never to the program's.
        """
        tests = json.dumps({"setup": setup, "test": test_code}).encode()
        request: dict[str, Any] = {
            "op": "run",
            "job": program.job,
            "limits": limits.wire(),
            "entry_point": entry_point,
        }
        return apply_verdict(self._run_job(program, request, limits, {"tests": tests}))

    def drop(self, program: Program) -> None:
        self._sources.pop(program.job, None)
        if program.job in self._live:
            self._live.discard(program.job)
            with contextlib.suppress(WorkerDied):
                self._call({"op": "drop", "job": program.job}, HOST_GRACE_S)

    def run_source(self, code: str, language: str, stdin: str, limits: Limits) -> RunResult:
        """Prepare, run once, drop: the one-shot path behind `run_program`."""
        program = self.prepare(code, language)
        try:
            if not program.ok:
                return program.compile
            return self.run(program, stdin, limits)
        finally:
            self.drop(program)

    def _run_job(
        self,
        program: Program,
        request: dict[str, Any],
        limits: Limits,
        payload: dict[str, bytes],
    ) -> RunResult:
        """Run a request for a prepared program, preparing it again if the worker restarted."""
        self.start()
        if program.job not in self._live and program.job in self._sources:
            again = self._prepare(self._sources[program.job])
            if again.status != "ok":
                detail = f"the sandbox restarted and could not prepare the program again: {again}"
                return RunResult("sandbox_error", detail=detail)
        return self._run_request(request, limits, payload)

    # -- the wire ----------------------------------------------------------------------------

    def _run_request(
        self, request: dict[str, Any], limits: Limits, payload: dict[str, bytes] | None = None
    ) -> RunResult:
        try:
            self.start()
            if self._cgroup is not None:
                self._cgroup.before_run((limits.memory_mb << 20) + (limits.output_kb << 10))
            raw = self._call(request, limits.wall_cap_ms / 1000 + HOST_GRACE_S, payload)
            if self._cgroup is not None and "started" in raw:
                peak, raw["oom_killed"] = self._cgroup.after_run()
                if peak is not None:
                    raw["memory_kb"] = max(raw["memory_kb"], peak >> 10)
        except (WorkerDied, OSError) as err:
            self.stop()
            return RunResult("sandbox_error", detail=f"sandbox worker failed: {err}")
        return result_from_wire(raw, limits)

    def _call(
        self, request: dict[str, Any], timeout: float, payload: dict[str, bytes] | None = None
    ) -> dict[str, Any]:
        """Send a request (its payload parts follow it raw, in order) and read the reply."""
        self.start()
        assert self._proc is not None and self._proc.stdin is not None
        parts = {name: data for name, data in (payload or {}).items() if data}
        if parts:
            request = {**request, "payload": {name: len(data) for name, data in parts.items()}}
        data = json.dumps(request).encode()
        try:
            self._proc.stdin.write(b"".join([struct.pack(">I", len(data)), data, *parts.values()]))
            self._proc.stdin.flush()
        except (BrokenPipeError, OSError) as err:
            raise WorkerDied(f"could not send the request ({err})") from None
        reply = self._receive(timeout)
        if reply.get("restart"):  # it answered, then exited: start afresh next time
            self.stop()
        if "error" in reply and "started" not in reply:
            raise WorkerDied(reply["error"].strip().splitlines()[-1])
        return reply

    def _receive(self, timeout: float) -> dict[str, Any]:
        """A reply: its JSON, then the raw buffers it announces (outputs, verdict)."""
        assert self._proc is not None and self._proc.stdout is not None
        deadline = time.monotonic() + timeout
        head = self._read(4, deadline, timeout)
        reply = json.loads(self._read(struct.unpack(">I", head)[0], deadline, timeout))
        for name, size in reply.pop("attached", []):
            raw = self._read(size, deadline, timeout)
            if name == "verdict":
                with contextlib.suppress(ValueError):
                    reply[name] = json.loads(raw)
            else:
                reply[name] = raw.decode("utf-8", "replace")
        return reply

    def _read(self, n: int, deadline: float, timeout: float) -> bytes:
        assert self._proc is not None and self._proc.stdout is not None
        fd = self._proc.stdout.fileno()
        chunks: list[bytes] = []
        while n:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                self.stop()
                raise WorkerDied(f"the sandbox did not answer within {timeout:.0f} s")
            chunk = os.read(fd, min(n, 1 << 20))
            if not chunk:
                raise WorkerDied(self._death_note())
            chunks.append(chunk)
            n -= len(chunk)
        return b"".join(chunks)

    def _death_note(self) -> str:
        assert self._proc is not None
        try:
            self._proc.wait(timeout=HOST_GRACE_S)
        except subprocess.TimeoutExpired:
            self.stop()
            return "the sandbox stopped answering"
        err = self._proc.stderr.read().decode(errors="replace") if self._proc.stderr else ""
        last = (err.strip().splitlines() or ["no message"])[-1]
        return f"the sandbox exited with code {self._proc.returncode}: {last}"

    def _compiler_path(self) -> str:
        if self._compiler is None:
            found = shutil.which(self.cfg.cpp_compiler)
            if found is None:
                raise AscentError(
                    f"C++ compiler {self.cfg.cpp_compiler!r} not found on PATH: install it "
                    "(Debian/Ubuntu: apt-get install g++) or set sandbox.cpp_compiler"
                )
            self._compiler = found
        return self._compiler

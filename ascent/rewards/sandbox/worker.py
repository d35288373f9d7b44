"""The host's side of one sandbox worker: starts its zygote and talks to it.

A `Worker` runs one request at a time. Programs are prepared once (`prepare`: Python is
syntax-checked, C++ compiled) and then run as often as needed (`run`), so a solution's tests
reuse one compiled binary. If the zygote dies or stops answering, the worker is restarted
and the request reports `sandbox_error`.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import secrets
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
from ascent.rewards.sandbox.isolation import WorkerCommand, worker_command
from ascent.rewards.sandbox.limits import Limits, RunResult, result_from_wire

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

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            return
        self.stop()
        self._command = worker_command(self.cfg, self.index)
        self._proc = subprocess.Popen(
            self._command.argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=self._command.env,
            start_new_session=True,
        )
        try:
            hello = self._receive(START_TIMEOUT_S)
        except WorkerDied as err:
            self.stop()
            raise AscentError(f"the code sandbox did not start: {err}") from None
        if not hello.get("ok"):
            self.stop()
            raise AscentError(f"the code sandbox did not start: {hello}")

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
        if self._command is not None and self._command.cleanup_dir:
            shutil.rmtree(self._command.cleanup_dir, ignore_errors=True)
        self._command = None

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
        result = self._run_request(request, limits)
        if result.status not in ("ok", "sandbox_error"):
            result.detail = _COMPILE_FAILURES.get(result.status, "compilation failed")
            if result.exit_code:
                result.detail += f" (exit code {result.exit_code})"
            result.status = "compile_error"
        return Program(job, language, result)

    def run(
        self,
        program: Program,
        stdin: str,
        limits: Limits,
        *,
        harness: dict[str, str] | None = None,
        files: dict[str, str] | None = None,
        args: list[str] | None = None,
    ) -> RunResult:
        """Run a prepared program once with `stdin`; `harness` = call-a-function tests."""
        request: dict[str, Any] = {
            "op": "run",
            "job": program.job,
            "stdin": stdin,
            "limits": limits.wire(),
        }
        if harness is not None:
            request["harness"] = harness
        if files:
            request["files"] = files
        if args:
            request["args"] = args
        return self._run_request(request, limits)

    def drop(self, program: Program) -> None:
        with contextlib.suppress(WorkerDied):  # a restarted worker has no jobs at all
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

    def check_function(
        self, program: Program, test_code: str, entry_point: str, limits: Limits
    ) -> RunResult:
        """Run HumanEval-style test code against `entry_point`; status ok only if it all passed."""
        nonce = secrets.token_hex(16)
        harness = {"test": test_code, "entry_point": entry_point, "nonce": nonce}
        result = self.run(program, "", limits, harness=harness)
        if result.status == "ok" and result.verdict != f"pass {nonce}":
            result.status = "runtime_error"
            result.detail = "the program exited before its tests finished"
        return result

    # -- the wire ----------------------------------------------------------------------------

    def _run_request(self, request: dict[str, Any], limits: Limits) -> RunResult:
        try:
            raw = self._call(request, limits.wall_ms / 1000 + HOST_GRACE_S)
        except WorkerDied as err:
            self.stop()
            return RunResult("sandbox_error", detail=f"sandbox worker failed: {err}")
        return result_from_wire(raw, limits)

    def _call(self, request: dict[str, Any], timeout: float) -> dict[str, Any]:
        self.start()
        assert self._proc is not None and self._proc.stdin is not None
        data = json.dumps(request).encode()
        try:
            self._proc.stdin.write(struct.pack(">I", len(data)) + data)
            self._proc.stdin.flush()
        except (BrokenPipeError, OSError) as err:
            raise WorkerDied(f"could not send the request ({err})") from None
        reply = self._receive(timeout)
        if "error" in reply and "started" not in reply:
            raise WorkerDied(reply["error"].strip().splitlines()[-1])
        return reply

    def _receive(self, timeout: float) -> dict[str, Any]:
        assert self._proc is not None and self._proc.stdout is not None
        deadline = time.monotonic() + timeout
        head = self._read(4, deadline, timeout)
        return json.loads(self._read(struct.unpack(">I", head)[0], deadline, timeout))

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

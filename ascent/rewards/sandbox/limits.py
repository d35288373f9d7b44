"""What a run may use (`Limits`), what it did (`RunResult`), and how the one becomes a status."""

from __future__ import annotations

import signal
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

from ascent.config.rewards import SandboxSection

Status = Literal[
    "ok",
    "wrong_answer",
    "compile_error",
    "runtime_error",
    "timeout",
    "memory_limit",
    "output_limit",
    "sandbox_error",
]
STATUSES: tuple[Status, ...] = get_args(Status)

# What a program prints when an allocation fails under the address-space limit.
_MEMORY_MARKERS = ("MemoryError", "std::bad_alloc", "Cannot allocate memory", "out of memory")
_ENOMEM = 12

# The wall-clock limit catches programs that wait (sleep, block on input) rather than compute.
# Time a run spends runnable but waiting for a CPU is the machine's load, not the program's, so
# the sandbox does not count it; the limit stretches for it up to this many times its length.
WALL_STRETCH_MAX = 10


@dataclass(frozen=True)
class Limits:
    """Per-run resource limits; `wall_ms` is enforced by the sandbox, the rest by rlimits.

    `wall_ms` counts the time a run waits, not the time it waits for a CPU on a busy machine
    (up to `wall_cap_ms` of real time), so a correct program is not timed out by other jobs.
    """

    cpu_ms: int
    wall_ms: int
    memory_mb: int
    stack_mb: int
    processes: int
    open_files: int
    output_kb: int

    @classmethod
    def for_run(cls, cfg: SandboxSection, time_limit_ms: int | None = None) -> Limits:
        """Limits for running a program; `time_limit_ms` (a row's own) replaces the config's."""
        cpu = cfg.time_limit_ms if time_limit_ms is None else time_limit_ms
        return cls(
            cpu_ms=cpu,
            wall_ms=round(cpu * cfg.wall_limit_factor),
            memory_mb=cfg.memory_mb,
            stack_mb=cfg.stack_mb,
            processes=cfg.max_processes,
            open_files=cfg.max_open_files,
            output_kb=cfg.output_limit_kb,
        )

    @classmethod
    def for_compile(cls, cfg: SandboxSection) -> Limits:
        """Limits for a compiler: its own time and memory; the binary may be as big as memory."""
        return cls(
            cpu_ms=cfg.compile_time_limit_ms,
            wall_ms=round(cfg.compile_time_limit_ms * cfg.wall_limit_factor),
            memory_mb=cfg.compile_memory_mb,
            stack_mb=cfg.stack_mb,
            processes=cfg.max_processes,
            open_files=cfg.max_open_files,
            output_kb=cfg.compile_memory_mb * 1024,
        )

    @property
    def wall_cap_ms(self) -> int:
        """Real time after which a run stops however busy the machine is."""
        return self.wall_ms * WALL_STRETCH_MAX

    def wire(self) -> dict[str, int]:
        """The form the zygote reads."""
        return {
            "cpu_ms": self.cpu_ms,
            "wall_ms": self.wall_ms,
            "wall_cap_ms": self.wall_cap_ms,
            "memory_bytes": self.memory_mb << 20,
            "stack_bytes": self.stack_mb << 20,
            "processes": self.processes,
            "open_files": self.open_files,
            "output_bytes": self.output_kb << 10,
        }


@dataclass
class RunResult:
    """One program run. `time_ms` is wall-clock time; `memory_kb` is peak memory: the largest
    process's, or, where the worker has a cgroup, all the run's processes and files together
    when that is more. `verdict`: the test process's, for call-a-function runs."""

    status: Status
    exit_code: int | None = None
    stdout: str = ""
    stderr: str = ""
    time_ms: float = 0.0
    cpu_ms: float = 0.0
    memory_kb: int = 0
    signal: int | None = None
    detail: str = ""
    verdict: dict[str, str] | None = field(default=None, repr=False)

    def to_json(self) -> dict[str, Any]:
        """The `ascent sandbox run` object (its keys are part of the command-line contract)."""
        return {
            "status": self.status,
            "exit_code": self.exit_code,
            "stdout": self.stdout,
            "stderr": self.stderr,
            "time_ms": round(self.time_ms, 1),
            "cpu_ms": round(self.cpu_ms, 1),
            "memory_kb": self.memory_kb,
            "signal": self.signal,
            "detail": self.detail,
        }


def result_from_wire(raw: dict[str, Any], limits: Limits) -> RunResult:
    """Turn the zygote's raw facts about a run into a `RunResult` with its status."""
    if "error" in raw and "started" not in raw:
        return RunResult("sandbox_error", detail=f"sandbox: {raw['error']}")
    status, detail = _classify(raw, limits)
    return RunResult(
        status=status,
        exit_code=raw["exit_code"],
        stdout=raw["stdout"][: limits.output_kb << 10],
        stderr=raw["stderr"],
        time_ms=raw["wall_ms"],
        cpu_ms=raw["cpu_ms"],
        memory_kb=raw["memory_kb"],
        signal=raw["signal"],
        detail=detail,
        verdict=raw.get("verdict"),
    )


def _classify(raw: dict[str, Any], limits: Limits) -> tuple[Status, str]:
    sig = raw["signal"]
    error = raw["error"]
    if not raw["started"]:
        return "sandbox_error", f"sandbox: {error}"
    if error and error.startswith(f"E{_ENOMEM} "):
        return "memory_limit", "the program does not fit in the memory limit"
    if error:
        return "sandbox_error", f"sandbox: {error}"
    if raw.get("oom_killed"):
        return "memory_limit", f"memory limit of {limits.memory_mb} MB for all its processes"
    if raw["wall_timeout"]:
        return "timeout", f"wall-clock limit of {limits.wall_ms} ms"
    if sig == signal.SIGXCPU or raw["cpu_ms"] > limits.cpu_ms:
        return "timeout", f"CPU time limit of {limits.cpu_ms} ms"
    if sig == signal.SIGXFSZ or raw["stdout_bytes"] >= limits.output_kb << 10:
        return "output_limit", f"output limit of {limits.output_kb} KB"
    if raw["exit_code"] == 0:
        return "ok", ""
    tail = raw["stderr"][-2000:]
    if any(marker in tail for marker in _MEMORY_MARKERS):
        return "memory_limit", f"memory limit of {limits.memory_mb} MB"
    if sig is not None:
        return "runtime_error", f"killed by {_signal_name(sig)}"
    return "runtime_error", f"exit code {raw['exit_code']}"


def apply_verdict(result: RunResult) -> RunResult:
    """A call-a-function run's status: a limit the program hit, else the test process's verdict.

    The verdict comes from the test process alone (the program cannot reach it): passed, failed
    (an assertion: wrong_answer), error (runtime_error), test_error (the test code itself cannot
    run: sandbox_error, not the program's fault); none at all means the tests never finished.
    """
    if result.status in ("timeout", "memory_limit", "output_limit", "sandbox_error"):
        return result
    verdict = result.verdict or {}
    outcome, message = verdict.get("outcome"), verdict.get("message", "")
    if outcome == "passed":
        return result
    if outcome == "failed":
        result.status, result.detail = "wrong_answer", message
    elif outcome == "test_error":
        result.status, result.detail = "sandbox_error", f"the tests cannot run: {message}"
    else:
        result.status = "runtime_error"
        result.detail = message if outcome == "error" else "the tests did not finish"
    return result


def _signal_name(sig: int) -> str:
    try:
        return signal.Signals(sig).name
    except ValueError:
        return f"signal {sig}"

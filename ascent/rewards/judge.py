"""Judging a prepared program against tests: stdin/stdout (with an optional checker) or
call-a-function (HumanEval style).

Expected outputs stay on the host: the program only ever sees a test's input, and its output is
compared here, token by token. A checker, for problems with several right answers, is a separate
program run in its own sandboxed run with the input, the program's output and the expected
answer as files (`checker input.txt output.txt answer.txt`, testlib's convention; exit 0
accepts, 1 or 2 rejects, anything else is a checker failure). Function tests run in a process of
their own that calls the program's function with plain data.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

from ascent.errors import AscentError
from ascent.rewards.sandbox import Limits, Program, RunResult, Status, Worker

CHECKER_FILES = ("input.txt", "output.txt", "answer.txt")


@dataclass(frozen=True)
class StdioTest:
    input: str
    output: str


@dataclass
class TestResult:
    """One test's outcome, kept for logging."""

    status: Status
    time_ms: float = 0.0
    memory_kb: int = 0
    detail: str = ""
    kind: str = "hidden"

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "status": self.status,
            "time_ms": round(self.time_ms, 1),
            "memory_kb": self.memory_kb,
            "detail": self.detail,
        }


def outputs_match(expected: str, actual: str, float_tolerance: float = 0.0) -> bool:
    """Token-by-token comparison: whitespace and line breaks between tokens do not matter.

    With `float_tolerance` > 0, two numeric tokens also match when they differ by at most
    that much, absolutely or relative to the expected value (the usual judge rule).
    """
    want, got = expected.split(), actual.split()
    if len(want) != len(got):
        return False
    for w, g in zip(want, got, strict=True):
        if w == g:
            continue
        if float_tolerance <= 0:
            return False
        try:
            a, b = float(w), float(g)
        except ValueError:
            return False
        if not (math.isfinite(a) and math.isfinite(b)):
            return False
        if abs(a - b) > float_tolerance * max(1.0, abs(a)):
            return False
    return True


def parse_stdio_tests(tests: Any, what: str = "tests") -> list[StdioTest]:
    """Tests as a list of {"input", "output"}; also accepts a JSON string of that list and the
    code_contests form {"input": {"stdin": ...}, "output": {"stdout": ...}}."""
    if isinstance(tests, str):
        try:
            tests = json.loads(tests)
        except json.JSONDecodeError:
            raise AscentError(
                f"{what} is a string that is not a JSON list of tests; for call-a-function tests "
                "give an entry_point"
            ) from None
    if not isinstance(tests, list):
        raise AscentError(f"{what} must be a list of {{'input', 'output'}} objects")
    parsed = []
    for i, test in enumerate(tests):
        if not isinstance(test, dict) or "input" not in test or "output" not in test:
            raise AscentError(f"{what}[{i}] must be an object with 'input' and 'output'")
        stdin, stdout = test["input"], test["output"]
        if isinstance(stdin, dict):
            stdin = stdin.get("stdin", "")
        if isinstance(stdout, dict):
            stdout = stdout.get("stdout", "")
        if not isinstance(stdin, str) or not isinstance(stdout, str):
            raise AscentError(f"{what}[{i}]: input and output must be strings")
        parsed.append(StdioTest(stdin, stdout))
    return parsed


def run_stdio_tests(
    worker: Worker,
    program: Program,
    tests: list[StdioTest],
    limits: Limits,
    *,
    kind: str,
    float_tolerance: float,
    checker: Program | None,
    stop_at_first_failure: bool,
) -> list[TestResult]:
    """Run `tests` in order; stop after the first failure when asked."""
    results = []
    for test in tests:
        run = worker.run(program, test.input, limits)
        result = TestResult(run.status, run.time_ms, run.memory_kb, run.detail, kind)
        if run.status == "ok":
            result.status, result.detail = _judge_output(
                worker, test, run, limits, float_tolerance, checker
            )
        results.append(result)
        if result.status != "ok" and stop_at_first_failure:
            break
    return results


def _judge_output(
    worker: Worker,
    test: StdioTest,
    run: RunResult,
    limits: Limits,
    float_tolerance: float,
    checker: Program | None,
) -> tuple[Status, str]:
    if checker is None:
        if outputs_match(test.output, run.stdout, float_tolerance):
            return "ok", ""
        return "wrong_answer", "output differs from the expected output"
    files = dict(zip(CHECKER_FILES, (test.input, run.stdout, test.output), strict=True))
    verdict = worker.run(checker, "", limits, files=files, args=list(CHECKER_FILES))
    if verdict.status == "ok":
        return "ok", ""
    if verdict.status == "runtime_error" and verdict.exit_code in (1, 2):
        return "wrong_answer", verdict.stdout.strip()[:200] or "rejected by the checker"
    return "sandbox_error", f"checker failed: {verdict.status} {verdict.detail}".strip()


def run_function_test(
    worker: Worker,
    program: Program,
    test_code: str,
    entry_point: str,
    limits: Limits,
    setup: str | None = None,
) -> TestResult:
    """HumanEval style: `test_code` defines check(candidate); it must return without error.

    The tests run in their own process and call the program's function with plain data (see
    `Worker.check_function`); `setup` is trusted code run there first (the problem's prompt).
    """
    run = worker.check_function(program, test_code, entry_point, limits, setup)
    return TestResult(run.status, run.time_ms, run.memory_kb, run.detail)

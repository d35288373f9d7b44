"""The tiered code reward: run the program in the sandbox against its tests.

Tiers (values from `[reward.code]`): a program that does not compile, or no program at all,
gets compile_error_reward (0); one that compiles gets compile_reward (0.1); one that also passes
every sample test gets sample_reward (0.3); one that passes every test gets pass_reward (1.0).
With partial_credit, the fraction of hidden tests passed counts too: max(tier, pass_reward *
passed / total). A sandbox failure (not the program's fault) scores None.

With partial credit, a program that fails the sample tests never reaches pass_reward: its hidden
tests count as if one of them had failed too.

Columns: `tests` (a list of {"input", "output"} for stdin/stdout, or HumanEval-style test code
defining check(candidate) together with `entry_point`, and optionally `test_setup`: trusted code
the tests run first, e.g. the HumanEval prompt whose helpers some tests call), and optionally
`sample_tests`, `language` (python or cpp; else the code fence's tag, else default_language),
`time_limit_ms`, and `checker` (+ `checker_language`, else default_language) for problems with
several right answers.
"""

from __future__ import annotations

import re
import threading
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from ascent.config.rewards import CodeRewardSection, RewardSection, SandboxSection
from ascent.errors import AscentError
from ascent.rewards.base import (
    REWARDS,
    Scored,
    ScoredReward,
    column,
    completion_text,
    optional_column,
)
from ascent.rewards.judge import (
    StdioTest,
    TestResult,
    parse_stdio_tests,
    run_function_test,
    run_stdio_tests,
)
from ascent.rewards.sandbox import (
    Limits,
    Program,
    RunResult,
    SandboxPool,
    Status,
    Worker,
    check_isolation,
)

LANGUAGE_NAMES = {
    "python": "python",
    "python3": "python",
    "py": "python",
    "cpp": "cpp",
    "c++": "cpp",
    "cc": "cpp",
    "cxx": "cpp",
}
_FENCE = re.compile(r"```[ \t]*([\w+#.-]*)[^\n]*\n(.*?)```", re.DOTALL)
_OPEN_FENCE = re.compile(r"```[ \t]*([\w+#.-]*)[^\n]*\n")
COMPILE_LOG_CHARS = 2000


def extract_code(text: str) -> tuple[str, str | None]:
    """The program in a completion, and the language its code fence names (or None).

    The last fenced block whose tag is a known language wins, else the last fenced block; an
    unclosed fence (a truncated completion) runs to the end; no fence: the whole text.
    """
    blocks = _FENCE.findall(text)
    if blocks:
        tagged = [(tag, body) for tag, body in blocks if tag.lower() in LANGUAGE_NAMES]
        tag, body = (tagged or blocks)[-1]
        return body, LANGUAGE_NAMES.get(tag.lower())
    opened = list(_OPEN_FENCE.finditer(text))
    if opened:
        last = opened[-1]
        return text[last.end() :], LANGUAGE_NAMES.get(last.group(1).lower())
    return text, None


def language_name(name: str | None, what: str = "language") -> str | None:
    if name is None:
        return None
    canonical = LANGUAGE_NAMES.get(str(name).lower())
    if canonical is None:
        raise AscentError(f"{what} {name!r} is not supported; use python or cpp")
    return canonical


@dataclass(frozen=True)
class CodeTask:
    """One program and the tests it must pass."""

    code: str
    language: str
    tests: list[StdioTest] | None = None
    test_code: str | None = None  # call-a-function tests (HumanEval style)
    entry_point: str | None = None
    test_setup: str | None = None  # trusted code the function tests run first (the prompt)
    sample_tests: list[StdioTest] = field(default_factory=list)
    time_limit_ms: int | None = None
    checker: str | None = None
    checker_language: str | None = None  # None: [reward.code] default_language

    @property
    def total(self) -> int:
        return 1 if self.test_code is not None else len(self.tests or [])


def make_task(
    code: str,
    language: str,
    tests: Any,
    *,
    entry_point: Any = None,
    test_setup: Any = None,
    sample_tests: Any = None,
    time_limit_ms: Any = None,
    checker: Any = None,
    checker_language: Any = None,
) -> CodeTask:
    """Validate one row's test data; raises `AscentError` saying what is malformed."""
    if time_limit_ms is not None and (
        isinstance(time_limit_ms, bool) or not isinstance(time_limit_ms, int) or time_limit_ms < 1
    ):
        raise AscentError(f"time_limit_ms must be a positive integer (got {time_limit_ms!r})")
    if entry_point is not None:
        if not isinstance(entry_point, str) or not entry_point.isidentifier():
            raise AscentError(f"entry_point must be a function name (got {entry_point!r})")
        if not isinstance(tests, str):
            raise AscentError("with an entry_point, tests must be test code defining check()")
        if language != "python":
            raise AscentError("call-a-function tests (entry_point) need a Python program")
        if test_setup is not None and not isinstance(test_setup, str):
            raise AscentError("test_setup must be Python code (e.g. the problem's prompt)")
        return CodeTask(
            code,
            language,
            test_code=tests,
            entry_point=entry_point,
            test_setup=test_setup,
            time_limit_ms=time_limit_ms,
        )
    parsed = parse_stdio_tests(tests)
    if not parsed:
        raise AscentError("tests is empty: a program needs at least one test to be judged")
    samples = parse_stdio_tests(sample_tests, "sample_tests") if sample_tests is not None else []
    if checker is not None and not isinstance(checker, str):
        raise AscentError("checker must be the checker program's source code")
    return CodeTask(
        code,
        language,
        tests=parsed,
        sample_tests=samples,
        time_limit_ms=time_limit_ms,
        checker=checker,
        checker_language=language_name(checker_language, "checker_language"),
    )


@dataclass
class CodeVerdict:
    """A program's reward, overall status and per-test results."""

    reward: float | None
    status: Status
    passed: int
    total: int
    language: str
    tests: list[TestResult] = field(default_factory=list)
    compile: RunResult | None = None
    detail: str = ""

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "reward": self.reward,
            "status": self.status,
            "passed": self.passed,
            "total": self.total,
            "language": self.language,
            "tests": [t.to_json() for t in self.tests],
        }
        if self.compile is not None and self.compile.status != "ok":
            out["compile_log"] = self.compile.stderr[-COMPILE_LOG_CHARS:]
        if self.detail:
            out["detail"] = self.detail
        return out


def tier_reward(cfg: CodeRewardSection, samples_ok: bool | None, passed: int, total: int) -> float:
    """The reward of a program that compiled; `samples_ok` None: the problem has no samples."""
    if total and passed == total and samples_ok is not False:
        reward = cfg.pass_reward
    elif samples_ok:
        reward = cfg.sample_reward
    else:
        reward = cfg.compile_reward
    if cfg.partial_credit and total:
        counted = passed if samples_ok is not False else min(passed, total - 1)
        reward = max(reward, cfg.pass_reward * counted / total)
    return reward


def judge_task(
    worker: Worker, task: CodeTask, cfg: CodeRewardSection, sandbox_cfg: SandboxSection
) -> CodeVerdict:
    """Compile, run the sample tests, then the hidden tests; score by the tiers."""
    verdict = CodeVerdict(cfg.compile_error_reward, "compile_error", 0, task.total, task.language)
    if not task.code.strip():
        verdict.detail = "no code found"
        return verdict
    program = worker.prepare(task.code, task.language)
    checker = None
    try:
        verdict.compile = program.compile
        if program.compile.status == "sandbox_error":
            return _sandbox_failure(verdict, program.compile.detail)
        if not program.ok:
            return verdict
        if task.checker is not None:
            checker = worker.prepare(task.checker, task.checker_language or cfg.default_language)
            if not checker.ok:
                detail = f"the checker does not compile: {checker.compile.stderr[-300:]}"
                return _sandbox_failure(verdict, detail)
        limits = Limits.for_run(sandbox_cfg, task.time_limit_ms)
        verdict.tests, samples_ok = _run_tests(worker, program, checker, task, cfg, limits)
        failures = [r for r in verdict.tests if r.status != "ok"]
        broken = [r for r in failures if r.status == "sandbox_error"]
        if broken:
            return _sandbox_failure(verdict, broken[0].detail)
        verdict.passed = sum(r.status == "ok" for r in verdict.tests if r.kind == "hidden")
        verdict.status = failures[0].status if failures else "ok"
        verdict.reward = tier_reward(cfg, samples_ok, verdict.passed, verdict.total)
        return verdict
    finally:
        worker.drop(program)
        if checker is not None:
            worker.drop(checker)


def _run_tests(
    worker: Worker,
    program: Program,
    checker: Program | None,
    task: CodeTask,
    cfg: CodeRewardSection,
    limits: Limits,
) -> tuple[list[TestResult], bool | None]:
    """The test results, and whether the samples passed (None: no samples)."""
    if task.test_code is not None:
        assert task.entry_point is not None
        test = run_function_test(
            worker, program, task.test_code, task.entry_point, limits, task.test_setup
        )
        return [test], None
    stop = cfg.test_policy == "stop_at_first_failure"

    def run(tests: list[StdioTest], kind: str) -> list[TestResult]:
        return run_stdio_tests(
            worker,
            program,
            tests,
            limits,
            kind=kind,
            float_tolerance=cfg.float_tolerance,
            checker=checker,
            stop_at_first_failure=stop,
        )

    results = run(task.sample_tests, "sample")
    samples_ok = all(r.status == "ok" for r in results) if task.sample_tests else None
    if samples_ok is not False or not stop:
        results += run(task.tests or [], "hidden")
    return results, samples_ok


def _sandbox_failure(verdict: CodeVerdict, detail: str) -> CodeVerdict:
    verdict.reward = None
    verdict.status = "sandbox_error"
    verdict.detail = detail
    return verdict


class CodeReward(ScoredReward):
    """`f(prompts, completions, tests, **columns)`; rows whose `tests` is None score None.

    Owns a `SandboxPool`, started on first use; `close()` stops it.
    """

    def __init__(self, cfg: CodeRewardSection, sandbox_cfg: SandboxSection) -> None:
        self.cfg = cfg
        self.sandbox_cfg = sandbox_cfg
        self._pool: SandboxPool | None = None
        self._lock = threading.Lock()

    @property
    def pool(self) -> SandboxPool:
        with self._lock:
            if self._pool is None:
                self._pool = SandboxPool(self.sandbox_cfg)
            return self._pool

    def score(self, prompts: list[Any], completions: list[Any], **columns: list[Any]) -> Scored:
        n = len(completions)
        tests = column(columns, "tests", n, "code")
        rows = {
            name: optional_column(columns, name, n)
            for name in (
                "entry_point",
                "test_setup",
                "sample_tests",
                "language",
                "time_limit_ms",
                "checker",
                "checker_language",
            )
        }
        tasks: list[CodeTask | None] = []
        for i, completion in enumerate(completions):
            if tests[i] is None:
                tasks.append(None)
                continue
            code, fence_language = extract_code(completion_text(completion))
            language = (
                language_name(rows["language"][i]) or fence_language or self.cfg.default_language
            )
            row = {name: values[i] for name, values in rows.items() if name != "language"}
            tasks.append(make_task(code, language, tests[i], **row))
        verdicts = self.judge([t for t in tasks if t is not None])
        values: list[float | None] = []
        details: list[dict[str, Any]] = []
        it = iter(verdicts)
        for task in tasks:
            if task is None:
                values.append(None)
                details.append({"status": None, "detail": "no tests for this sample"})
            else:
                verdict = next(it)
                values.append(verdict.reward)
                details.append(verdict.to_json())
        return Scored(values, details)

    def submit(self, task: CodeTask) -> Future[CodeVerdict]:
        """Judge one program in the background."""
        cfg, sandbox_cfg = self.cfg, self.sandbox_cfg
        return self.pool.submit(lambda worker: judge_task(worker, task, cfg, sandbox_cfg))

    def judge(self, tasks: list[CodeTask]) -> list[CodeVerdict]:
        """Judge programs in parallel; verdicts in input order."""
        futures = [self.submit(task) for task in tasks]
        return [f.result() for f in futures]

    def close(self) -> None:
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.close()


@REWARDS.register("code", columns=("tests",))
def build_code_reward(reward_cfg: RewardSection, sandbox_cfg: SandboxSection) -> CodeReward:
    check_isolation(sandbox_cfg)  # refuse when the config is built, not mid-training
    return CodeReward(reward_cfg.code, sandbox_cfg)

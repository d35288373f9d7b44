"""The verifier of an episode: the sandbox judges each attempt and the submitted program.

Per attempt (`attempt`): compile, run the sample tests, then every generated test that the
problem's reference solution confirms (`validate`: the reference runs, in the problem's
reference language, on each generated input and a test counts only when its expected output
matches; without a reference solution no generated test counts, and neither does one whose
input is a hidden test's: it would show the hidden answer in the feedback). The attempt's tier
comes from `[reward.code]` (compile_error_reward, compile_reward, sample_reward); a confirmed
generated test that the program fails is what the adversarial term charges the solver for,
and the tests it passed rank it against the episode's other attempts. The submitted program
is then judged on the hidden tests (`final`): the episode's delayed reward, pass_reward (or
its partial credit).

Programs are deterministic, so verdicts are cached by content (the problem's tests, limits and
reference solution, the program, its language, the generated tests): the G episodes of a
problem often write the same program, and only the first is run.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, TypeVar

from ascent.config.rewards import CodeRewardSection, SandboxSection
from ascent.data.code_problems import CodeProblem
from ascent.errors import AscentError
from ascent.rewards.code import CodeVerdict, judge_task, make_task
from ascent.rewards.judge import StdioTest, outputs_match
from ascent.rewards.sandbox import Limits, Program, SandboxPool, Worker

T = TypeVar("T")
CACHE_SIZE = 4096
COMPILE_LOG_CHARS = 600


@dataclass(frozen=True)
class Failure:
    """One failed test, for the feedback a role reads."""

    kind: str  # sample or generated
    status: str
    input: str
    expected: str
    got: str


@dataclass
class AttemptVerdict:
    """What the sandbox said about one solve attempt."""

    compiled: bool
    samples_ok: bool | None  # None: the problem shows no sample tests
    tier: float  # [reward.code] tier of the attempt: compile_error / compile / sample reward
    broken: bool = False  # a confirmed generated test failed
    passed: int = 0  # sample and confirmed generated tests passed (all are run)
    failure: Failure | None = None  # the first failed sample, else the first broken test
    compile_log: str = ""
    sandbox_error: str = ""  # not the program's fault: the attempt is not judged
    # when asked for (`inputs`): the program's output on each (None: it did not run cleanly),
    # or a sandbox failure's detail (str)
    outputs: list[str | None] | str | None = None

    @property
    def accepted(self) -> bool:
        """Compiled, passed the samples and every confirmed generated test: submit it."""
        return self.compiled and self.samples_ok is not False and not self.broken


@dataclass(frozen=True)
class Validation:
    """Generated tests checked against the reference solution."""

    proposed: int
    confirmed: list[StdioTest] = field(default_factory=list)
    hidden_copies: int = 0  # proposed tests whose input is a hidden test's (never counted)


def input_key(text: str) -> tuple[str, ...]:
    """What makes two test inputs the same input (whitespace aside): a generated test whose
    key is a hidden test's is never used, in training or at test time."""
    return tuple(text.split())


def _failures(
    worker: Worker, program: Program, tests: list[StdioTest], limits: Limits, kind: str, tol: float
) -> list[Failure] | str:
    """Every test the program fails, in order, or a sandbox failure's detail (str)."""
    failed = []
    for test in tests:
        run = worker.run(program, test.input, limits)
        if run.status == "sandbox_error":
            return run.detail or "sandbox error"
        if run.status != "ok":
            failed.append(Failure(kind, run.status, test.input, test.output, run.stdout))
        elif not outputs_match(test.output, run.stdout, tol):
            failed.append(Failure(kind, "wrong_answer", test.input, test.output, run.stdout))
    return failed


def judge_attempt(
    worker: Worker,
    problem: CodeProblem,
    code: str,
    language: str,
    generated: list[StdioTest],
    cfg: CodeRewardSection,
    sandbox_cfg: SandboxSection,
    inputs: list[str] | None = None,
) -> AttemptVerdict:
    """Compile, run the samples and, when they pass, every confirmed generated test; the
    failure shown is the first. With `inputs`, the same compiled program's output on each
    (`verdict.outputs`, for test-time RL's majority vote): one compilation serves both."""
    program = worker.prepare(code, language)
    try:
        verdict = _judge_program(worker, program, problem, generated, cfg, sandbox_cfg)
        if inputs is not None:
            verdict.outputs = _program_outputs(worker, program, problem, inputs, sandbox_cfg)
        return verdict
    finally:
        worker.drop(program)


def _judge_program(
    worker: Worker,
    program: Any,
    problem: CodeProblem,
    generated: list[StdioTest],
    cfg: CodeRewardSection,
    sandbox_cfg: SandboxSection,
) -> AttemptVerdict:
    if program.compile.status == "sandbox_error":
        return AttemptVerdict(False, None, 0.0, sandbox_error=program.compile.detail)
    if not program.ok:
        log = (program.compile.stderr or program.compile.detail)[-COMPILE_LOG_CHARS:]
        return AttemptVerdict(False, None, cfg.compile_error_reward, compile_log=log)
    limits = Limits.for_run(sandbox_cfg, problem.time_limit_ms)
    tol = cfg.float_tolerance
    verdict = AttemptVerdict(True, None, cfg.compile_reward)
    samples = list(problem.sample_tests)
    if samples:
        found = _failures(worker, program, samples, limits, "sample", tol)
        if isinstance(found, str):
            verdict.sandbox_error = found
            return verdict
        verdict.samples_ok, verdict.passed = not found, len(samples) - len(found)
        if found:
            verdict.failure = found[0]
            return verdict
        verdict.tier = cfg.sample_reward
    found = _failures(worker, program, generated, limits, "generated", tol)
    if isinstance(found, str):
        verdict.sandbox_error = found
    else:
        verdict.passed += len(generated) - len(found)
        if found:
            verdict.broken, verdict.failure = True, found[0]
    return verdict


def program_outputs(
    worker: Worker,
    problem: CodeProblem,
    code: str,
    language: str,
    inputs: list[str],
    cfg: SandboxSection,
) -> list[str | None] | str:
    """`code`'s output on each input (None where it did not compile or run cleanly), or a
    sandbox failure's detail (str): that is not the program's fault."""
    program = worker.prepare(code, language)
    try:
        return _program_outputs(worker, program, problem, inputs, cfg)
    finally:
        worker.drop(program)


def _program_outputs(
    worker: Worker, program: Any, problem: CodeProblem, inputs: list[str], cfg: SandboxSection
) -> list[str | None] | str:
    if program.compile.status == "sandbox_error":
        return program.compile.detail or "sandbox error"
    if not program.ok:
        return [None] * len(inputs)
    limits = Limits.for_run(cfg, problem.time_limit_ms)
    outputs: list[str | None] = []
    for stdin in inputs:
        run = worker.run(program, stdin, limits)
        if run.status == "sandbox_error":
            return run.detail or "sandbox error"
        outputs.append(run.stdout if run.status == "ok" else None)
    return outputs


def reference_outputs(
    worker: Worker, problem: CodeProblem, language: str, inputs: list[str], cfg: SandboxSection
) -> list[str | None]:
    """The reference solution's output on each input (None where it did not run cleanly)."""
    assert problem.reference_solution is not None
    found = program_outputs(worker, problem, problem.reference_solution, language, inputs, cfg)
    return [None] * len(inputs) if isinstance(found, str) else found


def judge_final(
    worker: Worker,
    problem: CodeProblem,
    code: str,
    language: str,
    cfg: CodeRewardSection,
    sandbox_cfg: SandboxSection,
) -> CodeVerdict:
    """The submitted program on the hidden tests only (its samples were judged per attempt)."""
    columns = problem.reward_columns()
    columns.pop("sample_tests", None)
    tests = columns.pop("tests")
    task = make_task(code, language, tests, **columns)
    return judge_task(worker, task, cfg, sandbox_cfg)


class Verifier:
    """Runs the sandbox work of episodes from an event loop, with a verdict cache."""

    def __init__(self, pool: SandboxPool, cfg: CodeRewardSection, sandbox_cfg: SandboxSection):
        self.pool = pool
        self.cfg = cfg
        self.sandbox_cfg = sandbox_cfg
        # keyed by content: the CodeProblem itself (its tests, limits, reference solution), the
        # program, its language and the generated tests; never by the problem's id alone
        self._cache: OrderedDict[tuple[Any, ...], Future[Any]] = OrderedDict()
        self.runs = 0  # jobs sent to the sandbox (cache misses)
        self.hits = 0

    async def _cached(self, key: tuple[Any, ...], job: Callable[[Worker], T]) -> T:
        future = self._cache.get(key)
        if future is None or (future.done() and future.exception() is not None):
            future = self.pool.submit(job)
            self._cache[key] = future
            self.runs += 1
            if len(self._cache) > CACHE_SIZE:
                self._cache.popitem(last=False)
        else:
            self.hits += 1
            self._cache.move_to_end(key)
        return await asyncio.wrap_future(future)

    async def validate(
        self, problem: CodeProblem, tests: list[StdioTest], reference_language: str | None
    ) -> Validation:
        """Keep the generated tests whose expected output the reference solution (run in
        `reference_language`) produces and whose input is not a hidden test's."""
        if problem.reference_solution is None or problem.is_function or not tests:
            return Validation(len(tests))
        if reference_language is None:
            raise AscentError(
                f"problem {problem.id}: the language of its reference solution is unknown; "
                "give the problem a reference_language column (python or cpp)"
            )
        hidden = {input_key(h.input) for h in problem.hidden_tests}
        fresh = [t for t in tests if input_key(t.input) not in hidden]
        inputs = sorted({t.input for t in fresh})
        cfg = self.sandbox_cfg
        key = ("reference", problem, reference_language, tuple(inputs))
        outputs = await self._cached(
            key, lambda w: reference_outputs(w, problem, reference_language, inputs, cfg)
        )
        by_input = dict(zip(inputs, outputs, strict=True))
        confirmed = [
            t
            for t in fresh
            if by_input[t.input] is not None
            and outputs_match(t.output, by_input[t.input], self.cfg.float_tolerance)
        ]
        return Validation(len(tests), confirmed, len(tests) - len(fresh))

    async def attempt(
        self,
        problem: CodeProblem,
        code: str,
        language: str,
        generated: list[StdioTest],
        inputs: tuple[str, ...] | None = None,
    ) -> AttemptVerdict:
        """The attempt's verdict; with `inputs`, also its output on each (`verdict.outputs`)."""
        if problem.is_function:  # no stdin tests to run per attempt: compiling is the check
            generated = []
        key = ("attempt", problem, code, language, tuple(generated), inputs)
        cfg, sandbox_cfg = self.cfg, self.sandbox_cfg
        listed = None if inputs is None else list(inputs)
        return await self._cached(
            key,
            lambda w: judge_attempt(
                w, problem, code, language, generated, cfg, sandbox_cfg, listed
            ),
        )

    async def final(self, problem: CodeProblem, code: str, language: str) -> CodeVerdict:
        cfg, sandbox_cfg = self.cfg, self.sandbox_cfg
        return await self._cached(
            ("final", problem, code, language),
            lambda w: judge_final(w, problem, code, language, cfg, sandbox_cfg),
        )

    @staticmethod
    def solved(verdict: CodeVerdict) -> bool:
        """Judged (no sandbox failure) and every hidden test passed, of at least one."""
        return verdict.reward is not None and verdict.passed == verdict.total > 0

    def delayed_reward(self, verdict: CodeVerdict) -> float | None:
        """pass_reward when every hidden test passed (with partial_credit: pass_reward x the
        fraction passed); 0 otherwise; None after a sandbox failure."""
        if verdict.reward is None:
            return None
        if not verdict.total:
            return 0.0
        if self.cfg.partial_credit:
            return self.cfg.pass_reward * verdict.passed / verdict.total
        return self.cfg.pass_reward if verdict.passed == verdict.total else 0.0

"""Judging one sample with the real rewards: the sandboxed code judge or the math checker.

A code sample passes when its program passes every test (the code reward's top tier, whatever
`[reward.code]` pays for it); a math sample passes when its final answer is equivalent to the
gold. Judging runs in the sandbox pool's / math checker's threads, so the event loop keeps
requests in flight while earlier samples are judged.
"""

from __future__ import annotations

import asyncio
import re
from dataclasses import dataclass, field
from typing import Any

from ascent.data.code_problems import CodeProblem
from ascent.evaluation.policy import Sample
from ascent.evaluation.problem_set import MathProblem, Problem
from ascent.rewards.code import CodeReward, CodeTask, build_code_reward, extract_code
from ascent.rewards.math import MathReward
from ascent.rules import LLMConfig


@dataclass(frozen=True)
class Judged:
    """The verdict on one sample."""

    passed: bool
    status: str  # code: ok, wrong_answer, compile_error, ...; math: equal, not_equal, ...
    reward: float | None = None  # what the training reward would pay (None: not judged)
    program: str | None = None  # code: the program that ran
    language: str | None = None
    detail: dict[str, Any] = field(default_factory=dict)  # per-test results / math details

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"passed": self.passed, "status": self.status, "reward": self.reward}
        if self.program is not None:
            out |= {"program": self.program, "language": self.language}
        return out | {"judge": self.detail}


REQUEST_FAILED = Judged(False, "request_failed")


class CodeScorer:
    """Runs programs in a `CodeReward`'s sandbox pool (started when the scorer is made)."""

    def __init__(self, cfg: LLMConfig) -> None:
        self.language = cfg.eval.language
        self.reward: CodeReward = build_code_reward(cfg.reward, cfg.sandbox)
        self.reward.pool  # noqa: B018 - start the workers now, not on the event loop

    async def judge(self, problem: Problem, sample: Sample) -> Judged:
        assert isinstance(problem, CodeProblem)
        if sample.text is None:
            return REQUEST_FAILED
        task = code_task(problem, sample.text, self.language)
        verdict = await asyncio.wrap_future(self.reward.submit(task))
        passed = verdict.status == "ok" and verdict.total > 0 and verdict.passed == verdict.total
        return Judged(
            passed, verdict.status, verdict.reward, task.code, task.language, verdict.to_json()
        )

    def close(self) -> None:
        self.reward.close()


class MathScorer:
    """Checks final answers with the math reward (math-verify in helper processes)."""

    def __init__(self, cfg: LLMConfig) -> None:
        self.reward = MathReward(cfg.reward.math)

    async def judge(self, problem: Problem, sample: Sample) -> Judged:
        assert isinstance(problem, MathProblem)
        if sample.text is None:
            return REQUEST_FAILED
        scored = await asyncio.to_thread(
            self.reward.score, [problem.question], [sample.text], answer=[problem.answer]
        )
        detail = scored.details[0]
        return Judged(
            bool(detail["correct"]), str(detail["outcome"]), scored.values[0], None, None, detail
        )

    def close(self) -> None:
        self.reward.close()


Scorer = CodeScorer | MathScorer


def make_scorer(cfg: LLMConfig, kind: str) -> Scorer:
    return MathScorer(cfg) if kind == "math" else CodeScorer(cfg)


def code_task(problem: CodeProblem, completion: str, language: str) -> CodeTask:
    """The program in a completion, with the tests it is judged by.

    The code fence's language wins over `[eval] language`. For a call-a-function problem the
    program is Python: when it does not define the entry point (a completion of the body
    only), the problem's prompt goes in front of it; when it does, the prompt's imports do.
    """
    code, fence_language = extract_code(completion)
    if problem.is_function:
        assert problem.entry_point is not None and problem.test_code is not None
        return CodeTask(
            function_program(problem.statement, code, problem.entry_point),
            "python",
            test_code=problem.test_code,
            entry_point=problem.entry_point,
            test_setup=problem.test_setup,
            time_limit_ms=problem.time_limit_ms,
        )
    return CodeTask(
        code,
        fence_language or language,
        tests=list(problem.hidden_tests),
        sample_tests=list(problem.sample_tests),
        time_limit_ms=problem.time_limit_ms,
        checker=problem.checker,
    )


def function_program(prompt: str, code: str, entry_point: str) -> str:
    """A runnable program for a call-a-function problem from the model's code."""
    if not code.strip():
        return code
    if not re.search(rf"^\s*def\s+{re.escape(entry_point)}\s*\(", code, re.MULTILINE):
        return prompt + code
    imports = [
        line
        for line in prompt.splitlines()
        if line.startswith(("import ", "from ")) and line not in code
    ]
    return "\n".join([*imports, code]) if imports else code

"""What test-time RL may learn from: a problem's attempts, scored on its visible tests only.

The line that keeps the hidden tests out of the updates is drawn here, once. `visible_view`
is the problem as the updates see it: the statement, the sample tests, the reference solution
(it confirms generated tests) and the hidden tests' inputs (a generated test that copies one
is refused, as in episodes), with every hidden expected output blanked and the problem's
answer column emptied. Everything the updates read (the solver's prompt, the generated tests,
the verdicts) is computed from that view; only the answers are judged on the real problem,
by `Verifier.final`, outside this module.

Per problem, once (`AttemptScorer.prepare`):

    the test generator ([agentic.roles] testgen: scripted, or an API role) proposes tests from
    the problem alone; `Verifier.validate` keeps those the reference solution reproduces

Per attempt (`AttemptScorer.score`), the solver's first turn, read by the task's format:

    no program                    [agentic] unparsable_reward
    a program                     its [reward.code] tier (compile error, compiles, passes the
                                  samples), + [agentic] adversarial_penalty when a confirmed
                                  generated test breaks it

which is the immediate reward agentic GRPO gives a solve turn. A problem with neither a sample
test nor a confirmed generated test has nothing to tell a right attempt from a wrong one, so it
gets no update (`VisibleProblem.scorable`).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from ascent.data import Problem
from ascent.data.code_problems import CodeProblem
from ascent.rewards.judge import StdioTest
from ascent.rollout.agentic.formats import CodeFormat
from ascent.rollout.agentic.transcript import Episode
from ascent.rollout.agentic.verify import AttemptVerdict, Verifier

if TYPE_CHECKING:
    from ascent.rollout.agentic.roles import ApiRoles


def visible_view(problem: Problem, code: CodeProblem, reference_language: str | None) -> Problem:
    """The problem with nothing of its hidden tests but their inputs: hidden outputs blanked,
    the answer column emptied, every other column dropped (a data row's raw `tests` too)."""
    hidden = tuple(StdioTest(t.input, "") for t in code.hidden_tests)
    view = replace(code, hidden_tests=hidden, test_code=None)
    columns = {"code_problem": view, "reference_language": reference_language}
    return Problem(key=problem.key, prompt=problem.prompt, answer="", columns=columns)


@dataclass(frozen=True)
class VisibleProblem:
    """One problem as the test-time updates see it."""

    problem: Problem  # the view: answer column empty, columns = the code view
    code: CodeProblem  # hidden outputs blanked
    tests: tuple[StdioTest, ...] = ()  # generated tests the reference solution confirmed
    proposed: int = 0  # generated tests proposed
    note: str = ""  # why there are none, when the test generator failed or was unreadable

    @property
    def scorable(self) -> bool:
        """A right attempt can be told from a wrong one: a sample or confirmed test to run
        (a call-a-function problem has no stdin tests an attempt is run on)."""
        return not self.code.is_function and bool(self.code.sample_tests or self.tests)


@dataclass(frozen=True)
class Scores:
    """The verdicts on one group of attempts."""

    rewards: list[float]
    accepted: list[bool]  # passed every sample and confirmed generated test
    sandbox_error: str = ""  # set: some attempt was not judged, the group is not trained on


class AttemptScorer:
    """Generates a problem's tests once and scores attempts on its visible tests."""

    def __init__(
        self,
        fmt: CodeFormat,
        verifier: Verifier,
        *,
        testgen: str,
        api: ApiRoles | None,
        max_generated_tests: int,
        adversarial_penalty: float,
        unparsable_reward: float,
        default_language: str,
    ) -> None:
        self.fmt = fmt
        self.verifier = verifier
        self.testgen = testgen  # scripted, api or off
        self.api = api
        self.max_tests = max_generated_tests
        self.penalty = adversarial_penalty
        self.unparsable = unparsable_reward
        self.default_language = default_language

    async def prepare(self, problem: Problem, code: CodeProblem) -> VisibleProblem:
        """The view of `problem` (whose code view is `code`) and its confirmed tests."""
        uses_reference = bool(
            self.testgen != "off" and code.reference_solution and not code.is_function
        )
        language = self.fmt.reference_language(problem, code) if uses_reference else None
        view = visible_view(problem, code, language)
        shown = view.columns["code_problem"]
        if not uses_reference:
            return VisibleProblem(view, shown)
        text, note = await self._propose(view, shown)
        tests = self.fmt.parse_tests(text, self.max_tests) if text else None
        if tests is None:
            return VisibleProblem(view, shown, note=note or "no tests could be read")
        validation = await self.verifier.validate(shown, tests, language)
        return VisibleProblem(view, shown, tuple(validation.confirmed), validation.proposed)

    async def _propose(self, view: Problem, code: CodeProblem) -> tuple[str, str]:
        """The test generator's answer from the problem alone (no attempt in its transcript)."""
        if self.testgen == "scripted":
            return self.fmt.scripted("testgen", Episode(view, code, 0)), ""
        assert self.api is not None
        text, _, note = await self.api.generate("testgen", self.fmt.messages("testgen", code, []))
        return text, note

    async def score(self, visible: VisibleProblem, texts: list[str]) -> Scores:
        """Each attempt's reward; attempts are judged concurrently (equal programs once)."""
        verdicts = await asyncio.gather(*(self._judge(visible, text) for text in texts))
        error = next((v.sandbox_error for v in verdicts if v and v.sandbox_error), "")
        rewards, accepted = [], []
        for verdict in verdicts:
            if verdict is None:  # no program
                rewards.append(self.unparsable)
                accepted.append(False)
                continue
            rewards.append(verdict.tier + (self.penalty if verdict.broken else 0.0))
            accepted.append(verdict.accepted)
        return Scores(rewards, accepted, error)

    async def _judge(self, visible: VisibleProblem, text: str) -> AttemptVerdict | None:
        """The attempt's verdict on the visible tests; None when it holds no program."""
        parsed = self.fmt.parse_solution(text)
        if parsed is None:
            return None
        language = parsed[1] or self.default_language
        tests = list(visible.tests)
        return await self.verifier.attempt(visible.code, parsed[0], language, tests)

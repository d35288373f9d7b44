"""What test-time RL may learn from: a problem's attempts, scored on its visible tests only.

The line that keeps the hidden tests out of the updates is drawn here, once. `visible_view`
is the problem as the updates see it: the statement, the sample tests, the hidden tests' inputs
(a generated test that copies one is refused, as in episodes) and, with labels = "oracle",
the reference solution (it confirms generated tests); every hidden expected output is blanked
and the problem's answer column emptied. Everything the updates read (the solver's prompt, the
generated tests, the verdicts) is computed from that view; only the answers are judged on the
real problem, by `Verifier.final`, outside this module.

Per problem, once (`AttemptScorer.prepare`):

    the test generator ([agentic.roles] testgen: scripted, or an API role) proposes tests from
    the problem alone; labels = "vote" (the default: what a contestant has): only their inputs
    are kept (with the sample inputs, or the empty input when there are none), and the
    reference solution is not in the view; labels = "oracle": `Verifier.validate` keeps those
    the reference solution reproduces (an upper bound: a contestant has no such checker)

Per group of attempts (`AttemptScorer.score`), the solver's first turn, read by the task's
format:

    no program                    [agentic] unparsable_reward
    a program                     its [reward.code] tier (compile error, compiles, passes the
                                  samples), + [agentic] adversarial_penalty when it is broken:
                                  vote: its output on some input differs from the group's
                                  majority output there (`majority`: at least 2 attempts
                                  and vote_min_share of those that ran, no tie);
                                  oracle: a confirmed generated test fails

which is the immediate reward agentic GRPO gives a solve turn. With labels = "oracle" a
problem with neither a sample test nor a confirmed generated test has nothing to tell a right
attempt from a wrong one, so it gets no update (`VisibleProblem.scorable`). Majority voting is
test-time RL without any checker (as in Zuo et al., "TTRL", 2025): the group's most common
output stands in for the answer, so it can only sharpen what the policy already samples most.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from ascent.data import Problem
from ascent.data.code_problems import CodeProblem
from ascent.rewards.judge import StdioTest
from ascent.rollout.agentic.formats import CodeFormat
from ascent.rollout.agentic.transcript import Episode
from ascent.rollout.agentic.verify import AttemptVerdict, Verifier, input_key

if TYPE_CHECKING:
    from ascent.rollout.agentic.roles import ApiRoles


def visible_view(
    problem: Problem, code: CodeProblem, reference_language: str | None, *, reference: bool = True
) -> Problem:
    """The problem with nothing of its hidden tests but their inputs: hidden outputs blanked,
    the answer column emptied, every other column dropped (a data row's raw `tests` too), and
    without `reference` the reference solution too."""
    hidden = tuple(StdioTest(t.input, "") for t in code.hidden_tests)
    view = replace(code, hidden_tests=hidden, test_code=None)
    if not reference:
        view = replace(view, reference_solution=None)
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
    vote_inputs: tuple[str, ...] = ()  # labels = "vote": the inputs attempts are compared on

    @property
    def scorable(self) -> bool:
        """A right attempt can be told from a wrong one: a sample or confirmed test to run,
        or inputs to vote on (a call-a-function problem has no stdin tests an attempt is run
        on)."""
        return not self.code.is_function and bool(
            self.code.sample_tests or self.tests or self.vote_inputs
        )


def _spaced(text: str) -> str:
    """An output as votes compare it: whitespace runs as one space, none at the ends."""
    return " ".join(text.split())


def majority(outputs: list[list[str | None] | None], min_share: float = 0.0) -> list[str | None]:
    """Per input, the output most attempts gave (whitespace-normalised), when at least 2 gave
    it, at least `min_share` of the attempts that ran there, and no other output was as
    common; None where there is no such output. An entry of `outputs` is one attempt's
    outputs, or None for an attempt with no program."""
    ran = [o for o in outputs if o is not None]
    if not ran:
        return []
    labels: list[str | None] = []
    for k in range(len(ran[0])):
        given = [_spaced(o[k]) for o in ran if o[k] is not None]
        top = Counter(given).most_common(2)
        clear = (
            top
            and top[0][1] >= 2
            and top[0][1] >= min_share * len(given)
            and (len(top) == 1 or top[1][1] < top[0][1])
        )
        labels.append(top[0][0] if clear else None)
    return labels


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
        labels: str = "vote",
        vote_min_share: float = 0.0,
    ) -> None:
        self.fmt = fmt
        self.labels = labels  # vote or oracle
        self.vote_min_share = vote_min_share
        self.verifier = verifier
        self.testgen = testgen  # scripted, api or off
        self.api = api
        self.max_tests = max_generated_tests
        self.penalty = adversarial_penalty
        self.unparsable = unparsable_reward
        self.default_language = default_language

    async def prepare(self, problem: Problem, code: CodeProblem) -> VisibleProblem:
        """The view of `problem` (whose code view is `code`) and its confirmed tests (or the
        inputs attempts are compared on)."""
        if self.labels == "vote":
            return await self._prepare_vote(problem, code)
        uses_reference = bool(
            self.testgen != "off" and code.reference_solution and not code.is_function
        )
        language = self.fmt.reference_language(problem, code) if uses_reference else None
        view = visible_view(problem, code, language)
        shown = view.columns["code_problem"]
        if not uses_reference:
            idle = self.testgen != "off" and not code.is_function
            note = "no reference solution to confirm generated tests" if idle else ""
            return VisibleProblem(view, shown, note=note)
        text, note = await self._propose(view, shown)
        tests = self.fmt.parse_tests(text, self.max_tests) if text else None
        if tests is None:
            return VisibleProblem(view, shown, note=note or "no tests could be read")
        validation = await self.verifier.validate(shown, tests, language)
        return VisibleProblem(view, shown, tuple(validation.confirmed), validation.proposed)

    async def _prepare_vote(self, problem: Problem, code: CodeProblem) -> VisibleProblem:
        """No reference solution in the view; the sample inputs, then the generated tests'
        inputs (their expected outputs are never read), else the empty input."""
        view = visible_view(problem, code, None, reference=False)
        shown = view.columns["code_problem"]
        if shown.is_function:
            return VisibleProblem(view, shown)
        inputs = [t.input for t in shown.sample_tests]
        proposed, note = 0, ""
        if self.testgen != "off":
            text, note = await self._propose(view, shown)
            tests = self.fmt.parse_tests(text, self.max_tests) if text else None
            proposed = len(tests or [])
            hidden = {input_key(t.input) for t in shown.hidden_tests}
            for test in tests or []:
                if input_key(test.input) not in hidden and test.input not in inputs:
                    inputs.append(test.input)
            if tests is None:
                note = note or "no tests could be read"
        inputs = inputs or [""]
        return VisibleProblem(view, shown, (), proposed, note, tuple(inputs))

    async def _propose(self, view: Problem, code: CodeProblem) -> tuple[str, str]:
        """The test generator's answer from the problem alone (no attempt in its transcript)."""
        if self.testgen == "scripted":
            return self.fmt.scripted("testgen", Episode(view, code, 0)), ""
        assert self.api is not None
        text, _, note = await self.api.generate("testgen", self.fmt.messages("testgen", code, []))
        return text, note

    async def score(self, visible: VisibleProblem, texts: list[str]) -> Scores:
        """Each attempt's reward; attempts are judged concurrently (equal programs once)."""
        vote = self.labels == "vote" and bool(visible.vote_inputs)
        verdicts = await asyncio.gather(*(self._judge(visible, text, vote) for text in texts))
        error = next((v.sandbox_error for v in verdicts if v and v.sandbox_error), "")
        broken = [bool(v and v.broken) for v in verdicts]
        if vote:
            outputs = [v.outputs if v is not None else None for v in verdicts]
            error = error or next((o for o in outputs if isinstance(o, str)), "")
            if not error:
                runs = [o if not isinstance(o, str) else None for o in outputs]
                labels = majority(runs, self.vote_min_share)
                broken = [
                    o is not None
                    and any(
                        want is not None and (got is None or _spaced(got) != want)
                        for want, got in zip(labels, o, strict=True)
                    )
                    for o in runs
                ]
        rewards, accepted = [], []
        for verdict, bad in zip(verdicts, broken, strict=True):
            if verdict is None:  # no program
                rewards.append(self.unparsable)
                accepted.append(False)
                continue
            # as in episodes: only a program that compiled and passed the samples is broken
            sound = verdict.compiled and verdict.samples_ok is not False
            bad = bad and sound
            rewards.append(verdict.tier + (self.penalty if bad else 0.0))
            accepted.append(sound and not bad)
        return Scores(rewards, accepted, error)

    async def _judge(self, visible: VisibleProblem, text: str, vote: bool) -> AttemptVerdict | None:
        """The attempt's verdict on the visible tests, with (`vote`) its outputs on the vote
        inputs from the same compiled program; None when it holds no program."""
        parsed = self.fmt.parse_solution(text)
        if parsed is None:
            return None
        language = parsed[1] or self.default_language
        tests = list(visible.tests)
        inputs = visible.vote_inputs if vote else None
        return await self.verifier.attempt(visible.code, parsed[0], language, tests, inputs)

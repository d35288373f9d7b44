"""The built-in arithmetic task as a code problem, for the tiny model on a CPU.

`07+45=` becomes a problem whose program is a Python expression: the solver writes `52` (or
`7+45`), and the sandbox runs `print(52)` against the hidden test (no input, expected output
`52`). An expression that is not valid Python (`052`, `5 2`) does not compile. The reference
solution is `print(7+45)`. Everything is written in the tiny model's alphabet (no code fences
or JSON), and the solver's first context is exactly the task's prompt, so the shipped
warm-start `ascent:tiny-arithmetic` starts from what it knows and the held-out evaluation
(one greedy answer per prompt) measures the same skill.

Scripted roles (deterministic, honest stand-ins for models):
- hypothesis: whether the ones digits carry (`carry` / `no carry`; other operators: the ones
  digit of the result): a structural fact about the problem, not its answer;
- testgen: adversarial tests around the latest answer y: expected outputs y-10, y-1, y+1,
  y+10 (a carry slip and an off-by-one). The reference solution confirms at most one of them,
  the true answer, and that test breaks the program: the solver pays adversarial_penalty and
  the feedback shows the counter-example, as a real test generator's would;
- summarizer: the answers tried since the last summary and the latest verdict (or summary);
- solver: the reference expression (an oracle, for testing the other roles).
"""

from __future__ import annotations

import re

from ascent.data import Problem
from ascent.data.code_problems import CodeProblem
from ascent.errors import AscentError
from ascent.rewards.judge import StdioTest
from ascent.rollout.agentic.formats import CodeFormat
from ascent.rollout.agentic.transcript import Episode, Event
from ascent.rollout.agentic.verify import AttemptVerdict

_KEY = re.compile(r"^(\d+)([+\-*])(\d+)$")
_INT = re.compile(r"-?\d+")
_CUES = {"hypothesis": "\nhint ", "testgen": "\ntests ", "summarizer": "\ntried "}
_PREFIX = {"hypothesis": "\nhint ", "tests": "\ntests ", "summary": "\ntried ", "feedback": "\n"}
PROBES = (-10, -1, 1, 10)


def _operands(problem: Problem) -> tuple[int, str, int]:
    match = _KEY.match(problem.key)
    if match is None:
        raise AscentError(f"problem {problem.key!r} is not an arithmetic problem (a+b)")
    return int(match.group(1)), match.group(2), int(match.group(3))


class ArithmeticFormat(CodeFormat):
    name = "arithmetic"

    def code_problem(self, problem: Problem) -> CodeProblem:
        a, op, b = _operands(problem)
        return CodeProblem(
            id=problem.key,
            statement=problem.prompt,
            hidden_tests=(StdioTest("", problem.answer),),
            reference_solution=f"print({a}{op}{b})",
        )

    def header(self, role: str, code: CodeProblem) -> str:
        return code.statement

    def visible(self, role: str, event: Event) -> bool:
        """The solver reads verdicts, not the raw test candidates (the feedback carries the
        confirmed one); the other roles read everything."""
        return not (role == "solver" and event.kind == "tests")

    def render(self, event: Event, code: CodeProblem) -> str:
        if event.kind == "solution":
            return f"\n{code.statement}{event.text}"
        return f"{_PREFIX[event.kind]}{event.text}"

    def cue(self, role: str, code: CodeProblem, after_header: bool) -> str:
        if role == "solver":
            return "" if after_header else f"\n{code.statement}"
        return _CUES[role]

    def parse_solution(self, text: str) -> tuple[str, str | None] | None:
        line = text.strip().split("\n", 1)[0].strip() if text.strip() else ""
        return (f"print({line})\n", "python") if line else None

    def parse_tests(self, text: str, limit: int) -> list[StdioTest] | None:
        values = _INT.findall(text)
        return [StdioTest("", v) for v in values[:limit]] or None

    def feedback(self, verdict: AttemptVerdict | None) -> str:
        if verdict is None:
            return "empty"
        if not verdict.compiled:
            return "bad"
        if verdict.failure is not None:
            return f"fails {verdict.failure.expected.strip()}"
        return "ok"

    def scripted(self, role: str, episode: Episode) -> str:
        a, op, b = _operands(episode.problem)
        if role == "hypothesis":
            if op == "+":
                return "carry" if a % 10 + b % 10 >= 10 else "no carry"
            return f"ones {int(episode.problem.answer) % 10}"
        if role == "solver":
            return f"{a}{op}{b}"
        tried = [e.text.strip() or "empty" for e in episode.events if e.kind == "solution"]
        if role == "summarizer":
            verdicts = [e.text for e in episode.events if e.kind in ("feedback", "summary")]
            return " ".join(tried + verdicts[-1:])
        latest = tried[-1] if tried else ""
        if not re.fullmatch(r"-?\d+", latest):
            return ""
        return " ".join(str(int(latest) + d) for d in PROBES)

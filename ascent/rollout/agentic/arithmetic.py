"""The built-in arithmetic task as a code problem, for the tiny model on a CPU.

`07+45=` becomes a problem whose program is an integer: the solver writes `52` (an answer must
match `-?\\d+`; an expression such as `7+45` cannot be read and is an unparsable turn), and the
sandbox runs it as a small program that answers queries on standard input:

    (no input)  the answer itself: the hidden test (expected output `52`)
    len         the length of the answer as written (`2`; `-8` has length 2)
    d<k>        digit k of its absolute value, from the ones (`d0` -> 2, `d1` -> 5, `d2` -> 0)

The reference solution is the same program around `7+45`, run as Python. Everything is
written in the tiny model's alphabet (no code fences or JSON), and the solver's first context
is exactly the task's prompt, so the shipped warm-start `ascent:tiny-arithmetic` starts from
what it knows and the held-out evaluation (one greedy answer per prompt) measures the same
skill.

Scripted roles (deterministic, honest stand-ins for models):
- hypothesis: whether the ones digits carry (`carry` / `no carry`; other operators: the ones
  digit of the result): a structural fact about the problem, not its answer;
- testgen: a column-by-column check of the result, as one checks a sum by hand: its length
  and each of its digits (`len=2 d0=2 d1=5`), never the whole answer (the hidden test's
  input is the empty one; a generated test with it would not count). Together they break
  every wrong answer, near or far, so the adversarial penalty ranks all wrong answers alike
  instead of rewarding a guess far enough off to slip between probes. With 2-digit operands
  the check is at most 5 tests (the default max_generated_tests);
- summarizer: the answers tried since the last summary and the latest verdict (or summary);
- solver: the reference answer (an oracle, for testing the other roles).

The scripted roles work the result out from the problem's statement (its operands), as a
contestant with a brute-force checker would; none reads the problem's answer column, which is
what the hidden test holds (test-time RL relies on that: `ascent.evaluation.test_time_scoring`).
Feedback says whether the attempt passed (`ok`, `fails`, `empty`), never an expected value,
so no role's output carries the answer to the solver.
"""

from __future__ import annotations

import re

from ascent.data import Problem
from ascent.data.arithmetic import evaluate
from ascent.data.code_problems import CodeProblem
from ascent.errors import AscentError
from ascent.rewards.judge import StdioTest
from ascent.rollout.agentic.formats import CodeFormat
from ascent.rollout.agentic.transcript import Episode, Event
from ascent.rollout.agentic.verify import AttemptVerdict

_KEY = re.compile(r"^(\d+)([+\-*])(\d+)$")
_ANSWER = re.compile(r"-?\d+")
_TEST = re.compile(r"\b(len|d\d)=(\d+)\b")
_CUES = {"hypothesis": "\nhint ", "testgen": "\ntests ", "summarizer": "\ntried "}
_PREFIX = {"hypothesis": "\nhint ", "tests": "\ntests ", "summary": "\ntried ", "feedback": "\n"}
PROGRAM = (
    "import sys\n"
    "q = sys.stdin.read().strip()\n"
    "y = {answer}\n"
    "print(y if not q else len(str(y)) if q == 'len' else abs(y) // 10 ** int(q[1:]) % 10)\n"
)


def _operands(problem: Problem) -> tuple[int, str, int]:
    match = _KEY.match(problem.key)
    if match is None:
        raise AscentError(f"problem {problem.key!r} is not an arithmetic problem (a+b)")
    return int(match.group(1)), match.group(2), int(match.group(3))


def column_check(answer: int) -> str:
    """The scripted test generator's tests for a result: its length and every digit."""
    digits = str(abs(answer))[::-1]
    return " ".join([f"len={len(str(answer))}", *(f"d{k}={d}" for k, d in enumerate(digits))])


class ArithmeticFormat(CodeFormat):
    name = "arithmetic"

    def code_problem(self, problem: Problem) -> CodeProblem:
        a, op, b = _operands(problem)
        return CodeProblem(
            id=problem.key,
            statement=problem.prompt,
            hidden_tests=(StdioTest("", problem.answer),),
            reference_solution=PROGRAM.format(answer=f"{a}{op}{b}"),
        )

    def reference_language(self, problem: Problem, code: CodeProblem) -> str:
        return "python"

    def header(self, role: str, code: CodeProblem) -> str:
        return code.statement

    def visible(self, role: str, event: Event) -> bool:
        """The solver reads verdicts, not the generated tests; the other roles read
        everything."""
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
        """The answer's program when the first line is an integer (`-?\\d+`), else None."""
        line = text.strip().split("\n", 1)[0].strip() if text.strip() else ""
        if not _ANSWER.fullmatch(line):
            return None
        return PROGRAM.format(answer=int(line)), "python"

    def parse_tests(self, text: str, limit: int) -> list[StdioTest] | None:
        tests = [StdioTest(query, value) for query, value in _TEST.findall(text)]
        return tests[:limit] or None

    def feedback(self, verdict: AttemptVerdict | None) -> str:
        if verdict is None:
            return "empty"
        if not verdict.compiled:
            return "bad"
        return "fails" if verdict.failure is not None else "ok"

    def scripted(self, role: str, episode: Episode) -> str:
        a, op, b = _operands(episode.problem)
        answer = evaluate(a, op, b)  # from the statement, never the answer column
        if role == "hypothesis":
            if op == "+":
                return "carry" if a % 10 + b % 10 >= 10 else "no carry"
            return f"ones {answer % 10}"
        if role == "solver":
            return str(answer)
        if role == "summarizer":
            tried = [e.text.strip() or "empty" for e in episode.events if e.kind == "solution"]
            verdicts = [e.text for e in episode.events if e.kind in ("feedback", "summary")]
            return " ".join(tried + verdicts[-1:])
        return column_check(answer)

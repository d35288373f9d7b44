"""How an episode reads and writes for one kind of problem: prompts, parsing, feedback, scripts.

`FORMATS` maps a `[data] task` to its format:

- `code`: competitive-programming problems (statement, sample and hidden tests, optional
  reference solution). Roles get written instructions; the solver must answer with a fenced
  code block, the test generator with a JSON list of {"input", "output"} tests.
- `arithmetic`: the built-in arithmetic task seen as code, small enough for the built-in tiny
  model on a CPU (`arithmetic.py`).

A format also plays the scripted roles: deterministic stand-ins for a model, so that a role
can be taken out of the learning problem (or a CPU demo can run without an API) honestly.
"""

from __future__ import annotations

import json
import re
from typing import Any

from ascent.data import Problem
from ascent.data.code_problems import NORMALISERS, CodeProblem, RowError
from ascent.errors import AscentError
from ascent.rewards.code import extract_code, language_name
from ascent.rewards.judge import StdioTest, parse_stdio_tests
from ascent.rollout.agentic.transcript import ROLE_OUTPUT, Episode, Event
from ascent.rollout.agentic.verify import AttemptVerdict

FEEDBACK_CHARS = 400  # of each input / output shown in feedback
_JSON_FENCE = re.compile(r"```(?:json)?[ \t]*\n(.*?)```", re.DOTALL)

INSTRUCTIONS = {
    "hypothesis": "You propose the approach for a competitive-programming problem. From the "
    "problem and the attempts so far, state the key structural observation and the algorithm "
    "it suggests, in a few sentences. Do not write code.",
    "solver": "You solve a competitive-programming problem. Write one complete program that "
    "reads standard input and writes standard output, in one fenced code block "
    "(```python ... ```).",
    "testgen": "You write tests that break wrong programs for a competitive-programming "
    "problem. Include boundary cases (the smallest and largest values the constraints allow, "
    "empty or single-element inputs, equal elements, overflow limits) and stress cases "
    "(inputs at the maximal size, which expose programs that are too slow). Answer with a "
    'JSON list of {"input": "...", "output": "..."} objects in one ```json block; only tests '
    "whose output the reference solution reproduces count.",
    "summarizer": "You compress the transcript of a competitive-programming attempt: keep the "
    "key observations, what was tried and why it failed, in a few short paragraphs.",
}
ASK = {
    "hypothesis": "State your hypothesis.",
    "solver": "Write the program.",
    "testgen": "Write the tests.",
    "summarizer": "Summarize the transcript so far.",
}


def _clip(text: str) -> str:
    return text if len(text) <= FEEDBACK_CHARS else text[:FEEDBACK_CHARS] + "..."


class CodeFormat:
    """Competitive-programming problems in ascent's code schema."""

    name = "code"

    def code_problem(self, problem: Problem) -> CodeProblem:
        """The problem's code view, from its columns: ascent's code schema (`tests` or
        `hidden_tests`, `sample_tests`, `reference_solution`, ...), HumanEval (`entry_point`,
        `test`) or code_contests (`test`) rows, the prompt being the statement; or a ready
        `CodeProblem` in a `code_problem` column."""
        columns = problem.columns
        if isinstance(columns.get("code_problem"), CodeProblem):
            return columns["code_problem"]
        if {"entry_point", "test"} <= columns.keys():
            row, fmt = {"prompt": problem.prompt, "task_id": problem.key, **columns}, "humaneval"
        elif "test" in columns:
            row, fmt = {"content": problem.prompt, "id": problem.key, **columns}, "code_contests"
        else:
            row, fmt = {"id": problem.key, "statement": problem.prompt, **columns}, "code"
        try:
            return NORMALISERS[fmt](row, problem.key)
        except RowError as err:
            raise AscentError(f"problem {problem.key}: not a code problem ({err})") from None

    def reference_language(self, problem: Problem, code: CodeProblem) -> str:
        """The language the reference solution runs in: the problem's `reference_language`
        column (python or cpp); refused when there is none (running it in the solver's
        default language would confirm tests with a program that may not even compile)."""
        name = problem.columns.get("reference_language")
        if not name:
            raise AscentError(
                f"problem {code.id}: the language of its reference solution is unknown; add a "
                "reference_language column (python or cpp) and list it in [data] columns extra"
            )
        language = language_name(str(name), f"problem {code.id}: reference_language")
        assert language is not None
        return language

    # -- what roles read ---------------------------------------------------------------------

    def problem_text(self, code: CodeProblem) -> str:
        """The problem as every role reads it: its statement and sample tests."""
        samples = "".join(
            f"\n\nSample input:\n{t.input}\nSample output:\n{t.output}" for t in code.sample_tests
        )
        return f"## Problem\n{code.statement}{samples}"

    def header(self, role: str, code: CodeProblem) -> str:
        return f"{INSTRUCTIONS[role]}\n\n{self.problem_text(code)}"

    def visible(self, role: str, event: Event) -> bool:
        """Whether `role` reads `event` (here: every role reads the whole transcript)."""
        return True

    def render(self, event: Event, code: CodeProblem) -> str:
        return f"\n\n## {event.kind.capitalize()} (attempt {event.turn + 1})\n{event.text}"

    def cue(self, role: str, code: CodeProblem, after_header: bool) -> str:
        return f"\n\n## {ROLE_OUTPUT[role].capitalize()}\n"

    def messages(self, role: str, code: CodeProblem, events: list[Event]) -> list[dict[str, Any]]:
        """A chat for the role (API roles, chat-template policies): its instructions, then
        the problem and the transcript."""
        return [
            {"role": "system", "content": INSTRUCTIONS[role]},
            {"role": "user", "content": self.problem_text(code) + self.update(role, code, events)},
        ]

    def update(self, role: str, code: CodeProblem, events: list[Event]) -> str:
        """What the role is told in a new chat message: the new events and the request."""
        transcript = "".join(self.render(e, code) for e in events if self.visible(role, e))
        return f"{transcript}\n\n{ASK[role]}"

    # -- what roles write --------------------------------------------------------------------

    def parse_solution(self, text: str) -> tuple[str, str | None] | None:
        """(code, language named by the fence); None when there is no fenced code block."""
        if "```" not in text:
            return None
        code, language = extract_code(text)
        return (code, language) if code.strip() else None

    def parse_tests(self, text: str, limit: int) -> list[StdioTest] | None:
        """The tests of a JSON list (fenced or bare); None when there is none to read."""
        fenced = _JSON_FENCE.findall(text)
        body = fenced[-1] if fenced else text[text.find("[") : text.rfind("]") + 1]
        try:
            tests = parse_stdio_tests(json.loads(body))
        except (json.JSONDecodeError, AscentError):
            return None
        return tests[:limit] if tests else None

    def feedback(self, verdict: AttemptVerdict | None) -> str:
        if verdict is None:
            return "No program found: write it in one fenced code block."
        if not verdict.compiled:
            return f"Compilation failed:\n{_clip(verdict.compile_log)}"
        f = verdict.failure
        if f is not None:
            which = "A sample test" if f.kind == "sample" else "A confirmed generated test"
            return (
                f"{which} failed ({f.status}).\nInput:\n{_clip(f.input)}\n"
                f"Expected:\n{_clip(f.expected)}\nGot:\n{_clip(f.got)}"
            )
        return "Passed the sample tests and every confirmed generated test."

    # -- scripted roles ------------------------------------------------------------------------

    def scripted(self, role: str, episode: Episode) -> str:
        """Deterministic stand-ins: a fixed method, the reference solution (an oracle), the
        sample tests as generated tests, and a summary that keeps the latest attempt."""
        code = episode.code
        if role == "hypothesis":
            return (
                "Restate the constraints, find the structure the answer depends on, and pick "
                "an algorithm whose complexity fits the limits."
            )
        if role == "solver":
            ref = code.reference_solution
            if not ref:
                return "no reference solution to play the solver"
            return f"```{episode.reference_language}\n{ref}```"
        if role == "testgen":
            tests = [{"input": t.input, "output": t.output} for t in code.sample_tests]
            return f"```json\n{json.dumps(tests)}\n```"
        last = {e.kind: e.text for e in episode.events}
        kept = [f"{k}:\n{last[k]}" for k in ("hypothesis", "solution", "feedback") if k in last]
        return f"After {episode.attempts} attempt(s). Latest " + "\n".join(kept)

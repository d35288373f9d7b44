"""Turning a completion into the program that is judged, and judging it for real."""

from __future__ import annotations

import asyncio

import pytest

from ascent.config.evaluation import EvalSection
from ascent.data.code_problems import CodeProblem, load_code_problems
from ascent.evaluation.policy import Sample
from ascent.evaluation.problem_set import MathProblem, render_prompt
from ascent.evaluation.scoring import CodeScorer, code_task, function_program
from ascent.rewards.judge import StdioTest
from ascent.rules import LLMConfig
from tests.evaluation.conftest import data_file

PROMPT = 'from typing import List\n\n\ndef total(xs: List[int]) -> int:\n    """Sum."""\n'
ADD = CodeProblem(
    "add",
    "Read two integers and print their sum.",
    hidden_tests=(StdioTest("1 2\n", "3\n"), StdioTest("5 7\n", "12\n")),
    sample_tests=(StdioTest("1 2\n", "3\n"),),
)


def test_a_body_only_completion_is_completed_from_the_prompt():
    assert (
        function_program(PROMPT, "    return sum(xs)\n", "total") == PROMPT + "    return sum(xs)\n"
    )


def test_a_whole_function_gets_the_prompts_imports_it_lacks():
    code = "def total(xs: List[int]) -> int:\n    return sum(xs)\n"
    assert function_program(PROMPT, code, "total") == "from typing import List\n" + code
    assert (
        function_program(PROMPT, "from typing import List\n" + code, "total").count("import") == 1
    )
    assert function_program(PROMPT, "", "total") == ""  # no code stays no code


def test_the_code_fence_language_wins_over_the_configured_one():
    task = code_task(ADD, "```cpp\nint main(){}\n```", "python")
    assert task.language == "cpp" and task.tests == list(ADD.hidden_tests)
    assert code_task(ADD, "print(1)", "cpp").language == "cpp"  # no fence: [eval] language
    assert task.sample_tests == [StdioTest("1 2\n", "3\n")]


def test_prompts_use_the_template_and_cut_long_statements():
    cfg = EvalSection(prompt_template="[{language}] {problem} \\boxed{}", max_problem_chars=9)
    prompt = render_prompt(ADD, cfg)
    assert prompt.text == "[Python 3] Read two  \\boxed{}" and prompt.truncated
    builtin = render_prompt(ADD, EvalSection(language="cpp")).text
    assert builtin.startswith("Solve the following competitive programming problem in C++17")
    assert "```cpp" in builtin and builtin.endswith(ADD.statement)
    math = render_prompt(MathProblem("q", "What is 2+2?", "4"), EvalSection()).text
    assert math.startswith("What is 2+2?") and math.endswith("within \\boxed{}.")


def judge_all(scorer: CodeScorer, problem: CodeProblem, texts: list[str]):
    async def run():
        return await asyncio.gather(*(scorer.judge(problem, Sample(t)) for t in texts))

    return asyncio.run(run())


@pytest.fixture
def scorer(sandbox):
    cfg = LLMConfig.model_validate({"sandbox": {"workers": 2, "time_limit_ms": 1000}})
    s = CodeScorer(cfg)
    yield s
    s.close()


def test_humaneval_references_pass_and_broken_variants_fail(scorer):
    problems = load_code_problems(data_file("humaneval.jsonl.gz"), limit=8)
    for problem in problems:
        body = problem.reference_solution[len(problem.statement) :]
        whole, body_only, broken = judge_all(
            scorer,
            problem,
            [
                f"```python\n{problem.reference_solution}```",
                body,
                f"```python\n{problem.statement}    return None\n```",
            ],
        )
        assert whole.passed and whole.status == "ok", (problem.id, whole.detail)
        assert body_only.passed, problem.id
        assert not broken.passed and broken.status in ("wrong_answer", "runtime_error")


def test_stdio_programs_in_both_languages_and_failed_requests(scorer):
    cpp = (
        "```cpp\n#include <cstdio>\n"
        'int main(){long a,b;scanf("%ld %ld",&a,&b);printf("%ld\\n",a+b);}\n```'
    )
    right, wrong, broken, cpp_ok = judge_all(
        scorer, ADD, ["print(sum(map(int, input().split())))", "print(3)", "print(", cpp]
    )
    assert right.passed and right.reward == 1.0 and right.language == "python"
    assert not wrong.passed and wrong.status == "wrong_answer" and wrong.reward == 0.3
    assert broken.status == "compile_error" and broken.reward == 0.0
    assert cpp_ok.passed and cpp_ok.language == "cpp"
    (failed,) = judge_all(scorer, ADD, [None])
    assert failed.status == "request_failed" and not failed.passed

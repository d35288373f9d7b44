"""The tiered code reward on hand-made programs and on the real HumanEval and contest data."""

from __future__ import annotations

import json
import random
from collections.abc import Iterator

import pytest

from ascent.config.rewards import CodeRewardSection
from ascent.errors import AscentError
from ascent.rewards.code import CodeReward
from tests.rewards.conftest import FAST, isolation_or_skip, read_jsonl

pytestmark = pytest.mark.timeout(120)

ADD_TESTS = [
    {"input": "1 2\n", "output": "3\n"},
    {"input": "10 -4\n", "output": "6\n"},
    {"input": "7 7\n", "output": "14\n"},
    {"input": "1000000000000 1\n", "output": "1000000000001\n"},
]
ADD_SAMPLES = [{"input": "2 2\n", "output": "4\n"}]
RIGHT = "a, b = map(int, input().split())\nprint(a + b)\n"
# Right on the samples and small numbers, wrong from 7 + 7 on.
SAMPLES_ONLY = "a, b = map(int, input().split())\nprint(a + b if a + b < 10 else 0)\n"
WRONG = "a, b = map(int, input().split())\nprint(a - b)\n"


def fenced(code: str, language: str = "python") -> str:
    return f"Here is my solution.\n```{language}\n{code}```\n"


@pytest.fixture(scope="module")
def reward() -> Iterator[CodeReward]:
    isolation_or_skip(FAST)
    r = CodeReward(CodeRewardSection(), FAST)
    yield r
    r.close()


def score(reward: CodeReward, completions: list[str], rows: dict | None = None, **same):
    """Score completions; `same` columns repeat one value for every row, `rows` give lists."""
    n = len(completions)
    columns = {name: [value] * n for name, value in same.items()}
    columns.update(rows or {})
    return reward.score([""] * n, completions, **columns)


def test_tiers_compile_error_compiles_samples_all(reward):
    completions = [
        fenced("def broken(:\n"),  # does not compile: 0
        fenced(WRONG),  # compiles, fails the sample: 0.1
        fenced(SAMPLES_ONLY),  # passes the sample, fails hidden tests: 0.3
        fenced(RIGHT),  # passes everything: 1.0
    ]
    scored = score(reward, completions, tests=ADD_TESTS, sample_tests=ADD_SAMPLES)
    assert scored.values == [0.0, 0.1, 0.3, 1.0]
    statuses = [d["status"] for d in scored.details]
    assert statuses == ["compile_error", "wrong_answer", "wrong_answer", "ok"]
    assert [d["passed"] for d in scored.details] == [0, 0, 2, 4]
    assert all(d["total"] == 4 for d in scored.details)
    assert "SyntaxError" in scored.details[0]["compile_log"]
    # Stopping at the first failure: the failing sample is the only test WRONG ran.
    assert [t["kind"] for t in scored.details[1]["tests"]] == ["sample"]
    assert [t["status"] for t in scored.details[2]["tests"]] == ["ok", "ok", "ok", "wrong_answer"]


def test_without_samples_a_compiling_program_goes_straight_to_hidden_tests(reward):
    scored = score(reward, [fenced(WRONG), fenced(RIGHT)], tests=ADD_TESTS)
    assert scored.values == [0.1, 1.0]


def test_cpp_compile_error_scores_zero_and_cpp_solution_full(reward):
    good = "#include <iostream>\nint main(){long long a,b;std::cin>>a>>b;std::cout<<a+b<<'\\n';}\n"
    bad = "#include <iostream>\nint main(){ std::cout << missing; }\n"
    scored = score(reward, [fenced(good, "cpp"), fenced(bad, "cpp")], tests=ADD_TESTS)
    assert scored.values == [1.0, 0.0]
    assert scored.details[0]["language"] == "cpp"
    assert "missing" in scored.details[1]["compile_log"]


def test_no_code_at_all_scores_as_not_compiling(reward):
    scored = score(reward, ["", "```python\n\n```"], tests=ADD_TESTS)
    assert scored.values == [0.0, 0.0]
    assert scored.details[0]["detail"] == "no code found"


def test_partial_credit_counts_the_fraction_of_hidden_tests(reward):
    cfg = CodeRewardSection(partial_credit=True, test_policy="run_all")
    partial = CodeReward(cfg, FAST)
    try:
        scored = score(partial, [fenced(SAMPLES_ONLY), fenced(WRONG)], tests=ADD_TESTS)
    finally:
        partial.close()
    # SAMPLES_ONLY passes 2 of 4 hidden tests: max(compile 0.1, 1.0 * 2/4) = 0.5.
    # WRONG (a - b) passes none: the compile tier, 0.1.
    assert scored.values == [0.5, 0.1]
    assert len(scored.details[1]["tests"]) == 4  # run_all: every test ran, for the log


def test_partial_credit_never_reaches_pass_reward_when_the_samples_fail(reward):
    # Right on every hidden test, wrong on the sample (2 2): before, max(0.1, 1.0 * 4/4) = 1.0.
    hidden_only = "a, b = map(int, input().split())\nprint(5 if (a, b) == (2, 2) else a + b)\n"
    cfg = CodeRewardSection(partial_credit=True, test_policy="run_all")
    partial = CodeReward(cfg, FAST)
    try:
        scored = score(partial, [fenced(hidden_only)], tests=ADD_TESTS, sample_tests=ADD_SAMPLES)
    finally:
        partial.close()
    # The failed sample counts as one more failed hidden test: max(0.1, 1.0 * 3/4) = 0.75.
    assert scored.values == [0.75]
    assert scored.details[0]["passed"] == 4


def test_partial_credit_without_run_all_is_refused():
    with pytest.raises(ValueError, match="test_policy = 'run_all'"):
        CodeRewardSection(partial_credit=True)


def test_row_time_limit_and_status_of_a_slow_program(reward):
    slow = (
        "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.3:\n    pass\n"
        + RIGHT
    )
    rows = {"time_limit_ms": [100, 3000]}
    scored = score(reward, [fenced(slow)] * 2, rows, tests=ADD_TESTS[:1])
    assert scored.details[0]["status"] == "timeout"
    assert scored.values == [0.1, 1.0]


def test_float_tolerance_from_config(reward):
    tests = [{"input": "", "output": "0.3333333\n"}]
    loose = CodeReward(CodeRewardSection(float_tolerance=1e-6), FAST)
    try:
        exact = score(reward, [fenced("print(1/3)")], tests=tests).values
        tolerant = score(loose, [fenced("print(1/3)")], tests=tests).values
    finally:
        loose.close()
    assert exact == [0.1]
    assert tolerant == [1.0]


def test_checker_accepts_any_right_answer_and_never_shows_the_answer_to_the_program(reward):
    # "Print any divisor of n greater than 1": several answers are right.
    checker = (
        "import sys\n"
        "n = int(open(sys.argv[1]).read())\n"
        "got = open(sys.argv[2]).read().split()\n"
        "ok = len(got) == 1 and got[0].isdigit() and 1 < int(got[0]) and n % int(got[0]) == 0\n"
        "sys.exit(0 if ok else 1)\n"
    )
    tests = [{"input": "12\n", "output": "2\n"}, {"input": "35\n", "output": "5\n"}]
    largest = "n = int(input())\nprint(max(d for d in range(2, n + 1) if n % d == 0))\n"
    snooping = (
        "import os\nn = int(input())\n"
        "print(open('answer.txt').read() if os.path.exists('answer.txt') else 1)\n"
    )
    scored = score(reward, [fenced(largest), fenced(snooping)], tests=tests, checker=checker)
    assert scored.values == [1.0, 0.1]  # 12 and 35 are accepted though the answers say 2 and 5
    assert scored.details[1]["status"] == "wrong_answer"


def test_a_checker_without_a_language_is_in_the_configured_default_language():
    isolation_or_skip(FAST)
    checker = '#include <cstdio>\nint main() { std::puts("accepted"); return 0; }\n'
    cpp_default = CodeReward(CodeRewardSection(default_language="cpp"), FAST)
    try:
        scored = score(cpp_default, [fenced(RIGHT)], tests=ADD_TESTS[:1], checker=checker)
    finally:
        cpp_default.close()
    assert scored.values == [1.0], scored.details


def test_rows_without_tests_are_not_applicable(reward):
    scored = score(reward, [fenced(RIGHT), "\\boxed{3}"], {"tests": [ADD_TESTS, None]})
    assert scored.values == [1.0, None]


def test_a_missing_tests_column_is_an_error_naming_it(reward):
    with pytest.raises(AscentError, match="needs a 'tests' column"):
        reward([""], [fenced(RIGHT)], answer=["3"])


# -- call-a-function tests and reward hacks ----------------------------------------------------

ADD_CHECK = (
    "def check(candidate):\n    assert candidate(2, 3) == 5\n    assert candidate(-1, 1) == 0\n"
)


@pytest.mark.parametrize(
    ("program", "expected"),
    [
        ("def add(a, b):\n    return a + b\n", 1.0),
        ("def add(a, b):\n    return a * b\n", 0.1),
        # Hacks: exit before the tests run, fake a verdict, or return an object equal to all.
        ("import sys\ndef add(a, b):\n    return 0\nsys.exit(0)\n", 0.1),
        ("import os\ndef add(a, b):\n    return 0\nos._exit(0)\n", 0.1),
        ("import os\ndef add(a, b):\n    return 0\nos.write(3, b'pass 0')\nprint('pass')\n", 0.1),
        (
            "class Anything:\n    def __eq__(self, other):\n        return True\n"
            "def add(a, b):\n    return Anything()\n",
            0.1,
        ),
        ("def check(candidate):\n    pass\ndef add(a, b):\n    return 0\n", 0.1),
        ("def plus(a, b):\n    return a + b\n", 0.1),  # wrong name
    ],
)
def test_function_tests_and_reward_hacks(reward, program, expected):
    scored = score(reward, [fenced(program)], tests=ADD_CHECK, entry_point="add")
    assert scored.values == [expected]
    assert scored.details[0]["total"] == 1


def humaneval_sample(size: int) -> list[dict]:
    problems = read_jsonl("humaneval.jsonl.gz")
    assert len(problems) == 164
    return problems if size >= len(problems) else random.Random(5).sample(problems, size)


def broken(problem: dict) -> str:
    """The canonical solution with its last return value wrapped in a wrong-type container."""
    return problem["prompt"] + "    return [None]\n"


def check_humaneval(reward: CodeReward, problems: list[dict]) -> None:
    good = [fenced(p["prompt"] + p["canonical_solution"]) for p in problems]
    bad = [fenced(broken(p)) for p in problems]
    columns = {
        "tests": [p["test"] for p in problems] * 2,
        "entry_point": [p["entry_point"] for p in problems] * 2,
        # Some tests call the prompt's helpers (poly, encode_cyclic, encode_shift): the trusted
        # prompt runs in the test process, the program's own copies never do.
        "test_setup": [p["prompt"] for p in problems] * 2,
    }
    scored = reward.score([""] * len(good + bad), good + bad, **columns)
    n = len(problems)
    failed = [
        (p["task_id"], d)
        for p, d, v in zip(problems, scored.details[:n], scored.values[:n], strict=True)
        if v != 1.0
    ]
    assert failed == []
    assert all(v == 0.1 for v in scored.values[n:]), scored.values[n:]


def test_humaneval_canonical_solutions_score_full_and_broken_ones_do_not_sample(reward):
    check_humaneval(reward, humaneval_sample(20))


@pytest.mark.slow
def test_humaneval_all_164_canonical_solutions_score_full_and_broken_ones_do_not(reward):
    check_humaneval(reward, humaneval_sample(164))


# -- the contest problems through the stdin/stdout judge -------------------------------------

COUNTING_1342C = """
import sys
def main():
    data = sys.stdin.read().split()
    t = int(data[0]); pos = 1; out = []
    for _ in range(t):
        a, b, q = map(int, data[pos:pos + 3]); pos += 3
        p = a * b
        pre = [0] * (p + 1)
        for i in range(p):
            pre[i + 1] = pre[i] + ((i % a) % b != (i % b) % a)
        f = lambda x: (x // p) * pre[p] + pre[x % p + 1]
        answers = []
        for _ in range(q):
            l, r = int(data[pos]), int(data[pos + 1]); pos += 2
            answers.append(f(r) - f(l - 1))
        out.append(" ".join(map(str, answers)))
    print("\\n".join(out))
main()
"""

CORRECT_SOLUTION_12B = r"""
#include <algorithm>
#include <iostream>
#include <string>
int main() {
    std::string n, m;
    std::cin >> n >> m;
    std::sort(n.begin(), n.end());
    if (n[0] == '0') {
        size_t k = n.find_first_not_of('0');
        if (k != std::string::npos) std::swap(n[0], n[k]);
    }
    std::cout << (n == m ? "OK" : "WRONG_ANSWER") << "\n";
}
"""


def contest_problems() -> dict[str, list[dict]]:
    rows = read_jsonl("code_contests_sample.jsonl")
    return {json.loads(r["labels"])["name"]: json.loads(r["test"]) for r in rows}


def test_real_solutions_pass_every_test_of_two_contest_problems(reward):
    problems = contest_problems()
    tests_c = problems["1342_C. Yet Another Counting Problem"]
    tests_b = problems["12_B. Correct Solution?"]
    assert (len(tests_c), len(tests_b)) == (101, 132)
    scored = score(
        reward,
        [fenced(COUNTING_1342C), fenced(CORRECT_SOLUTION_12B, "cpp")],
        {"tests": [tests_c, tests_b]},
    )
    assert scored.values == [1.0, 1.0]
    assert [(d["passed"], d["total"]) for d in scored.details] == [(101, 101), (132, 132)]
    # Off by one in the answer: the judge notices.
    off = COUNTING_1342C.replace("f(r) - f(l - 1)", "f(r) - f(l)")
    assert score(reward, [fenced(off)], tests=tests_c).values == [0.1]


def lookup_program(tests: list[dict]) -> str:
    """A program that answers each test's input with that test's expected output."""
    table = {t["input"]["stdin"].strip(): t["output"]["stdout"] for t in tests}
    return f"import sys\nsys.stdout.write({table!r}[sys.stdin.read().strip()])\n"


def check_contests(reward: CodeReward, names: list[str]) -> None:
    problems = contest_problems()
    tests = [problems[name] for name in names]
    shifted = [
        [{"input": t["input"], "output": ts[(i + 1) % len(ts)]["output"]} for i, t in enumerate(ts)]
        for ts in tests
    ]
    right = [fenced(lookup_program(ts)) for ts in tests]
    wrong = [fenced(lookup_program(ts)) for ts in shifted]
    scored = score(reward, right + wrong, {"tests": tests + tests})
    n = len(names)
    assert scored.values[:n] == [1.0] * n
    assert [d["passed"] for d in scored.details[:n]] == [len(ts) for ts in tests]
    # Every problem has tests with different answers, so the shifted table fails somewhere.
    assert scored.values[n:] == [0.1] * n


def test_contest_tests_run_through_the_judge_with_their_expected_outputs_sample(reward):
    check_contests(reward, ["1198_A. MP3", "1238_B. Kill 'Em All", "digjump"])


@pytest.mark.slow
def test_all_contest_problems_run_through_the_judge(reward):
    check_contests(reward, sorted(contest_problems()))

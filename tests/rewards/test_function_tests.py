"""Call-a-function tests (HumanEval style): the program cannot fake, read or bend its tests.

The tests run in a process of their own and call the program's function over a pipe with plain
data. Each hack below scored 1.0, or leaked the tests, when the test code ran inside the
program's interpreter, after the program, in the program's globals.
"""

from __future__ import annotations

import pytest

from ascent.config.rewards import CodeRewardSection, SandboxSection
from ascent.rewards.code import CodeReward
from ascent.rewards.sandbox import Limits, SandboxPool
from tests.rewards.conftest import FAST, isolation_or_skip, read_jsonl

pytestmark = pytest.mark.timeout(120)

SECRET = "7781-expected"  # appears only in the test code
ADD_CHECK = (
    "def check(candidate):\n"
    f"    assert candidate(20, 22) == 42, '{SECRET}'\n"
    "    assert abs(candidate(0.5, 0.25) - 0.75) < 1e-9\n"
)
# Reads its own anonymous memory (inherited from the zygote, freed or not) with ctypes, and
# tries every other process's (the test process's among them), printing what follows each
# "def check(candidate):" it finds and how many other processes it could read.
SCANNER = r"""
import ctypes, os, re
hits, readable = [], 0
for line in open("/proc/self/maps"):
    fields = line.split()
    if fields[1].startswith("r") and (len(fields) < 6 or fields[5] == "[heap]"):
        start, end = (int(x, 16) for x in fields[0].split("-"))
        data = ctypes.string_at(start, end - start)
        hits += [data[m.start() : m.start() + 120] for m in re.finditer(rb"def check\(cand", data)]
for pid in [p for p in os.listdir("/proc") if p.isdigit() and int(p) != os.getpid()]:
    try:
        with open(f"/proc/{pid}/mem", "rb", 0) as mem:
            mem.read(1)
        readable += 1
    except OSError:
        pass
print(hits, readable)
"""


@pytest.fixture(scope="module")
def reward():
    isolation_or_skip(FAST)
    code_reward = CodeReward(CodeRewardSection(), FAST.model_copy(update={"workers": 1}))
    yield code_reward
    code_reward.close()


def score(reward: CodeReward, program: str, test_code: str = ADD_CHECK, **columns) -> tuple:
    scored = reward.score(
        [""],
        [f"```python\n{program}```"],
        tests=[test_code],
        entry_point=["add"],
        **{k: [v] for k, v in columns.items()},
    )
    return scored.values[0], scored.details[0]


def test_a_correct_function_passes_and_a_wrong_one_fails(reward):
    assert score(reward, "def add(a, b):\n    return a + b\n")[0] == 1.0
    value, detail = score(reward, "def add(a, b):\n    return a - b\n")
    assert (value, detail["tests"][0]["status"]) == (0.1, "wrong_answer")


@pytest.mark.parametrize(
    "hack",
    [
        # Write the pass verdict with the nonce found in the caller's frame, then leave.
        "import sys, os\ndef add(a, b):\n    return 0\n"
        "h = sys._getframe(1).f_locals['harness']\n"
        "os.write(3, ('pass ' + h['nonce']).encode())\nos._exit(0)\n",
        # Replace the harness function that runs the tests.
        "import sys, os\ndef add(a, b):\n    return 0\n"
        "g = sys._getframe(1).f_globals\n"
        "g['check_function'] = lambda ns, h: os.write(3, ('pass ' + h['nonce']).encode())\n",
        # Disable the plain-data check and return an object equal to everything.
        "import sys\nclass Anything:\n    def __eq__(self, other):\n        return True\n"
        "    def __sub__(self, other):\n        return 0\n"
        "sys._getframe(1).f_globals['plain'] = lambda value, depth=0: True\n"
        "def add(a, b):\n    return Anything()\n",
        # Shadow a builtin the test code uses, as the tests ran in the program's globals.
        "def abs(value):\n    return 0\ndef add(a, b):\n    return 42\n",
    ],
    ids=["forged-verdict", "replaced-harness", "disabled-plain-check", "shadowed-builtin"],
)
def test_reward_hacks_on_the_test_harness_score_like_a_wrong_answer(reward, hack):
    value, detail = score(reward, hack)
    assert value == 0.1, detail


def test_killing_every_other_process_does_not_turn_a_failure_into_no_reward(reward):
    hack = (
        "import os, signal\n"
        "for pid in os.listdir('/proc'):\n"
        "    if pid.isdigit() and int(pid) != os.getpid():\n"
        "        try:\n"
        "            os.kill(int(pid), signal.SIGKILL)\n"
        "        except OSError:\n"
        "            pass\n"
        "def add(a, b):\n    return 0\n"
    )
    assert score(reward, hack)[0] == 0.1


def worker_pool() -> SandboxPool:
    cfg = FAST.model_copy(update={"workers": 1})
    isolation_or_skip(cfg)
    return SandboxPool(cfg)


def test_the_program_never_sees_the_test_code():
    frames = "import sys\nprint(sys._getframe(1).f_locals['harness']['test'])\n"
    add = "def add(a, b):\n    return a + b\n"

    def task(worker):
        limits = Limits.for_run(FAST, 3000)
        results = []
        # The frame hack, then a memory scan while its test process waits for the answer, after
        # earlier runs of the same tests on this worker.
        for code in (add + frames, add + SCANNER, add + SCANNER):
            program = worker.prepare(code, "python")
            results.append(worker.check_function(program, ADD_CHECK, "add", limits))
            worker.drop(program)
        return results

    with worker_pool() as pool:
        leak, *scans = pool.submit(task).result()
    assert "KeyError" in leak.stderr  # no harness in its frames
    for result in (leak, *scans):
        assert SECRET not in result.stdout + result.stderr
    assert [(scan.status, scan.stdout) for scan in scans] == [("ok", "[] 0\n")] * 2


NORMALISED = """
from collections import Counter, OrderedDict, defaultdict, deque, namedtuple
from decimal import Decimal
from fractions import Fraction

Point = namedtuple("Point", "x y")

class Int(int):
    pass

def add(kind, b=None):
    d = defaultdict(list)
    d["a"].append(1)
    return {
        "counter": Counter("abca"),
        "defaultdict": d,
        "ordered": OrderedDict([(2, "b"), (1, "a")]),
        "namedtuple": Point(1, 2),
        "fraction": Fraction(1, 3),
        "decimal": Decimal("0.5"),
        "int-subclass": Int(7),
        "big": 3 ** 5000,
        "generator": (i * i for i in range(4)),
        "keys": {"x": 1, "y": 2}.keys(),
        "nested": [(1, {2: frozenset({3})}), {"k": [None, True, 1.5, b"raw", 2j]}],
        "deque": deque([1, 2]),
        "range": range(1, 10, 3),
        "nan": float("nan"),
    }[kind]
"""
NORMALISED_CHECK = """
def check(candidate):
    import math
    from collections import deque
    from fractions import Fraction
    assert candidate("counter") == {"a": 2, "b": 1, "c": 1}
    assert candidate("defaultdict") == {"a": [1]}
    assert candidate("ordered") == {1: "a", 2: "b"}
    assert candidate("namedtuple") == (1, 2)
    assert candidate("fraction") == Fraction(1, 3) and candidate("fraction") != 1 / 3
    assert candidate("decimal") == 0.5
    assert candidate("int-subclass") == 7 and type(candidate("int-subclass")) is int
    assert candidate("big") == 3 ** 5000
    assert tuple(candidate("generator")) == (0, 1, 4, 9)
    assert candidate("keys") == {"x", "y"} and list(candidate("keys")) == ["x", "y"]
    assert candidate("nested") == [(1, {2: frozenset({3})}), {"k": [None, True, 1.5, b"raw", 2j]}]
    assert candidate("deque") == deque([1, 2]) and candidate("deque") != [1, 2]
    assert list(candidate("range")) == [1, 4, 7]
    assert math.isnan(candidate("nan"))
"""


def test_returns_plain_python_accepts_are_normalised_not_refused(reward):
    value, detail = score(reward, NORMALISED, NORMALISED_CHECK)
    assert value == 1.0, detail


def test_a_value_that_cannot_cross_is_a_runtime_error_that_names_it(reward):
    value, detail = score(reward, "class Box:\n    pass\ndef add(a, b):\n    return Box()\n")
    assert (value, detail["tests"][0]["status"]) == (0.1, "runtime_error")
    assert "returned a Box, which is not plain data" in detail["tests"][0]["detail"]


def test_the_programs_exceptions_reach_the_tests_as_builtin_types(reward):
    test_code = (
        "def check(candidate):\n"
        "    try:\n"
        "        candidate(1, 0)\n"
        "    except ZeroDivisionError:\n"
        "        return\n"
        "    assert False\n"
    )
    assert score(reward, "def add(a, b):\n    return a / b\n", test_code)[0] == 1.0


def test_helpers_the_tests_call_come_from_test_setup_not_from_the_program(reward):
    # HumanEval/32 checks find_zero with poly() from its prompt: a program's own poly must not
    # be the one the tests trust.
    test_code = "def check(candidate):\n    assert poly([2, -1], candidate([2, -1])) == 0\n"
    prompt = "def poly(xs, x):\n    return sum(c * x ** i for i, c in enumerate(xs))\n"
    cheat = "def poly(xs, x):\n    return 0\ndef add(xs):\n    return 99\n"
    right = "def add(xs):\n    return -xs[0] / xs[1]\n"
    assert score(reward, cheat, test_code, test_setup=prompt)[0] == 0.1
    assert score(reward, right, test_code, test_setup=prompt)[0] == 1.0
    value, detail = score(reward, right, test_code)  # no setup: the data, not the program
    assert value is None
    assert "name 'poly' is not defined" in detail["detail"] and "test_setup" in detail["detail"]


def test_humaneval_111_with_a_counter_scores_full_marks(reward):
    problem = next(p for p in read_jsonl("humaneval.jsonl.gz") if p["task_id"] == "HumanEval/111")
    solution = problem["prompt"] + (
        "    from collections import Counter\n"
        "    counts = Counter(test.split())\n"
        "    top = max(counts.values(), default=0)\n"
        "    return Counter({k: v for k, v in counts.items() if v == top and k})\n"
    )
    scored = reward.score(
        [""],
        [f"```python\n{solution}```"],
        tests=[problem["test"]],
        entry_point=[problem["entry_point"]],
    )
    assert scored.values == [1.0], scored.details


def test_function_tests_work_without_isolation_too():
    cfg = SandboxSection(workers=1, unsafe_local=True)
    code_reward = CodeReward(CodeRewardSection(), cfg)
    try:
        assert score(code_reward, "def add(a, b):\n    return a + b\n")[0] == 1.0
        assert (
            score(code_reward, "def abs(v):\n    return 0\ndef add(a, b):\n    return 42\n")[0]
            == 0.1
        )
    finally:
        code_reward.close()

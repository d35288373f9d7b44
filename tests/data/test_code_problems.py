"""Code problems: one schema, read from ascent's JSONL, HumanEval and code_contests rows."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from ascent.data.bundled import bundled_dir
from ascent.data.code_problems import (
    CodeProblem,
    detect_code_format,
    from_code_schema,
    load_code_problems,
)
from ascent.errors import AscentError
from ascent.rewards.judge import StdioTest

DATA = bundled_dir()  # the real data sets shipped in the package


def data_file(name: str) -> Path:
    return DATA / name


def write_jsonl(path: Path, rows: list[object]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_contest_sample_loads_every_problem_with_labels_and_no_invented_rating():
    problems = load_code_problems(data_file("code_contests_sample.jsonl"))
    lines = data_file("code_contests_sample.jsonl").read_text().strip().splitlines()
    assert len(problems) == len(lines)
    assert len({p.id for p in problems}) == len(problems)
    assert all(p.rating is None for p in problems)  # the sample carries no numeric ratings
    labels = {p.difficulty for p in problems}
    assert {"A", "B", "C", "MEDIUM"} <= labels
    first = problems[0]
    assert first.id == "a3" and first.name == "a3" and not first.is_function
    assert len(first.hidden_tests) == 101 and "Johnny" in first.statement
    for p in problems:
        assert 35 <= len(p.hidden_tests) <= 331
        # samples are tests shown in the statement, and they stay among the judged tests
        assert all(t.input.strip() in p.statement for t in p.sample_tests)
        assert set(p.sample_tests) <= set(p.hidden_tests)
    assert sum(bool(p.sample_tests) for p in problems) >= 15


def test_contest_test_io_matches_the_raw_row():
    path = data_file("code_contests_sample.jsonl")
    raw = json.loads(path.read_text().splitlines()[3])
    tests = json.loads(raw["test"])
    problem = load_code_problems(path, limit=4)[3]
    assert problem.hidden_tests[0] == StdioTest(
        tests[0]["input"]["stdin"], tests[0]["output"]["stdout"]
    )
    assert problem.difficulty == "A" and problem.name.startswith("1000_A.")


def test_humaneval_loads_as_function_problems_with_reference_solutions():
    problems = load_code_problems(data_file("humaneval.jsonl.gz"))
    assert len(problems) == 164
    first = problems[0]
    assert first.id == "HumanEval/0" and first.entry_point == "has_close_elements"
    assert first.is_function and "def check(candidate)" in first.test_code
    assert first.reference_solution.startswith(first.statement)
    assert first.reward_columns() == {
        "tests": first.test_code,
        "entry_point": first.entry_point,
        "test_setup": first.statement,  # the prompt's helpers, run by the trusted test side
    }


def test_limit_reads_only_the_first_problems():
    assert [p.id for p in load_code_problems(data_file("humaneval.jsonl.gz"), limit=3)] == [
        "HumanEval/0",
        "HumanEval/1",
        "HumanEval/2",
    ]


def test_code_schema_round_trips_and_defaults_ids_to_file_and_line(tmp_path):
    row = {
        "statement": "Print the sum of two integers.",
        "sample_tests": [{"input": "1 2\n", "output": "3\n"}],
        "hidden_tests": [{"input": "1 2\n", "output": "3\n"}, {"input": "5 5\n", "output": "10"}],
        "rating": 800,
        "difficulty": "A",
        "tags": ["math"],
        "time_limit_ms": 1000,
        "reference_solution": "print(sum(map(int, input().split())))",
        "source": "ignored: unknown keys are allowed",
    }
    path = write_jsonl(tmp_path / "sums.jsonl", [row, {**row, "id": "two"}])
    first, second = load_code_problems(path)
    assert first.id == "sums:1" and second.id == "two"
    assert first.rating == 800 and first.tags == ("math",) and first.time_limit_ms == 1000
    again = from_code_schema(json.loads(json.dumps(first.to_json())))
    assert again == first
    assert first.reward_columns()["tests"][1] == {"input": "5 5\n", "output": "10"}


def test_code_schema_accepts_the_code_rewards_column_names(tmp_path):
    rows = [
        {"statement": "echo", "tests": [{"input": "x", "output": "x"}]},
        {"statement": "def f(): ...", "entry_point": "f", "tests": "def check(c): assert c()"},
    ]
    stdio, function = load_code_problems(write_jsonl(tmp_path / "p.jsonl", rows))
    assert stdio.hidden_tests == (StdioTest("x", "x"),)
    assert function.is_function and function.test_code == "def check(c): assert c()"


def test_gzipped_code_schema_loads(tmp_path):
    path = tmp_path / "p.jsonl.gz"
    with gzip.open(path, "wt") as fh:
        fh.write(json.dumps({"statement": "s", "hidden_tests": [{"input": "", "output": "1"}]}))
    assert load_code_problems(path)[0].id == "p:1"


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ({"statement": "s"}, "no tests: give hidden_tests"),
        ({"statement": "s", "hidden_tests": []}, "hidden_tests is empty"),
        ({"statement": "s", "hidden_tests": [{"input": "1"}]}, "hidden_tests[0] must be"),
        ({"statement": "", "hidden_tests": []}, "'statement' must be a non-empty string"),
        ({"statement": "s", "entry_point": "f"}, "test_code must be code defining check"),
        ({"statement": "s", "entry_point": "1f", "test_code": "check"}, "not a function name"),
        ({"statement": "s", "tests": [{"input": "", "output": ""}], "rating": "hard"}, "'rating'"),
        ({"statement": "s", "tests": [{"input": "", "output": ""}], "tags": "dp"}, "'tags'"),
    ],
)
def test_a_bad_row_names_the_file_and_line(tmp_path, row, message):
    good = {"statement": "ok", "hidden_tests": [{"input": "", "output": "1"}]}
    path = write_jsonl(tmp_path / "bad.jsonl", [good, row])
    with pytest.raises(AscentError) as err:
        load_code_problems(path)
    text = str(err.value)
    assert text.startswith(f"{path}:2: ") and message in text and "\n" not in text


def test_invalid_json_duplicate_ids_and_unknown_formats_are_refused(tmp_path):
    broken = tmp_path / "broken.jsonl"
    broken.write_text('{"statement": "s", "tests": [{"input": "", "output": ""}]}\n{not json\n')
    with pytest.raises(AscentError, match=r"broken.jsonl:2: not valid JSON"):
        load_code_problems(broken, limit=5)
    row = {"id": "x", "statement": "s", "hidden_tests": [{"input": "", "output": ""}]}
    with pytest.raises(AscentError, match=r"dup.jsonl:2: id 'x' repeats line 1"):
        load_code_problems(write_jsonl(tmp_path / "dup.jsonl", [row, row]))
    with pytest.raises(AscentError, match=r"odd.jsonl:1: cannot tell the format .*\(a, b\)"):
        load_code_problems(write_jsonl(tmp_path / "odd.jsonl", [{"a": 1, "b": 2}]))
    with pytest.raises(AscentError, match="no problems in the file"):
        load_code_problems(write_jsonl(tmp_path / "empty.jsonl", []))


def test_format_detection_by_fields():
    assert detect_code_format({"statement": "s"}) == "code"
    assert detect_code_format({"prompt": "p", "entry_point": "f", "test": "t"}) == "humaneval"
    assert detect_code_format({"content": "c", "test": "[]", "labels": "{}"}) == "code_contests"
    assert detect_code_format({"question": "q", "answer": "a"}) is None


def test_a_forced_format_reads_rows_as_that_format(tmp_path):
    row = {"content": "Print 1.", "test": [{"input": {"stdin": ""}, "output": {"stdout": "1"}}]}
    path = write_jsonl(tmp_path / "c.jsonl", [row])
    (problem,) = load_code_problems(path, "code_contests")
    assert problem == CodeProblem(
        id="c:1", statement="Print 1.", hidden_tests=(StdioTest("", "1"),)
    )
    with pytest.raises(AscentError, match=r"c.jsonl:1: 'statement' must be .*as code format"):
        load_code_problems(path, "code")

"""Fuzzing the problem set of `ascent eval`: any `[eval] problems` string and any problem file
either loads or fails with one line (an `AscentError`), never with a traceback.

The entry points are the ones `run_eval` calls before any request: `resolve_problems_path`
(`[eval] problems` as written), `load_problem_set` (`[eval] format`, `[eval] limit`) and
`check_language`. Every bug the fuzzer found has a plain test at the end of the file.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ascent.config.evaluation import EvalSection
from ascent.errors import ConfigError
from ascent.evaluation.problem_set import (
    MathProblem,
    check_language,
    load_problem_set,
    resolve_problems_path,
)
from tests.fuzzing import FUZZ, encode_line, json_values, jsonl_files, one_line_or_success, write

FORMATS = ["auto", "auto", "code", "humaneval", "code_contests", "math"]
# Math rows, shaped like GSM8K's, with values of any type in every field.
math_rows = st.fixed_dictionaries(
    {"question": st.text(max_size=8) | json_values, "answer": json_values},
    optional={"id": json_values, "rating": json_values, "difficulty": json_values},
)


@FUZZ
@given(
    jsonl_files(), st.sampled_from(FORMATS), st.integers(0, 3), st.sampled_from(["python", "cpp"])
)
def test_random_problem_files_load_or_fail_in_one_line(file, fmt, limit, language):
    name, data = file
    with tempfile.TemporaryDirectory() as tmp:
        path = write(Path(tmp), name, data)

        def load_and_check() -> None:
            check_language(load_problem_set(path, fmt, limit), EvalSection(language=language))

        err = one_line_or_success(load_and_check)
        assert err is None or str(path) in str(err) or "[eval] language" in str(err), str(err)


@FUZZ
@given(st.lists(math_rows, min_size=1, max_size=4), st.sampled_from(["auto", "math"]))
def test_random_math_rows_load_or_fail_in_one_line(rows, fmt):
    with tempfile.TemporaryDirectory() as tmp:
        path = write(Path(tmp), "math.jsonl", b"\n".join(map(encode_line, rows)))
        one_line_or_success(lambda: load_problem_set(path, fmt), str(path))


@FUZZ
@given(st.text(max_size=40), st.none() | st.text(max_size=20))
def test_random_problems_setting_resolves_or_fails_in_one_line(problems, config_source):
    # Relative names are looked up from the current directory: what a user's typo would do.
    one_line_or_success(lambda: resolve_problems_path(problems, config_source))


# -- regressions: what the fuzzer found ------------------------------------------------------


@pytest.mark.parametrize("rating", ["NaN", "Infinity", "-Infinity"])
def test_math_row_rating_nan_or_infinity_counts_as_no_rating(tmp_path, rating):
    path = write(
        tmp_path, "m.jsonl", f'{{"question": "1+1?", "answer": 2, "rating": {rating}}}'.encode()
    )
    (problem,) = load_problem_set(path).problems
    assert problem == MathProblem(id="m:1", question="1+1?", answer="2", rating=None)


def test_problems_naming_no_users_home_is_a_config_error():
    with pytest.raises(ConfigError) as caught:
        resolve_problems_path("~nobody_ascent_fuzz/p.jsonl", None)
    assert str(caught.value) == (
        "[eval] problems: ~nobody_ascent_fuzz/p.jsonl: no home directory for "
        "'~nobody_ascent_fuzz'; write the path out"
    )


def test_problems_path_too_long_for_the_file_system_is_not_found(tmp_path):
    long = tmp_path / ("p" * 300 + ".jsonl")
    config = tmp_path / ("c" * 300 + ".toml")
    with pytest.raises(ConfigError, match=r"^\[eval\] problems: no file at .*; check the path$"):
        resolve_problems_path(str(long), str(config))

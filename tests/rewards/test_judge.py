"""The stdin/stdout judge's comparison rules and test parsing (no sandbox needed)."""

from __future__ import annotations

import pytest

from ascent.errors import AscentError
from ascent.rewards.code import extract_code
from ascent.rewards.judge import StdioTest, outputs_match, parse_stdio_tests


@pytest.mark.parametrize(
    ("expected", "actual"),
    [
        ("3\n", "3"),  # missing final newline
        ("0 0 0 2 4 \n0 91 \n", "0 0 0 2 4\n0 91"),  # trailing spaces (real code_contests output)
        ("1 2 3", "1\n2\n3\n"),  # line breaks between tokens do not matter
        ("YES\r\n", "YES\n"),  # Windows line endings
    ],
)
def test_whitespace_between_tokens_does_not_matter(expected, actual):
    assert outputs_match(expected, actual)


@pytest.mark.parametrize(
    ("expected", "actual"),
    [
        ("3", "4"),
        ("1 2 3", "1 2"),  # a missing token
        ("1 2", "1 2 3"),  # an extra token
        ("YES", "yes"),  # case matters
        ("12", "1 2"),  # tokens are not concatenated
        ("0.5", "0.50"),  # numbers are strings unless a tolerance is asked for
        ("", "x"),
    ],
)
def test_different_tokens_fail(expected, actual):
    assert not outputs_match(expected, actual)


def test_float_tolerance_is_absolute_for_small_values_and_relative_for_large():
    assert outputs_match("0.5", "0.50", float_tolerance=1e-6)
    assert outputs_match("1.000000", "1.0000009", float_tolerance=1e-6)
    assert not outputs_match("1.000000", "1.000002", float_tolerance=1e-6)
    # |expected| = 1e6: the allowed error is 1e-6 * 1e6 = 1.
    assert outputs_match("1000000", "1000000.9", float_tolerance=1e-6)
    assert not outputs_match("1000000", "1000001.5", float_tolerance=1e-6)
    assert not outputs_match("nan", "nan2", float_tolerance=1.0)
    assert not outputs_match("inf", "inf0", float_tolerance=1.0)
    assert not outputs_match("abc", "abd", float_tolerance=1.0)  # words still compare exactly


def test_tests_parse_from_lists_json_strings_and_the_code_contests_form():
    plain = parse_stdio_tests([{"input": "1 2\n", "output": "3\n"}])
    as_json = parse_stdio_tests('[{"input": "1 2\\n", "output": "3\\n"}]')
    contests = parse_stdio_tests([{"input": {"stdin": "1 2\n"}, "output": {"stdout": "3\n"}}])
    assert plain == as_json == contests == [StdioTest("1 2\n", "3\n")]


@pytest.mark.parametrize(
    ("tests", "message"),
    [
        ("def check(c): pass", "not a JSON list"),
        ({"input": "1"}, "must be a list"),
        ([{"input": "1"}], r"tests\[0\] must be an object with 'input' and 'output'"),
        ([{"input": 1, "output": "1"}], "must be strings"),
    ],
)
def test_malformed_tests_are_refused_with_what_is_wrong(tests, message):
    with pytest.raises(AscentError, match=message):
        parse_stdio_tests(tests)


def test_code_is_taken_from_the_last_fenced_block_of_a_known_language():
    text = (
        "Idea first.\n```text\nnot code\n```\n"
        "```python\nprint(1)\n```\nthen C++:\n```cpp\nint main() {}\n```\nDone."
    )
    assert extract_code(text) == ("int main() {}\n", "cpp")
    assert extract_code("```py\nprint(2)\n```") == ("print(2)\n", "python")
    assert extract_code("```\nprint(3)\n```") == ("print(3)\n", None)


def test_truncated_fence_and_bare_code():
    assert extract_code("Here:\n```python\nprint(1)\nprint(2") == ("print(1)\nprint(2", "python")
    assert extract_code("print(4)\n") == ("print(4)\n", None)

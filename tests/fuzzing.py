"""Shared by the fuzz tests: the property every loader must keep, and random JSONL files.

The property: a loader either succeeds or raises an `AscentError` whose message is one
non-empty line naming what it is about; never another exception. The default example counts
keep the whole fuzz suite to seconds; `ASCENT_FUZZ_EXAMPLES=2000 pytest tests -k fuzz` searches
harder.
"""

from __future__ import annotations

import gzip
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from ascent.errors import AscentError

FUZZ = settings(
    max_examples=int(os.environ.get("ASCENT_FUZZ_EXAMPLES", "60")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
FEW = settings(FUZZ, max_examples=max(1, FUZZ.max_examples // 3))  # for slow examples


def one_line_or_success(call: Callable[[], Any], *names: str) -> AscentError | None:
    """Run `call`; return None when it succeeds, the error when it raises an AscentError whose
    message is one non-empty line containing each of `names`; fail the test otherwise."""
    try:
        call()
    except AscentError as err:
        message = str(err)
        assert message.strip(), f"empty message from {type(err).__name__}"
        assert message.splitlines() == [message], f"message is not one line: {message!r}"
        for name in names:
            assert name in message, f"{name!r} not named in: {message!r}"
        return err
    return None


# -- JSONL files, for every loader that reads them ------------------------------------------

# Column names the loaders look for, in every format, plus a few nobody looks for.
KEYS = [
    "prompt", "answer", "question", "id", "uid", "level", "q", "a", "statement", "hidden_tests",
    "sample_tests", "tests", "entry_point", "test_code", "test_setup", "test", "content",
    "labels", "rating", "cf_rating", "difficulty", "tags", "time_limit_ms", "time_limit",
    "name", "task_id", "canonical_solution", "reference_solution", "checker", "cf_tags",
    "seconds", "nanos", "input", "output", "stdin", "stdout", "", "key\nline", "é",
]  # fmt: skip
keys = st.sampled_from(KEYS) | st.text(max_size=6)
json_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-3, 3000),
    st.integers(-(10**30), 10**30),
    st.sampled_from([0, -1, 10**400, -(10**400)]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=10),
    st.sampled_from(["", " ", "check", "def check(c): pass", "f", "1\n", "A", "[]", "x\ny"]),
)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(keys, inner, max_size=4),
    max_leaves=8,
)
# Tests, labels and time limits of roughly the right shape, with wrong types inside.
tests_value = st.lists(
    st.fixed_dictionaries({}, optional={"input": json_values, "output": json_values}), max_size=3
)
SHAPED = {
    "hidden_tests": tests_value,
    "sample_tests": tests_value,
    "tests": tests_value,
    "test": tests_value,
    "labels": st.dictionaries(st.sampled_from(["name", "difficulty", "rating"]), json_values),
    "time_limit": st.dictionaries(st.sampled_from(["seconds", "nanos"]), json_scalars),
}
json_rows = st.lists(st.sampled_from(KEYS), unique=True, max_size=8).flatmap(
    lambda chosen: st.fixed_dictionaries(
        {k: SHAPED[k] | json_values if k in SHAPED else json_values for k in chosen}
    )
)
# Lines that are not a JSON object, or not JSON at all.
BAD_LINES = [
    "", "   ", "{", "}", "[]", "null", "1", '"text"', "NaN", "{'a': 1}", '{"a": 1,}',
    "[" * 3000, '{"a": ' * 3000, "1" * 5000, '{"rating": ' + "9" * 5000 + "}",
]  # fmt: skip
bad_lines = st.sampled_from(BAD_LINES) | st.text(max_size=30) | json_values.map(json.dumps)


def encode_line(line: dict[str, Any] | str | bytes) -> bytes:
    if isinstance(line, bytes):
        return line
    if isinstance(line, dict):
        line = json.dumps(line)
    return line.encode("utf-8", "surrogatepass")


jsonl_lines = st.lists(
    st.one_of(json_rows, json_rows, json_rows, bad_lines, st.binary(max_size=20)).map(encode_line),
    max_size=6,
)


@st.composite
def jsonl_files(draw) -> tuple[str, bytes]:
    """(file name, contents): JSONL lines or raw bytes; plain, gzipped, or broken gzip."""
    body = draw(st.one_of(jsonl_lines.map(b"\n".join), st.binary(max_size=80)))
    kind = draw(st.sampled_from(["plain", "plain", "plain", "gzip", "broken gzip"]))
    if kind == "plain":
        return "fuzz.jsonl", body
    data = bytearray(gzip.compress(body))
    if kind == "broken gzip":
        if draw(st.booleans()):
            del data[draw(st.integers(0, len(data))) :]
        if data:
            data[draw(st.integers(0, len(data) - 1))] ^= 0xFF
    return "fuzz.jsonl.gz", bytes(data)


def write(folder: Path, name: str, data: bytes) -> Path:
    path = folder / name
    path.write_bytes(data)
    return path

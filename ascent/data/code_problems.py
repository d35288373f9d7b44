"""Code problems in one schema, loaded from the formats people have.

`CodeProblem` is ascent's code schema. A JSONL row in it looks like

    {"id": "1000_A", "statement": "...", "sample_tests": [{"input": "2\\n", "output": "4\\n"}],
     "hidden_tests": [...], "rating": 1200, "difficulty": "A", "tags": ["greedy"],
     "time_limit_ms": 2000, "reference_solution": "print(...)"}

or, for call-a-function problems, `entry_point` and `test_code` (defining `check(candidate)`)
instead of the tests, and optionally `test_setup` (trusted code the tests run first).
`tests` is accepted for `hidden_tests` (it is the code reward's column),
and test code may come in `tests` too when an `entry_point` is given, so rows written for
`ascent reward code` load as they are. Keys the schema does not know are ignored.

Two more formats are read and normalised into the schema:
- HumanEval (`prompt`, `entry_point`, `test`, `canonical_solution`): a function problem whose
  reference solution is prompt + canonical_solution; the prompt is also its `test_setup`,
  since some tests call the prompt's helper functions.
- DeepMind code_contests rows as in the bundled sample (`content`, `labels`, `test`): stdin/stdout
  problems. The samples are the tests whose input and output both appear in the statement
  (the rows do not mark them); every test counts as hidden. `labels` gives the difficulty
  label (a Codeforces problem letter or a CodeChef word: not a rating) and the name; a
  rating is taken only from a `rating` / `cf_rating` field when one is present.

A bad row stops loading with `file:line: what is wrong` (an evaluation with silently skipped
problems would report a misleading pass rate).
"""

from __future__ import annotations

import gzip
import json
import math
import stat
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ascent.errors import AscentError
from ascent.rewards.judge import StdioTest, parse_stdio_tests

CODE_FORMATS = ("code", "humaneval", "code_contests")


class RowError(ValueError):
    """A row that cannot be read as a problem; the loader adds the file and line."""


@dataclass(frozen=True)
class CodeProblem:
    """One programming problem: what the policy reads and what its program is judged by."""

    id: str
    statement: str  # the text the policy is given (HumanEval: the function to complete)
    hidden_tests: tuple[StdioTest, ...] = ()  # stdin/stdout tests that decide a pass
    sample_tests: tuple[StdioTest, ...] = ()  # tests shown in the statement, run first
    entry_point: str | None = None  # call-a-function problems: the function's name ...
    test_code: str | None = None  # ... and the code defining check(candidate)
    test_setup: str | None = None  # trusted code the tests run first (HumanEval: the prompt,
    # whose helper functions some tests call); never taken from the model's program
    reference_solution: str | None = None
    rating: int | None = None  # e.g. a Codeforces rating; None when the data has none
    difficulty: str | None = None  # a label such as "A" or "MEDIUM"; not a rating
    tags: tuple[str, ...] = ()
    time_limit_ms: int | None = None  # None: [sandbox] time_limit_ms
    checker: str | None = None  # checker program for problems with several right answers
    name: str = ""

    @property
    def is_function(self) -> bool:
        return self.entry_point is not None

    def reward_columns(self) -> dict[str, Any]:
        """This problem's columns for the code reward (`ascent.rewards.code`)."""
        if self.is_function:
            columns = {"tests": self.test_code, "entry_point": self.entry_point}
            return columns | ({"test_setup": self.test_setup} if self.test_setup else {})
        return {
            "tests": [_test_json(t) for t in self.hidden_tests],
            "sample_tests": [_test_json(t) for t in self.sample_tests],
            "time_limit_ms": self.time_limit_ms,
            "checker": self.checker,
        }

    def to_json(self) -> dict[str, Any]:
        """The row in ascent's code schema (`from_code_schema` reads it back)."""
        row: dict[str, Any] = {"id": self.id, "name": self.name, "statement": self.statement}
        if self.is_function:
            row |= {"entry_point": self.entry_point, "test_code": self.test_code}
            if self.test_setup:
                row["test_setup"] = self.test_setup
        else:
            row["sample_tests"] = [_test_json(t) for t in self.sample_tests]
            row["hidden_tests"] = [_test_json(t) for t in self.hidden_tests]
        optional = {
            "reference_solution": self.reference_solution,
            "rating": self.rating,
            "difficulty": self.difficulty,
            "tags": list(self.tags) or None,
            "time_limit_ms": self.time_limit_ms,
            "checker": self.checker,
        }
        return row | {k: v for k, v in optional.items() if v is not None}


def _test_json(test: StdioTest) -> dict[str, str]:
    return {"input": test.input, "output": test.output}


# -- reading ---------------------------------------------------------------------------------


# The longest JSONL line read (characters): a row this size is already far past any model's
# context; a longer one (or a file with no line breaks at all) is refused, not read into memory.
MAX_LINE_CHARS = 64 * 2**20


def check_data_file(path: Path) -> None:
    """Refuse (one line) what cannot be read as a data file without hanging or filling memory:
    a FIFO (no writer: the read would wait forever), a device (/dev/zero never ends,
    /dev/null is empty), a socket, a symlink loop."""
    try:
        mode = path.stat().st_mode
    except ValueError:  # a NUL byte in the name
        raise AscentError(f"{path!r}: not a usable path (a NUL byte); check it") from None
    except OSError as err:  # a symlink loop, a name too long, no permission
        raise AscentError(f"{path}: cannot use this path ({err.strerror}); check it") from None
    if not stat.S_ISREG(mode):
        kind = (
            "a FIFO"
            if stat.S_ISFIFO(mode)
            else "a device"
            if stat.S_ISCHR(mode) or stat.S_ISBLK(mode)
            else "a socket"
            if stat.S_ISSOCK(mode)
            else "not a regular file"
        )
        raise AscentError(f"{path}: {kind}, not a data file; point at a .jsonl or .parquet file")


def read_jsonl(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, row) for every non-blank line of a .jsonl or .jsonl.gz file, each line
    read with a bound (MAX_LINE_CHARS)."""
    check_data_file(path)
    opener = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rt", encoding="utf-8") as fh:
            for number, line in enumerate(iter(lambda: fh.readline(MAX_LINE_CHARS + 1), ""), 1):
                if len(line) > MAX_LINE_CHARS:
                    raise AscentError(
                        f"{path}:{number}: a line of more than {MAX_LINE_CHARS:,} characters "
                        "(no line break, or one huge row); one JSON object per line, each "
                        "shorter than that"
                    )
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                except json.JSONDecodeError as err:
                    raise AscentError(f"{path}:{number}: not valid JSON ({err.msg})") from None
                except (RecursionError, ValueError):  # ValueError: an integer of 4300+ digits
                    raise AscentError(
                        f"{path}:{number}: JSON nested too deeply or a number too long to read"
                    ) from None
                if not isinstance(row, dict):
                    raise AscentError(f"{path}:{number}: expected a JSON object per line")
                yield number, row
    except (OSError, EOFError, UnicodeDecodeError, zlib.error) as err:  # zlib: corrupt .gz
        raise AscentError(f"{path}: cannot read it as JSONL ({err})") from None


def detect_code_format(row: dict[str, Any]) -> str | None:
    """Which code format a row is in, from its fields; None when it is none of them."""
    if "statement" in row:
        return "code"
    if {"prompt", "entry_point", "test"} <= row.keys():
        return "humaneval"
    if {"content", "test"} <= row.keys():
        return "code_contests"
    return None


# How `ascent data clean` and `ascent data grade` read a row: `--kind`, and the prompt columns
# of a math row tried in order when no [data.columns] names them.
ROW_KINDS = ("auto", "math", "code")
MATH_PROMPTS = ("question", "problem", "prompt")


def check_row_kind(kind: str) -> None:
    if kind not in ROW_KINDS:
        raise AscentError(f"--kind {kind!r} is unknown; use math, code or auto (detect per row)")


def code_row(
    row: dict[str, Any], kind: str, where: str, default_id: str = ""
) -> tuple[str, CodeProblem] | None:
    """(format, problem) when `row` is to be read as code: `kind` code, or auto and its fields
    are a code format's; None for a math row. A row that cannot be is one line naming it
    (`where`); a row without an id gets `default_id` (unset: `where`)."""
    fmt = detect_code_format(row)
    if kind == "math" or (kind == "auto" and fmt is None):
        return None
    if fmt is None:
        fields = ", ".join(sorted(row)[:8]) or "none"
        raise AscentError(
            f"{where}: not a code problem (fields: {fields}); code rows are ascent's code schema "
            "(statement, hidden_tests, ...), HumanEval or code_contests rows"
        )
    try:
        return fmt, NORMALISERS[fmt](row, default_id or where)
    except RowError as err:
        raise AscentError(f"{where}: {err} (reading it as {fmt} format)") from None


def load_code_problems(path: str | Path, fmt: str = "auto", limit: int = 0) -> list[CodeProblem]:
    """The first `limit` problems (0: all) of a JSONL file in one of `CODE_FORMATS`."""
    path = Path(path)
    if fmt != "auto" and fmt not in CODE_FORMATS:
        raise AscentError(f"code format {fmt!r} is unknown; use auto or {', '.join(CODE_FORMATS)}")
    problems: list[CodeProblem] = []
    seen: dict[str, int] = {}
    for number, row in read_jsonl(path):
        if limit and len(problems) >= limit:
            break
        if fmt == "auto":
            fmt = detect_code_format(row) or _undetected(path, number, row)
        default_id = f"{path.name.split('.')[0]}:{number}"
        try:
            problem = NORMALISERS[fmt](row, default_id)
        except RowError as err:
            raise AscentError(f"{path}:{number}: {err} (reading it as {fmt} format)") from None
        if problem.id in seen:
            raise AscentError(
                f"{path}:{number}: id {problem.id!r} repeats line {seen[problem.id]}; "
                "give every problem its own id"
            )
        seen[problem.id] = number
        problems.append(problem)
    if not problems:
        raise AscentError(f"{path}: no problems in the file")
    return problems


def _undetected(path: Path, number: int, row: dict[str, Any]) -> str:
    fields = ", ".join(sorted(row)[:8]) or "none"
    raise AscentError(
        f"{path}:{number}: cannot tell the format from the fields ({fields}); use ascent's code "
        "schema (statement, hidden_tests, ...), HumanEval or code_contests rows, or set "
        "[eval] format"
    )


# -- normalisers: one row -> CodeProblem -----------------------------------------------------


def from_code_schema(row: dict[str, Any], default_id: str = "") -> CodeProblem:
    statement = _text(row, "statement")
    entry_point = _optional_text(row, "entry_point")
    common = {
        "id": _id(row.get("id"), default_id),
        "statement": statement,
        "reference_solution": _optional_text(row, "reference_solution"),
        "rating": _rating(row.get("rating")),
        "difficulty": _label(row.get("difficulty")),
        "tags": _tags(row.get("tags")),
        "time_limit_ms": _time_limit(row.get("time_limit_ms")),
        "name": str(row.get("name") or ""),
    }
    if entry_point is not None:
        if not entry_point.isidentifier():
            raise RowError(f"entry_point {entry_point!r} is not a function name")
        code = row.get("test_code", row.get("tests"))
        if not isinstance(code, str) or "check" not in code:
            raise RowError("with an entry_point, test_code must be code defining check(candidate)")
        setup = _optional_text(row, "test_setup")
        return CodeProblem(entry_point=entry_point, test_code=code, test_setup=setup, **common)
    hidden = row.get("hidden_tests", row.get("tests"))
    if hidden is None:
        raise RowError("no tests: give hidden_tests (or entry_point and test_code)")
    tests = _tests(hidden, "hidden_tests")
    if not tests:
        raise RowError("hidden_tests is empty; a problem needs at least one test")
    samples = _tests(row.get("sample_tests") or [], "sample_tests")
    checker = _optional_text(row, "checker")
    return CodeProblem(hidden_tests=tests, sample_tests=samples, checker=checker, **common)


def from_humaneval(row: dict[str, Any], default_id: str = "") -> CodeProblem:
    prompt = _text(row, "prompt")
    entry_point = _text(row, "entry_point")
    solution = row.get("canonical_solution")
    return CodeProblem(
        id=_id(row.get("task_id"), default_id),
        statement=prompt,
        entry_point=entry_point,
        test_code=_text(row, "test"),
        test_setup=prompt,
        reference_solution=prompt + solution if isinstance(solution, str) else None,
        name=entry_point,
    )


def from_code_contests(row: dict[str, Any], default_id: str = "") -> CodeProblem:
    statement = _text(row, "content")
    labels = row.get("labels") or {}
    if isinstance(labels, str):
        try:
            labels = json.loads(labels)
        except json.JSONDecodeError:
            raise RowError("labels is a string that is not JSON") from None
    if not isinstance(labels, dict):
        raise RowError("labels must be an object (difficulty, name, source)")
    tests = _tests(row.get("test"), "test")
    if not tests:
        raise RowError("test is empty; a problem needs at least one test")
    samples = tuple(t for t in tests if _shown_in(t, statement))
    name = str(labels.get("name") or row.get("name") or "").strip()
    rating = row.get("rating", row.get("cf_rating", labels.get("rating", labels.get("cf_rating"))))
    return CodeProblem(
        id=_id(name or row.get("id"), default_id),
        statement=statement,
        hidden_tests=tests,
        sample_tests=samples,
        rating=_rating(rating or None),  # code_contests writes 0 for "no rating"
        difficulty=_label(labels.get("difficulty", row.get("difficulty"))),
        tags=_tags(labels.get("tags", row.get("cf_tags"))),
        time_limit_ms=_contest_time_limit(row.get("time_limit")),
        name=name,
    )


NORMALISERS = {
    "code": from_code_schema,
    "humaneval": from_humaneval,
    "code_contests": from_code_contests,
}


def _shown_in(test: StdioTest, statement: str) -> bool:
    """A sample test: its input and output both appear in the statement."""
    want_in, want_out = test.input.strip(), test.output.strip()
    return bool(want_in and want_out) and want_in in statement and want_out in statement


# -- field checks ----------------------------------------------------------------------------


def _text(row: dict[str, Any], key: str) -> str:
    value = row.get(key)
    if not isinstance(value, str) or not value.strip():
        raise RowError(f"'{key}' must be a non-empty string")
    return value


def _optional_text(row: dict[str, Any], key: str) -> str | None:
    value = row.get(key)
    if value is None:
        return None
    if not isinstance(value, str):
        raise RowError(f"'{key}' must be a string")
    return value


def _id(value: Any, default: str) -> str:
    if value is None or value == "":
        return default
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise RowError(f"'id' must be a string or an integer (got {value!r})")
    return str(value)


def _tests(value: Any, key: str) -> tuple[StdioTest, ...]:
    try:
        return tuple(parse_stdio_tests(value, key))
    except AscentError as err:
        raise RowError(str(err)) from None


def _is_number(value: Any) -> bool:
    """An int or a finite float (JSON rows may hold NaN and Infinity); not a bool."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    return isinstance(value, int) or math.isfinite(value)


def _rating(value: Any) -> int | None:
    if value is None:
        return None
    if not _is_number(value) or value < 0:
        raise RowError(f"'rating' must be a non-negative number (got {value!r})")
    return int(value)


def _label(value: Any) -> str | None:
    if value is None or value == "":
        return None
    return str(value).strip()


def _tags(value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(t, str) for t in value):
        raise RowError("'tags' must be a list of strings")
    return tuple(value)


def _time_limit(value: Any) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise RowError(f"'time_limit_ms' must be a positive integer (got {value!r})")
    return value


def _contest_time_limit(value: Any) -> int | None:
    """code_contests' time_limit: {"seconds", "nanos"} or a number of seconds."""
    if value is None:
        return None
    if isinstance(value, dict):
        seconds, nanos = value.get("seconds") or 0, value.get("nanos") or 0
    else:
        seconds, nanos = value, 0
    total = None
    if _is_number(seconds) and _is_number(nanos):
        total = seconds * 1000 + nanos // 1_000_000
    if not _is_number(total) or total < 0:
        raise RowError(f"'time_limit' must be seconds >= 0 or {{seconds, nanos}} (got {value!r})")
    return int(total) or None


__all__ = [
    "CODE_FORMATS",
    "CodeProblem",
    "RowError",
    "detect_code_format",
    "from_code_contests",
    "from_code_schema",
    "from_humaneval",
    "load_code_problems",
    "read_jsonl",
]

"""Problems from data files: JSONL, Parquet, or a local Hugging Face `datasets` directory.

`[data.columns]` says which column holds the prompt, the answer and (optionally) an id; the
`extra` columns travel with each problem to the reward functions and the prompt template.
A missing column or an empty value is one line naming the file, the row and the fix. With
`[data] difficulty`, only the rows whose `difficulty` column (what `ascent data grade` writes)
is one of the chosen buckets are read.

    [data]
    path = "data/gsm8k.parquet"
    columns = {prompt = "question", answer = "answer", extra = ["level"]}
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from ascent.config.data import ColumnsSection
from ascent.config.grade import DIFFICULTIES
from ascent.data.bundled import resolve_data_path
from ascent.data.code_problems import check_data_file, read_jsonl
from ascent.data.problems import Problem
from ascent.errors import AscentError


def detect_format(path: Path, fmt: str) -> str:
    """jsonl, parquet or datasets, from `fmt` or (auto) from the suffix / a directory."""
    if fmt != "auto":
        return fmt
    if path.is_dir():
        return "datasets"
    if path.name.endswith((".jsonl", ".jsonl.gz", ".json")):
        return "jsonl"
    if path.suffix == ".parquet":
        return "parquet"
    raise AscentError(
        f"{path}: cannot tell the format from the name; use .jsonl, .parquet or a "
        "datasets.save_to_disk directory, or set [data] format"
    )


def _parquet_rows(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    check_data_file(path)
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise AscentError(
            f"{path}: reading Parquet needs pyarrow; pip install 'ascent[data]'"
        ) from None
    try:
        table = pq.read_table(path)
    except Exception as err:  # pyarrow raises several unrelated types for a bad file
        raise AscentError(f"{path}: cannot read it as Parquet ({err})") from None
    yield from enumerate(table.to_pylist(), 1)


def _dataset_rows(path: Path, split: str) -> Iterator[tuple[int, dict[str, Any]]]:
    try:
        import datasets
    except ImportError:
        raise AscentError(
            f"{path}: reading a datasets directory needs datasets; pip install 'ascent[data]'"
        ) from None
    try:
        loaded = datasets.load_from_disk(str(path))
    except Exception as err:  # datasets raises several unrelated types for a broken directory
        raise AscentError(
            f"{path}: not a datasets.save_to_disk directory ({type(err).__name__}: {err})"
        ) from None
    if isinstance(loaded, datasets.DatasetDict):
        if split not in loaded:
            raise AscentError(
                f"{path}: no split '{split}' (splits: {', '.join(loaded)}); set [data] split "
                "or eval_split"
            )
        loaded = loaded[split]
    yield from enumerate(loaded, 1)


def _hub_rows(spec: str, split: str) -> Iterator[tuple[int, dict[str, Any]]]:
    """Rows of `datasets.load_dataset(spec, split=split)`: a hub id, or a local folder of
    data files (which is how it is tested here, with no hub to reach)."""
    try:
        import datasets
    except ImportError:
        raise AscentError(
            f"{spec}: loading a hub data set needs datasets; pip install 'ascent[data]'"
        ) from None
    try:
        loaded = datasets.load_dataset(spec, split=split)
    except Exception as err:  # network, unknown id, unknown split: many unrelated types
        first = (str(err).strip().splitlines() or [type(err).__name__])[0][:200]
        raise AscentError(
            f"{spec}: datasets.load_dataset failed ({type(err).__name__}: {first}); check the "
            "id and [data] split, or download the set and point [data] path at the file"
        ) from None
    yield from enumerate(loaded, 1)


DIFFICULTY_COLUMN = "difficulty"  # the column `ascent data grade` writes

HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


def read_rows(path: Path, fmt: str, split: str) -> Iterator[tuple[int, dict[str, Any]]]:
    """(row number, row) of a data file, row numbers from 1 (JSONL: line numbers)."""
    if fmt == "hub":
        return _hub_rows(str(path), split)
    try:
        found = path.exists()
    except OSError as err:  # e.g. a file name too long
        raise AscentError(
            f"{path}: cannot use this path ({err.strerror}); check [data] path"
        ) from None
    if not found and fmt == "auto" and HUB_ID.match(str(path)) and not Path(path).suffix:
        return _hub_rows(str(path), split)
    if not found:
        raise AscentError(f"{path}: no such file or directory; check [data] path")
    kind = detect_format(path, fmt)
    if kind == "jsonl":
        return read_jsonl(path)
    if kind == "parquet":
        return _parquet_rows(path)
    return _dataset_rows(path, split)


def _value(row: dict[str, Any], column: str, role: str, where: str) -> Any:
    if column not in row:
        have = ", ".join(sorted(row)[:10]) or "none"
        raise AscentError(
            f"{where}: no column '{column}' ([data.columns] {role}); the row has: {have}"
        )
    return row[column]


def _text(row: dict[str, Any], column: str, role: str, where: str) -> str:
    value = _value(row, column, role, where)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        value = str(value)
    if not isinstance(value, str) or not value.strip():
        raise AscentError(
            f"{where}: column '{column}' ([data.columns] {role}) must be non-empty text, "
            f"got {value!r}"
        )
    return value


def row_to_problem(row: dict[str, Any], columns: ColumnsSection, where: str) -> Problem:
    prompt = _text(row, columns.prompt, "prompt", where)
    answer = _text(row, columns.answer, "answer", where)
    key = prompt if columns.id is None else _text(row, columns.id, "id", where)
    extra = {name: _value(row, name, "extra", where) for name in columns.extra}
    return Problem(key=key, prompt=prompt, answer=answer, columns=extra)


def load_problems(
    path: str | Path,
    fmt: str,
    split: str,
    columns: ColumnsSection,
    difficulty: Sequence[str] | None = None,
) -> list[Problem]:
    """Every row of a data file as a `Problem`, in file order (`ascent:NAME`: a bundled set);
    with `difficulty`, only the rows whose graded difficulty is one of those."""
    path = resolve_data_path(str(path))
    rows = read_rows(path, fmt, split)
    if difficulty is not None:
        rows = _graded(rows, path, difficulty)
    problems = [row_to_problem(row, columns, f"{path}:{n}") for n, row in rows]
    if not problems:
        raise AscentError(f"{path}: no rows; check [data] path (and split)")
    return problems


def _graded(
    rows: Iterable[tuple[int, dict[str, Any]]], path: Path, keep: Sequence[str]
) -> Iterator[tuple[int, dict[str, Any]]]:
    """The rows whose `difficulty` (written by `ascent data grade`) is in `keep`."""
    seen: Counter[str] = Counter()
    for n, row in rows:
        label = row.get(DIFFICULTY_COLUMN)
        if label not in DIFFICULTIES:
            found = "has no difficulty column" if label is None else f"has difficulty {label!r}"
            raise AscentError(
                f"{path}:{n}: the row {found}, and [data] difficulty keeps rows by their "
                f"grade ({', '.join(DIFFICULTIES)}); grade it first with ascent data grade"
            )
        seen[label] += 1
        if label in keep:
            yield n, row
    if not any(seen[label] for label in keep):
        graded = ", ".join(f"{seen[label]} {label}" for label in DIFFICULTIES)
        raise AscentError(
            f"{path}: no {' or '.join(keep)} rows ({graded}); [data] difficulty leaves nothing, "
            "choose other buckets"
        )

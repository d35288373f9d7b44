"""Fuzzing the data loaders: any JSONL line, any bytes, any column mapping either loads or fails
with one line naming the file (an `AscentError`), never with a traceback.

The entry points are the ones `[data]` reaches: `load_task` (a run's training and held-out
problems) and `load_problems` under it, which read JSONL, Parquet or a `datasets` directory;
and `load_code_problems`, which reads code problems in any of its formats. Every bug the fuzzer
found has a plain test at the end of the file with the input that triggered it.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ascent.config.data import ColumnsSection, DataSection
from ascent.data import load_task
from ascent.data.code_problems import CODE_FORMATS, load_code_problems
from ascent.data.files import load_problems
from ascent.errors import AscentError, ConfigError
from tests.fuzzing import (
    FEW,
    FUZZ,
    KEYS,
    encode_line,
    json_rows,
    json_values,
    jsonl_files,
    one_line_or_success,
    write,
)

column_names = st.sampled_from(KEYS) | st.text(max_size=6)
columns = st.builds(
    ColumnsSection,
    prompt=column_names,
    answer=column_names,
    id=st.none() | column_names,
    extra=st.lists(column_names, max_size=3),
)


# -- properties ------------------------------------------------------------------------------


@FUZZ
@given(jsonl_files(), columns, st.sampled_from(["auto", "auto", "jsonl", "parquet"]))
def test_random_jsonl_as_data_path_loads_or_fails_in_one_line(file, cols, fmt):
    name, data = file
    with tempfile.TemporaryDirectory() as tmp:
        path = write(Path(tmp), name, data)
        one_line_or_success(lambda: load_problems(path, fmt, "train", cols), str(path))


BAD_TEMPLATES = [
    "{prompt} {level}", "{prompt}{0}", "{prompt} {prompt.x}", "{prompt} {prompt[9]}",
    "{prompt} {prompt:d}", "{prompt} {prompt!z}", "{prompt} {", "{prompt} }",
    "{prompt} {q:{level}}", "{prompt} {level.real}",
]  # fmt: skip
TEMPLATES = st.one_of(
    st.just("{prompt}"),
    st.builds("{}{{prompt}}{}".format, st.text(max_size=8), st.text(max_size=8)),
    st.sampled_from(BAD_TEMPLATES),
)


@FUZZ
@given(
    st.lists(json_rows, min_size=1, max_size=8),
    columns,
    st.integers(1, 4),
    st.none() | st.integers(1, 3),
    TEMPLATES,
)
def test_random_rows_through_load_task_load_or_fail_in_one_line(
    rows, cols, eval_size, train_size, template
):
    with tempfile.TemporaryDirectory() as tmp:
        path = write(Path(tmp), "rows.jsonl", b"\n".join(map(encode_line, rows)))
        cfg = DataSection(
            path=str(path),
            columns=cols,
            eval_size=eval_size,
            train_size=train_size,
            prompt_template=template,
        )
        one_line_or_success(lambda: load_task(cfg, seed=0))


@FUZZ
@given(jsonl_files(), st.sampled_from(["auto", "auto", *CODE_FORMATS]), st.integers(0, 3))
def test_random_code_rows_load_or_fail_in_one_line(file, fmt, limit):
    name, data = file
    with tempfile.TemporaryDirectory() as tmp:
        path = write(Path(tmp), name, data)
        one_line_or_success(lambda: load_code_problems(path, fmt, limit), str(path))


@st.composite
def parquet_tables(draw):
    pa = pytest.importorskip("pyarrow")
    kinds = {
        "int": (pa.int64(), st.integers(-(2**63), 2**63 - 1)),
        "float": (pa.float64(), st.floats(allow_nan=True, allow_infinity=True)),
        "str": (pa.string(), st.text(max_size=8)),
        "bool": (pa.bool_(), st.booleans()),
        "bytes": (pa.binary(), st.binary(max_size=8)),
        "list": (pa.list_(pa.int64()), st.lists(st.integers(-5, 5), max_size=3)),
        "struct": (
            pa.struct([("input", pa.string())]),
            st.fixed_dictionaries({"input": st.text(max_size=4)}),
        ),
        "date": (pa.date32(), st.dates()),
    }
    n = draw(st.integers(0, 4))
    arrays = {}
    for name in draw(st.lists(column_names, unique=True, min_size=1, max_size=4)):
        arrow_type, cells = kinds[draw(st.sampled_from(sorted(kinds)))]
        arrays[name] = pa.array(
            draw(st.lists(st.none() | cells, min_size=n, max_size=n)), arrow_type
        )
    return pa.table(arrays)


@FEW
@given(parquet_tables(), columns)
def test_random_parquet_tables_load_or_fail_in_one_line(table, cols):
    import pyarrow.parquet as pq

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "t.parquet"
        pq.write_table(table, path)
        one_line_or_success(lambda: load_problems(path, "auto", "train", cols), str(path))


DATASET_FILES = [
    "state.json",
    "dataset_info.json",
    "dataset_dict.json",
    "data-00000-of-00001.arrow",
]


@FEW
@given(
    st.dictionaries(
        st.sampled_from(DATASET_FILES),
        st.binary(max_size=40) | json_values.map(lambda v: json.dumps(v).encode()),
        max_size=3,
    )
)
def test_random_files_in_a_datasets_directory_load_or_fail_in_one_line(files):
    pytest.importorskip("datasets")
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "saved"
        folder.mkdir()
        for name, data in files.items():
            write(folder, name, data)
        cols = ColumnsSection()
        one_line_or_success(lambda: load_problems(folder, "auto", "train", cols), str(folder))


# Paths as a user might mistype them; none that could name an endless device file.
path_strings = st.text(max_size=40).filter(lambda s: not any(w in s for w in ("dev", "proc")))


@FUZZ
@given(path_strings, st.sampled_from(["auto", "jsonl", "parquet", "datasets"]))
def test_random_data_path_strings_load_or_fail_in_one_line(name, fmt):
    # Relative names are looked up from the current directory: what a user's typo would do.
    one_line_or_success(lambda: load_problems(name, fmt, "train", ColumnsSection()))


# -- regressions: what the fuzzer found ------------------------------------------------------


def load_error(call) -> str:
    with pytest.raises(AscentError) as caught:
        call()
    message = str(caught.value)
    assert message.splitlines() == [message], message
    return message


def test_corrupt_gzip_is_a_one_line_error(tmp_path):
    # A gzip header, then a deflate block zlib rejects: zlib.error, which is not an OSError.
    data = b"\x1f\x8b\x08\x00\x8a*\x11k\x02\xff\xfc" + b"\x00" * 9
    path = write(tmp_path, "p.jsonl.gz", data)
    message = load_error(lambda: load_problems(path, "auto", "train", ColumnsSection()))
    assert message.startswith(f"{path}: cannot read it as JSONL (")


@pytest.mark.parametrize("line", ["[" * 5000, '{"a": ' * 5000, '{"rating": ' + "9" * 5000 + "}"])
def test_json_too_deep_or_too_long_is_a_one_line_error(tmp_path, line):
    path = write(tmp_path, "p.jsonl", b'{"prompt": "q", "answer": "a"}\n' + line.encode())
    message = load_error(lambda: load_problems(path, "auto", "train", ColumnsSection()))
    assert message == f"{path}:2: JSON nested too deeply or a number too long to read"


@pytest.mark.parametrize("rating", ["NaN", "Infinity", "-Infinity"])
def test_code_row_rating_nan_or_infinity_is_refused(tmp_path, rating):
    line = f'{{"statement": "s", "tests": [{{"input": "", "output": ""}}], "rating": {rating}}}'
    path = write(tmp_path, "p.jsonl", line.encode())
    message = load_error(lambda: load_code_problems(path))
    assert f"{path}:1: 'rating' must be a non-negative number (got" in message


@pytest.mark.parametrize(
    "time_limit",
    ['{"seconds": "2"}', '{"seconds": [1]}', '{"nanos": NaN}', "Infinity", "-1", "1e308"],
)
def test_code_contests_time_limit_of_the_wrong_kind_is_refused(tmp_path, time_limit):
    line = (
        f'{{"content": "s", "test": [{{"input": "", "output": ""}}], "time_limit": {time_limit}}}'
    )
    path = write(tmp_path, "p.jsonl", line.encode())
    message = load_error(lambda: load_code_problems(path))
    assert f"{path}:1: 'time_limit' must be seconds >= 0 or {{seconds, nanos}}" in message


def test_code_contests_time_limit_still_reads_seconds_and_nanos(tmp_path):
    line = '{"content": "s", "test": [{"input": "", "output": ""}], '
    rows = [line + '"time_limit": {"seconds": 2, "nanos": 500000000}}', line + '"time_limit": 1.5}']
    path = write(tmp_path, "p.jsonl", "\n".join(rows).encode())
    assert [p.time_limit_ms for p in load_code_problems(path)] == [2500, 1500]


def test_a_column_name_with_a_newline_is_named_on_one_line(tmp_path):
    path = write(tmp_path, "p.jsonl", b'{"key\\nline": "x"}\n')
    cols = ColumnsSection(prompt="a\nb")
    message = load_error(lambda: load_problems(path, "auto", "train", cols))
    assert (
        message == f"{path}:1: no column 'a\\nb' ([data.columns] prompt); the row has: key\\nline"
    )


@pytest.mark.parametrize("template", ["{prompt} {prompt.x}", "{prompt} {prompt:d}"])
def test_prompt_template_that_cannot_be_filled_is_a_config_error(tmp_path, template):
    path = write(tmp_path, "p.jsonl", b'{"q": "1+1", "a": "2"}\n{"q": "2+2", "a": "4"}\n')
    cols = {"prompt": "q", "answer": "a"}
    cfg = DataSection(path=str(path), columns=cols, eval_size=1, prompt_template=template)
    with pytest.raises(ConfigError, match=r"^\[data\] prompt_template .* cannot be filled in"):
        load_task(cfg, seed=0)


def test_broken_datasets_directory_is_a_one_line_error(tmp_path):
    pytest.importorskip("datasets")
    folder = tmp_path / "saved"
    folder.mkdir()
    write(folder, "state.json", b"{}")  # a KeyError inside datasets
    write(folder, "dataset_info.json", b"{}")
    message = load_error(lambda: load_problems(folder, "auto", "train", ColumnsSection()))
    assert message.startswith(f"{folder}: not a datasets.save_to_disk directory (")


def test_data_path_naming_no_users_home_is_a_one_line_error():
    message = load_error(
        lambda: load_problems("~nobody_ascent_fuzz/x.jsonl", "auto", "train", ColumnsSection())
    )
    assert message == (
        "~nobody_ascent_fuzz/x.jsonl: no home directory for '~nobody_ascent_fuzz'; "
        "write the path out"
    )


def test_data_path_too_long_for_the_file_system_is_a_one_line_error(tmp_path):
    path = tmp_path / ("a" * 300 + ".jsonl")
    message = load_error(lambda: load_problems(path, "auto", "train", ColumnsSection()))
    assert message == f"{path}: cannot use this path (File name too long); check [data] path"


def test_a_home_path_with_a_nul_character_is_a_one_line_error():
    # The fuzzer's '~\x00': expanduser looked the user up and raised ValueError.
    message = load_error(lambda: load_problems("~\x00", "auto", "train", ColumnsSection()))
    assert "NUL character" in message

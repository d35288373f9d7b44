"""Problems from data files: JSONL, Parquet and `datasets` directories, with a column mapping,
a validation split and deterministic shuffling."""

from __future__ import annotations

import json

import pytest

from ascent.config.data import ColumnsSection, DataSection
from ascent.configfile import load_config
from ascent.data import load_task
from ascent.data.files import load_problems
from ascent.errors import AscentError, ConfigError

ROWS = [{"q": f"{i}+{i}=", "a": str(2 * i), "level": i % 3, "uid": f"p{i}"} for i in range(30)]


def write_jsonl(path, rows=ROWS):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def data(path, **kw) -> DataSection:
    columns = {"prompt": "q", "answer": "a", "extra": ["level"], **kw.pop("columns", {})}
    return DataSection(path=str(path), eval_size=5, columns=columns, **kw)


def test_jsonl_rows_become_problems_with_the_mapped_columns(tmp_path):
    task = load_task(data(write_jsonl(tmp_path / "p.jsonl")), seed=0)
    assert len(task.eval) == 5 and len(task.train) == 25
    by_prompt = {p.prompt: p for p in task.train + task.eval}
    assert by_prompt["7+7="].answer == "14" and by_prompt["7+7="].columns == {"level": 1}
    assert {p.key for p in task.train}.isdisjoint({p.key for p in task.eval})


def test_parquet_and_datasets_directory_load_the_same_problems(tmp_path):
    datasets = pytest.importorskip("datasets")
    jsonl = load_task(data(write_jsonl(tmp_path / "p.jsonl")), seed=3)
    table = datasets.Dataset.from_list(ROWS)
    table.to_parquet(str(tmp_path / "p.parquet"))
    table.save_to_disk(str(tmp_path / "saved"))
    datasets.DatasetDict({"train": table}).save_to_disk(str(tmp_path / "dict"))
    for path in ("p.parquet", "saved", "dict"):
        assert load_task(data(tmp_path / path), seed=3) == jsonl, path


def test_validation_split_from_its_own_file_or_split(tmp_path):
    datasets = pytest.importorskip("datasets")
    train = write_jsonl(tmp_path / "train.jsonl", ROWS[:20])
    held = write_jsonl(tmp_path / "val.jsonl", ROWS[18:])  # overlaps train on p18, p19
    task = load_task(data(train, eval_path=str(held), columns={"id": "uid"}), seed=0)
    held_keys = {p.key for p in task.eval}
    assert len(held_keys) == 5 and held_keys <= {f"p{i}" for i in range(18, 30)}
    assert {p.key for p in task.train} == {f"p{i}" for i in range(20)} - held_keys
    part = datasets.Dataset.from_list
    splits = datasets.DatasetDict({"train": part(ROWS[:20]), "test": part(ROWS[20:])})
    splits.save_to_disk(str(tmp_path / "dd"))
    task = load_task(data(tmp_path / "dd", eval_split="test"), seed=0)
    assert len(task.train) == 20 and {p.prompt for p in task.eval} <= {r["q"] for r in ROWS[20:]}


def test_shuffling_is_deterministic_and_the_held_out_set_ignores_the_run_seed(tmp_path):
    path = write_jsonl(tmp_path / "p.jsonl")
    a, b, c = (load_task(data(path), seed=s) for s in (1, 1, 2))
    assert a == b
    assert [p.key for p in a.train] != [p.key for p in c.train]
    assert a.eval == c.eval
    capped = load_task(data(path, train_size=7), seed=1)
    assert capped.train == a.train[:7]


@pytest.mark.parametrize(
    ("columns", "message"),
    [
        ({"prompt": "question"}, r"p.jsonl:1: no column 'question' \(\[data.columns\] prompt\); "
         "the row has: a, level, q, uid"),
        ({"answer": "level", "extra": []}, None),  # numbers are accepted as answers
        ({"extra": ["missing"]}, r"no column 'missing' \(\[data.columns\] extra\)"),
    ],
)  # fmt: skip
def test_a_column_mapping_error_is_one_line_naming_file_row_and_column(tmp_path, columns, message):
    cfg = data(write_jsonl(tmp_path / "p.jsonl"), columns=columns)
    if message is None:
        assert load_task(cfg, seed=0).train[0].answer.isdigit()
        return
    with pytest.raises(ConfigError, match=message) as err:
        load_task(cfg, seed=0)
    assert "\n" not in str(err.value)


def test_empty_values_and_too_small_files_are_refused(tmp_path):
    rows = [*ROWS[:3], {"q": "", "a": "1", "level": 0, "uid": "x"}]
    with pytest.raises(ConfigError, match=r"p.jsonl:4: column 'q' .* must be non-empty text"):
        load_task(data(write_jsonl(tmp_path / "p.jsonl", rows)), seed=0)
    with pytest.raises(ConfigError, match="leaves none to train on; lower eval_size"):
        load_task(data(write_jsonl(tmp_path / "small.jsonl", ROWS[:5])), seed=0)


def test_file_settings_without_a_file_and_a_task_beside_a_file_are_refused():
    with pytest.raises(ConfigError, match=r"\[data\] eval_path: only data files use it"):
        load_config(None, ['data.eval_path="v.jsonl"'])
    with pytest.raises(ConfigError, match="task: problems come from path"):
        load_config(None, ['data.path="p.jsonl"', 'data.task="countdown"'])


def test_format_hub_loads_through_datasets_load_dataset(tmp_path):
    # The hub is unreachable here; load_dataset takes a local folder of data files the same way.
    folder = tmp_path / "gsm8k-like"
    folder.mkdir()
    write_jsonl(folder / "train.jsonl", [{"question": "1+1?", "answer": "2"}] * 3)
    problems = load_problems(folder, "hub", "train", ColumnsSection(prompt="question"))
    assert [p.answer for p in problems] == ["2", "2", "2"]
    with pytest.raises(AscentError, match=r"load_dataset failed .*check the id and \[data\]"):
        load_problems(folder, "hub", "test", ColumnsSection(prompt="question"))


def test_a_missing_path_shaped_like_a_hub_id_is_loaded_from_the_hub(monkeypatch):
    import datasets

    asked = []
    rows = [{"question": "2+2?", "answer": "4"}]
    monkeypatch.setattr(datasets, "load_dataset", lambda spec, split: asked.append(spec) or rows)
    problems = load_problems("openai/gsm8k", "auto", "test", ColumnsSection(prompt="question"))
    assert asked == ["openai/gsm8k"] and problems[0].answer == "4"
    with pytest.raises(AscentError, match="no such file"):  # a file name is never a hub id
        load_problems("data/gsm8k.jsonl", "auto", "test", ColumnsSection(prompt="question"))

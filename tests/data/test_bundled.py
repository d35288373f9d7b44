"""The bundled data sets: found inside the package, named `ascent:NAME` in configs."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from ascent.config.data import ColumnsSection
from ascent.data.bundled import BUNDLED, bundled_dir, bundled_path
from ascent.data.files import load_problems
from ascent.errors import AscentError, ConfigError
from ascent.evaluation.problem_set import load_problem_set, resolve_problems_path

PROJECT = Path(__file__).resolve().parents[2]


def count_rows(path: Path) -> int:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as fh:
        return sum(1 for line in fh if line.strip())


def test_every_bundled_set_is_in_the_package_with_its_licence():
    sizes = {name: count_rows(bundled_path(name)) for name in BUNDLED}
    assert sizes == {
        "gsm8k_test": 1319,
        "humaneval": 164,
        "code_contests_sample": 20,
        "code_contests_rated": 20,
    }
    for name in ("gsm8k", "humaneval", "code_contests_sample"):
        assert (bundled_dir() / f"LICENSE.{name}").stat().st_size > 500


def test_bundled_names_resolve_for_eval_problems_without_any_path():
    path = resolve_problems_path("ascent:humaneval", config_source=None)
    problems = load_problem_set(path).problems
    assert len(problems) == 164 and problems[0].id == "HumanEval/0"


def test_a_data_file_can_be_a_bundled_set():
    rows = load_problems("ascent:gsm8k_test", "auto", "train", ColumnsSection(prompt="question"))
    first = json.loads((bundled_dir() / "gsm8k_test.jsonl").read_text().splitlines()[0])
    assert len(rows) == 1319 and rows[0].prompt == first["question"]


def test_an_unknown_bundled_name_lists_the_known_ones_in_one_line():
    with pytest.raises(ConfigError) as err:
        resolve_problems_path("ascent:gsm9k", config_source=None)
    message = str(err.value)
    assert "\n" not in message and "ascent:gsm8k_test" in message and "gsm9k" in message
    with pytest.raises(AscentError, match="ascent:humaneval"):
        bundled_path("mbpp")


def test_nothing_in_the_repository_reads_data_from_beside_it():
    # A user's clone has nothing beside it; examples, code and tests must not look there.
    offenders = []
    for folder in ("ascent", "examples", "tests", "benchmarks", "scripts"):
        for path in (PROJECT / folder).rglob("*"):
            readable = path.suffix in {".py", ".toml", ".sh", ".md"} and path != Path(__file__)
            if readable and "shared/data" in path.read_text(encoding="utf-8"):
                offenders.append(str(path.relative_to(PROJECT)))
    assert offenders == []

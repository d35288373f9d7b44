"""`ascent data grade` and `[data] difficulty`: addition problems with 1-, 2- and 3-digit operands
graded by the built-in warm-started model under the default recipe's prompts and reward, a run
that then trains only on the chosen buckets, and a scripted API role whose pass rates are exact.

What the tiny model really does (k = 16 at the recipe's temperature 1.0, four runs): 2-digit
operands, the size it was warm-started on, mean pass rate 0.19-0.21 (a third medium, the rest
hard); 1-digit operands, zero-padded as in training, 0.08-0.09 (few medium: few of its training
sums had two small operands); 3-digit operands, a length it never saw, 0.0 (all hard). At k = 8
the two smaller sizes are 0.05-0.14 apart from run to run, too close to order reliably; k = 16
keeps them 0.11 apart. The model's skill follows the operand size it learned, not the size of
the numbers: the brief's guess (1-digit sums easiest) does not hold for it.
"""

from __future__ import annotations

import contextlib
import io
import json
import random
import threading
from collections import Counter
from pathlib import Path

import pytest
import torch

import ascent.recipes
from ascent.config.data import DataSection
from ascent.config.grade import GradeSection
from ascent.configfile import load_config
from ascent.data import load_task
from ascent.errors import ConfigError
from ascent.evaluation.grade import _graded_row, bucket
from tests.api.scripted_server import Reply, ScriptedServer, models_body, ok

RECIPE = Path(ascent.recipes.__file__).with_name("default.toml")  # ascent:tiny-arithmetic
K = 16  # samples per problem (see the docstring for why not 8)


def addition_rows(per_size: int = 30) -> list[dict]:
    """Distinct sums, `per_size` each with 1-, 2- and 3-digit operands, written as the built-in
    task writes them (operands zero-padded to at least 2 digits: `07+45=`)."""
    rng, rows = random.Random(0), []
    for digits in (1, 2, 3):
        low, high, width = (
            (0 if digits == 1 else 10 ** (digits - 1)),
            10**digits - 1,
            max(digits, 2),
        )
        seen: set[tuple[int, int]] = set()
        while len(seen) < per_size:
            a, b = rng.randint(low, high), rng.randint(low, high)
            if (a, b) not in seen:
                seen.add((a, b))
                question = f"{a:0{width}d}+{b:0{width}d}="
                rows.append({"question": question, "answer": str(a + b), "digits": digits})
    return rows


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def grade_cli(*args: str) -> tuple[int, str, str]:
    """`ascent data grade ARGS` in-process: exit code, stdout, stderr."""
    from ascent.cli import main

    out, err, code = io.StringIO(), io.StringIO(), 0
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            main(["data", "grade", *args])
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
    return code, out.getvalue(), err.getvalue()


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """The addition file graded once by the tiny model: (folder, graded rows, stdout)."""
    folder = tmp_path_factory.mktemp("grade")
    source = write_jsonl(folder / "addition.jsonl", addition_rows())
    # --k overrides [grade] k, whichever way the config set it
    args = ["--policy", str(RECIPE), "--set", "grade.k=3", "--k", str(K)]
    code, stdout, stderr = grade_cli(str(source), "--out", str(folder / "graded.jsonl"), *args)
    assert code == 0, stderr
    return folder, read_jsonl(folder / "graded.jsonl"), stdout


def test_the_tiny_model_grades_follow_the_operand_size_it_learned(graded):
    _, rows, _ = graded
    by_size = {d: [r for r in rows if r["digits"] == d] for d in (1, 2, 3)}
    mean = {d: sum(r["pass_rate"] for r in group) / len(group) for d, group in by_size.items()}
    assert mean[2] > mean[1] > mean[3]  # learned size > padded small operands > unseen length
    assert mean[2] >= 0.12 and mean[3] <= 0.02
    assert mean[2] - mean[1] >= 0.04
    assert all(r["difficulty"] == "hard" for r in by_size[3])
    buckets = Counter(r["difficulty"] for r in rows)
    assert buckets["medium"] >= 5 and buckets["hard"] >= 30  # not degenerate
    medium = Counter(r["digits"] for r in rows if r["difficulty"] == "medium")
    assert medium[2] > medium[1] and medium[3] == 0


def test_every_row_keeps_its_columns_and_gets_a_pass_rate_and_its_bucket(graded):
    _, rows, _ = graded
    assert [{k: r[k] for k in ("question", "answer", "digits")} for r in rows] == addition_rows()
    thresholds = GradeSection()
    for row in rows:
        assert set(row) == {"question", "answer", "digits", "pass_rate", "difficulty"}
        assert row["pass_rate"] * K == round(row["pass_rate"] * K)  # correct samples / k
        assert row["difficulty"] == bucket(thresholds, row["pass_rate"])


def test_the_table_comes_first_and_the_last_line_is_the_json_summary(graded):
    folder, rows, stdout = graded
    counts = Counter(r["difficulty"] for r in rows)
    summary = json.loads(stdout.strip().splitlines()[-1])
    assert summary == {"graded": 90, **{d: counts[d] for d in ("easy", "medium", "hard")}, "k": K}
    assert f"data grade (k = {K})" in stdout and "mean pass rate" in stdout
    assert f"graded: {folder / 'graded.jsonl'}" in stdout


def run_config(tmp_path: Path, graded_file: Path, difficulty: list[str]) -> Path:
    text = RECIPE.read_text().replace('task = "arithmetic"', f'path = "{graded_file}"')
    text = text.replace("eval_size = 400", f"eval_size = 8\ndifficulty = {json.dumps(difficulty)}")
    text = text.replace("[data]", '[data.columns]\nprompt = "question"\n\n[data]', 1)
    path = tmp_path / "graded-run.toml"
    path.write_text(text.replace("[run]", f'[run]\noutput_dir = "{tmp_path}"', 1))
    return path


def test_a_run_with_data_difficulty_trains_and_validates_only_on_the_chosen_buckets(
    graded, tmp_path
):
    from ascent.train.llm_setup import build_run

    folder, rows, _ = graded
    grade_of = {r["question"]: r["difficulty"] for r in rows}
    chosen = ["medium", "hard"]
    cfg = load_config(run_config(tmp_path, folder / "graded.jsonl", chosen))
    run = build_run(cfg, torch.device("cpu"))
    train, held = run.task.train, run.task.eval
    assert {grade_of[p.prompt] for p in train} <= set(chosen)
    assert {grade_of[p.prompt] for p in held} <= set(chosen)
    kept = {q for q, d in grade_of.items() if d in chosen}
    assert {p.prompt for p in train} | {p.prompt for p in held} == kept
    drawn = run.rollouts.sampler.draw(2 * len(train))  # two epochs of what the run trains on
    assert {grade_of[d.problem.prompt] for d in drawn} <= set(chosen)


def test_one_bucket_leaves_every_other_row_out_of_both_splits(graded):
    folder, rows, _ = graded
    hard = {r["question"] for r in rows if r["difficulty"] == "hard"}
    cfg = DataSection(
        path=str(folder / "graded.jsonl"),
        columns={"prompt": "question"},
        difficulty=["hard"],
        eval_size=5,
    )
    task = load_task(cfg, seed=0)
    assert len(task.eval) == 5
    assert {p.prompt for p in task.train} | {p.prompt for p in task.eval} == hard


def test_an_ungraded_file_is_refused_with_the_fix(tmp_path):
    plain = write_jsonl(tmp_path / "plain.jsonl", addition_rows(4))
    cfg = DataSection(path=str(plain), columns={"prompt": "question"}, difficulty=["hard"])
    with pytest.raises(ConfigError, match="grade it first with ascent data grade") as err:
        load_task(cfg, seed=0)
    assert "plain.jsonl:1: the row has no difficulty column" in str(err.value)
    labelled = write_jsonl(
        tmp_path / "labelled.jsonl", [{**addition_rows(1)[0], "difficulty": "A"}]
    )
    cfg = cfg.model_copy(update={"path": str(labelled)})
    with pytest.raises(ConfigError, match="has difficulty 'A'"):
        load_task(cfg, seed=0)


def test_buckets_that_keep_nothing_say_what_the_file_holds(tmp_path):
    rows = [{**r, "difficulty": "hard"} for r in addition_rows(4)]
    path = write_jsonl(tmp_path / "g.jsonl", rows)
    cfg = DataSection(path=str(path), columns={"prompt": "question"}, difficulty=["easy"])
    with pytest.raises(ConfigError, match=r"no easy rows \(0 easy, 0 medium, 12 hard\)"):
        load_task(cfg, seed=0)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ('difficulty = ["hard"]', "[data] difficulty: built-in tasks have no graded rows"),
        ('path = "g.jsonl"\ndifficulty = ["tough"]', "'easy', 'medium' or 'hard'"),
        ('path = "g.jsonl"\ndifficulty = ["hard", "hard"]', "lists a bucket twice"),
    ],
)
def test_bad_difficulty_settings_fail_at_load_time_in_one_line(tmp_path, data, message):
    path = tmp_path / "c.toml"
    path.write_text(f"[data]\n{data}\n")
    with pytest.raises(ConfigError, match=message.replace("[", r"\[")) as err:
        load_config(path)
    assert len(str(err.value).splitlines()) == 1


def test_thresholds_cut_the_pass_rate_into_quarters_and_must_be_ordered():
    grade = GradeSection()
    assert [bucket(grade, c / 8) for c in range(9)] == ["hard"] * 2 + ["medium"] * 4 + ["easy"] * 3
    assert bucket(GradeSection(hard_below=0.5, easy_at_least=0.5), 0.5) == "easy"
    with pytest.raises(ValueError, match=r"hard_below .* is above easy_at_least"):
        GradeSection(hard_below=0.8)


def test_a_row_s_own_difficulty_label_is_kept_beside_the_grade():
    row = {"statement": "...", "difficulty": "B"}
    assert _graded_row(row, 0.5, "medium") == {
        "statement": "...",
        "difficulty": "medium",
        "source_difficulty": "B",
        "pass_rate": 0.5,
    }
    regraded = _graded_row({"difficulty": "medium", "source_difficulty": "B"}, 1.0, "easy")
    assert regraded == {"difficulty": "easy", "source_difficulty": "B", "pass_rate": 1.0}


# -- an API role: exact pass rates from a scripted endpoint -----------------------------------

# n: the endpoint answers "n+n" right in this many of its k = 8 samples
SCRIPTED = {1: 8, 2: 6, 3: 5, 4: 2, 5: 1, 6: 0}


def api_config(tmp_path: Path, base_url: str) -> Path:
    path = tmp_path / "api.toml"
    path.write_text(
        f"""
[api]
base_url = "{base_url}"
api_key_env = ""
max_retries = 0

[models]
solver_model = "m"

[eval]
policy = "api"
role = "solver"

[data]
prompt_template = "Compute {{prompt}}. Box the answer."

[rollout]
async_workers = 3
temperature = 0.7
max_new_tokens = 64
"""
    )
    return path


def test_an_api_role_is_graded_with_the_training_prompt_and_sampling(tmp_path):
    answered: Counter[int] = Counter()
    lock = threading.Lock()

    def answer(seen) -> Reply:
        prompt = seen.body["messages"][-1]["content"]
        n = int(prompt.removeprefix("Compute ").split("+")[0])
        with lock:
            answered[n] += 1
            right = answered[n] <= SCRIPTED[n]
        return ok(f"\\boxed{{{2 * n if right else -1}}}")

    rows = [{"problem": f"{n}+{n}", "answer": str(2 * n)} for n in SCRIPTED]
    source = write_jsonl(tmp_path / "in.jsonl", rows)
    with ScriptedServer() as server:
        server.default("/v1/models", Reply(200, models_body("m")))
        server.default("/v1/chat/completions", answer)
        code, stdout, stderr = grade_cli(
            str(source),
            "--out",
            str(tmp_path / "out.jsonl"),
            "--policy",
            str(api_config(tmp_path, server.url + "/v1")),
        )
        requests = server.requests("/v1/chat/completions")
        in_flight = server.max_in_flight
    assert code == 0, stderr
    graded = read_jsonl(tmp_path / "out.jsonl")
    assert [(r["pass_rate"], r["difficulty"]) for r in graded] == [
        (1.0, "easy"), (0.75, "easy"), (0.625, "medium"),
        (0.25, "medium"), (0.125, "hard"), (0.0, "hard"),
    ]  # fmt: skip
    assert json.loads(stdout.strip().splitlines()[-1]) == {
        "graded": 6, "easy": 2, "medium": 2, "hard": 2, "k": 8
    }  # fmt: skip
    assert len(requests) == 6 * 8 and in_flight <= 3
    body = requests[0].body
    assert body["messages"][-1]["content"] == "Compute 1+1. Box the answer."
    assert body["temperature"] == 0.7 and body["max_tokens"] == 64


def test_a_request_over_the_context_names_the_grade_setting_to_lower(tmp_path):
    too_long = {"error": {"message": "This model's maximum context length is 256 tokens"}}
    source = write_jsonl(tmp_path / "in.jsonl", [{"problem": "1+1", "answer": "2"}])
    with ScriptedServer() as server:
        server.default("/v1/models", Reply(200, models_body("m")))
        server.default("/v1/chat/completions", Reply(400, too_long))
        config = api_config(tmp_path, server.url + "/v1")
        out = str(tmp_path / "out.jsonl")
        code, _, stderr = grade_cli(str(source), "--out", out, "--policy", str(config))
    error = stderr.strip().splitlines()[-1]
    assert code == 2 and error.startswith("error: ") and "Traceback" not in stderr, stderr
    assert "(the model allows 256 tokens); lower [grade] max_new_tokens (server:" in error
    assert "[eval]" not in error and not (tmp_path / "out.jsonl").exists()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["in.jsonl", "--out", "o.csv"], "give a file name ending in .jsonl"),
        (["in.jsonl", "--out", "in.jsonl"], "that is the input"),
        (["missing.jsonl", "--out", "o.jsonl"], "missing.jsonl: no such file or directory"),
        (["in.jsonl", "--out", "o.jsonl", "--kind", "maths"], "--kind 'maths' is unknown"),
        (["in.jsonl", "--out", "o.jsonl", "--policy", "."], "a directory without config.toml"),
        (
            ["in.jsonl", "--out", "o.jsonl", "--set", 'reward.functions=["code"]'],
            "has no math reward",
        ),
        (
            ["in.jsonl", "--out", "o.jsonl", "--set", "data.chat_template=off"],
            '[data] chat_template: "off" cannot be honoured',
        ),
        (
            ["in.jsonl", "--out", "o.jsonl", "--set", "grade.hard_below=0.9"],
            "hard_below (0.9) is above easy_at_least",
        ),
    ],
)
def test_errors_are_one_line_exit_2_and_write_nothing(tmp_path, monkeypatch, args, message):
    monkeypatch.chdir(tmp_path)
    write_jsonl(tmp_path / "in.jsonl", [{"question": "07+45=", "answer": "52"}])
    if "--policy" not in args:
        args = [*args, "--policy", str(RECIPE)]
    code, _, stderr = grade_cli(*args)
    assert code == 2 and message in stderr, stderr
    assert len(stderr.strip().splitlines()) == 1 and "Traceback" not in stderr
    assert not (tmp_path / "o.jsonl").exists()

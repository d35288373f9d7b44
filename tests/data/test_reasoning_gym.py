"""reasoning-gym generators as problem and reward sources (`[data] path = "reasoning_gym:NAME"`).

Conformance: the prompts are the library's own questions for the same name, settings, seed
and index, and the reward gives the score the library's own scorer gives to the answer its own
`extract_answer` takes from a completion: right, wrong, partly right, untagged and empty
answers, on generators with different scorers."""

from __future__ import annotations

import json

import pytest
import reasoning_gym
from pydantic import ValidationError
from reasoning_gym.utils import extract_answer

from ascent.config.data import DataSection
from ascent.config.rewards import RewardSection, SandboxSection
from ascent.data import load_task
from ascent.data.problems import render_prompt, reward_columns
from ascent.data.tasks import EVAL_SEED
from ascent.errors import AscentError, ConfigError
from ascent.rewards import REWARDS, build_reward
from ascent.rewards.reasoning_gym import build_dataset

# Generators whose scorers differ: exact match with partial credit (the base class), numeric
# comparison, a word list, a per-letter check, a base conversion.
GENERATORS = {
    "basic_arithmetic": {"min_terms": 2, "max_terms": 3, "max_digits": 2},
    "chain_sum": {},
    "gcd": {},
    "spell_backward": {},
    "word_sorting": {},
    "base_conversion": {},
    "letter_counting": {},
}


def section(name: str, train_size: int = 40, eval_size: int = 20, **keys: object) -> DataSection:
    return DataSection(
        path=f"reasoning_gym:{name}",
        reasoning_gym=GENERATORS.get(name, {}),
        train_size=train_size,
        eval_size=eval_size,
        **keys,
    )


def reward(answer_format: str = "tag"):
    cfg = RewardSection(functions=["reasoning_gym"], reasoning_gym={"answer_format": answer_format})
    return REWARDS.get("reasoning_gym")(cfg, SandboxSection())


def completions_for(entry: dict) -> list[str]:
    """Replies a policy might give: right, wrong, partly right, untagged, empty, two tags."""
    gold = str(entry["answer"])
    return [
        f"I think.\n<answer>{gold}</answer>",
        "<answer>definitely not it</answer>",
        f"<answer>so it is {gold} then</answer>",
        gold,
        "",
        f"<answer>wrong</answer> on reflection <answer> {gold} </answer>",
    ]


@pytest.mark.parametrize("name", sorted(GENERATORS))
def test_prompts_are_the_librarys_questions_and_scores_are_its_scorers(name):
    task = load_task(section(name), seed=7)
    library = reasoning_gym.create_dataset(name, seed=7, size=40, **GENERATORS[name])
    questions = [library[i]["question"] for i in range(40)]
    held = {p.key for p in task.eval}
    assert [p.prompt for p in task.train] == [q for q in questions if q not in held]
    assert len(task.train) >= 30

    fn = reward()
    for problem in task.train[:8]:
        index = questions.index(problem.prompt)
        entry = library[index]
        replies = completions_for(entry)
        n = len(replies)
        columns = {k: v * n for k, v in reward_columns([problem]).items()}
        got = fn.score([problem.prompt] * n, replies, **columns)
        expected = [library.score_answer(extract_answer(r), entry) for r in replies]
        assert got.values == pytest.approx(expected)
        assert [d["correct"] for d in got.details] == [e >= 1.0 for e in expected]
        assert got.values[0] == 1.0  # the gold answer, tagged, gets full marks


def test_text_format_scores_the_whole_reply_as_the_answer():
    task = load_task(section("basic_arithmetic"), seed=0)
    problem = task.train[0]
    entry = reasoning_gym.create_dataset("basic_arithmetic", seed=0, size=40, **GENERATORS[
        "basic_arithmetic"])[problem.columns["rg_index"]]  # fmt: skip
    replies = [f" {entry['answer']}\n", f"= {entry['answer']}", "7777777"]
    columns = {k: v * 3 for k, v in reward_columns([problem]).items()}
    values = reward("text")(["q"] * 3, replies, **columns)
    library = build_dataset(problem.columns["rg_spec"])
    assert values == [library.score_answer(r.strip(), entry) for r in replies]
    assert values[0] == 1.0 and 0 < values[1] < 1 and values[2] == 0.0


def test_last_number_format_scores_the_replys_last_number():
    task = load_task(section("chain_sum"), seed=0)
    problem = task.train[0]
    library = build_dataset(problem.columns["rg_spec"])
    entry = library[problem.columns["rg_index"]]
    gold = entry["answer"]
    replies = [f"So {problem.prompt[-12:]} {gold}.", f"{gold} or maybe 3.5", "no idea", f"{gold}7"]
    columns = {k: v * 4 for k, v in reward_columns([problem]).items()}
    values = reward("last_number")(["q"] * 4, replies, **columns)
    answers = [gold, "3.5", None, f"{gold}7"]
    assert values == [library.score_answer(a, entry) for a in answers]
    assert values[0] == 1.0 and values[1:3] == [0.0, 0.0] and values[3] < 1.0


def test_held_out_split_is_fixed_distinct_and_disjoint_from_every_seeds_training_set():
    a, b = load_task(section("chain_sum", 200, 50), 1), load_task(section("chain_sum", 200, 50), 2)
    assert [p.key for p in a.eval] == [p.key for p in b.eval]
    expected = reasoning_gym.create_dataset("chain_sum", seed=EVAL_SEED, size=50)
    assert [p.prompt for p in a.eval] == list(dict.fromkeys(e["question"] for e in expected))
    assert [p.key for p in a.train] != [p.key for p in b.train]
    for task in (a, b):
        assert not {p.key for p in task.train} & {p.key for p in task.eval}


def test_metadata_fields_fill_the_template_and_columns_survive_json():
    """A checkpoint's replay buffer stores a problem's columns as JSON: they must come back
    the same, and score the same."""
    data = section("basic_arithmetic", prompt_template="{expression} =")
    problem = load_task(data, seed=0).train[0]
    shown = render_prompt(data.prompt_template, problem)
    assert shown.endswith(" =") and "Calculate" not in shown
    back = json.loads(json.dumps(problem.columns))
    assert back == problem.columns
    entry = build_dataset(back["rg_spec"])[back["rg_index"]]
    assert entry["metadata"]["expression"] + " =" == shown


def test_a_mixed_run_scores_only_its_reasoning_gym_problems():
    data = DataSection(
        sources=[
            {"name": "gym", "path": "reasoning_gym:chain_sum", "train_size": 20, "eval_size": 10},
            {"name": "add", "train_size": 20, "eval_size": 10},
        ]
    )
    task = load_task(data, seed=0)
    rows = [task.train[0], next(p for p in task.train if p.source == "add")]
    assert rows[0].source == "gym"
    fn = build_reward(RewardSection(functions=["reasoning_gym", "math"]), SandboxSection())
    out = fn([p.prompt for p in rows], ["<answer>1</answer>"] * 2, **reward_columns(rows))
    gym_values = out.components["reasoning_gym"]
    assert gym_values[1] is None and gym_values[0] is not None


@pytest.mark.parametrize(
    ("keys", "message"),
    [
        ({"path": "reasoning_gym:chian_sum"}, "no reasoning-gym generator 'chian_sum'"),
        ({"reasoning_gym": {"max_term": 3}}, "has no setting max_term"),
        ({"reasoning_gym": {"max_terms": 1, "min_terms": 3}}, "refused its settings"),
    ],
)
def test_an_unknown_generator_or_setting_is_one_line_naming_the_valid_ones(keys, message):
    data = DataSection(**{"path": "reasoning_gym:chain_sum", "eval_size": 10, **keys})
    with pytest.raises(ConfigError, match=message) as err:
        load_task(data, seed=0)
    assert "\n" not in str(err.value)


def test_a_generator_that_breaks_while_drawing_is_one_line_naming_its_settings(monkeypatch):
    """Generators check their settings with asserts when built; one that breaks later, on an
    entry, is a fault the shipped ones do not show for any setting tried, so it is forced."""
    dataset_class, _ = reasoning_gym.factory.DATASETS["chain_sum"]

    def broken(self, index):
        raise ZeroDivisionError("division by zero")

    monkeypatch.setattr(dataset_class, "__getitem__", broken)
    build_dataset.cache_clear()
    data = DataSection(path="reasoning_gym:chain_sum", eval_size=10, reasoning_gym={"min_terms": 3})
    with pytest.raises(ConfigError, match=r"reasoning_gym:chain_sum failed to generate problem 0 "
                       r"with settings \{'min_terms': 3\}: ZeroDivisionError") as err:  # fmt: skip
        load_task(data, seed=0)
    assert "\n" not in str(err.value)
    build_dataset.cache_clear()


@pytest.mark.parametrize(
    ("keys", "message"),
    [
        ({"reasoning_gym": {"size": 10}}, "train_size / eval_size instead"),
        ({"reasoning_gym": {"seed": 1}}, r"set \[data\] seed instead"),
        ({"eval_path": "x.jsonl"}, "makes both splits itself"),
        ({"columns": {"prompt": "q"}}, "makes both splits itself"),
        ({"path": "reasoning_gym:"}, "name the generator after the colon"),
        ({"path": "data.jsonl", "reasoning_gym": {"a": 1}}, "only a reasoning-gym generator"),
    ],
)
def test_settings_a_generator_cannot_use_are_refused_at_load(keys, message):
    with pytest.raises(ValidationError, match=message):
        DataSection(**{"path": "reasoning_gym:chain_sum", **keys})


def test_without_the_package_the_error_names_the_extra(monkeypatch):
    import sys

    build_dataset.cache_clear()
    monkeypatch.setitem(sys.modules, "reasoning_gym", None)
    with pytest.raises(ConfigError, match=r"pip install 'ascent\[envs\]'"):
        load_task(section("chain_sum"), seed=0)
    with pytest.raises(AscentError, match="need the reasoning-gym package"):
        reward()


def test_the_example_recipe_loads():
    from pathlib import Path

    from ascent.configfile import load_config

    cfg = load_config(Path(__file__).resolve().parents[2] / "examples" / "reasoning_gym.toml")
    assert cfg.data.reasoning_gym_name == "basic_arithmetic"
    assert cfg.reward.functions == ["reasoning_gym"]


@pytest.mark.parametrize("name", ["spiral_matrix", "countdown", "number_sorting"])
def test_a_generator_whose_scorer_runs_answers_as_python_is_refused(name):
    """spiral_matrix's scorer calls eval on the reply and countdown's sympy's parse_expr: a
    model could make them run anything in the trainer's process. Refused at load."""
    with pytest.raises(ConfigError, match="may run the model's answer as Python") as err:
        load_task(section(name), seed=0)
    assert f"reasoning_gym:{name}" in str(err.value) and "\n" not in str(err.value)


def test_the_scorer_check_reads_where_score_answer_comes_from():
    from reasoning_gym.factory import DATASETS

    from ascent.data.reasoning_gym import scorer_runs_answers

    # The base class's exact match (basic_arithmetic evaluates its own expressions while
    # generating, not answers) and a plain override pass; eval in the scorer does not.
    assert scorer_runs_answers(DATASETS["basic_arithmetic"][0]) is None
    assert scorer_runs_answers(DATASETS["word_sorting"][0]) is None
    assert scorer_runs_answers(DATASETS["spiral_matrix"][0]).endswith("spiral_matrix.py")

    class Inherits(DATASETS["spiral_matrix"][0]):  # a subclass keeps its parent's scorer
        pass

    assert scorer_runs_answers(Inherits) is not None

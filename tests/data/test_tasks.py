"""Built-in tasks: seeded, held-out split disjoint from any training set, resumable sampling."""

from __future__ import annotations

import pytest

from ascent.config.data import DataSection
from ascent.configfile import load_config
from ascent.data import PromptSampler, is_held_out, load_task
from ascent.errors import ConfigError
from ascent.rewards.countdown import check_expression


def test_arithmetic_prompts_are_zero_padded_and_equal_length():
    data = load_task(DataSection(train_size=300, eval_size=50), seed=3)
    assert {len(p.prompt) for p in data.train + data.eval} == {6}
    for p in data.train[:50]:
        a, b = p.key.split("+")
        assert int(a) + int(b) == int(p.answer)


@pytest.mark.parametrize("task", ["arithmetic", "countdown"])
def test_held_out_split_never_meets_training_problems_of_any_seed(task):
    cfg = DataSection(task=task, train_size=2000, eval_size=100)
    evals = {p.key for p in load_task(cfg, seed=0).eval}
    assert len(evals) == 100  # distinct
    for seed in (0, 1, 2):
        train = {p.key for p in load_task(cfg, seed=seed).train}
        assert not train & evals
    assert all(is_held_out(k) for k in evals)


def test_same_seed_same_problems_other_seed_other_problems():
    cfg = DataSection(train_size=100, eval_size=20)
    a, b, c = load_task(cfg, 1), load_task(cfg, 1), load_task(cfg, 2)
    assert a == b
    assert [p.key for p in a.train] != [p.key for p in c.train]
    assert a.eval == c.eval  # the held-out set does not depend on the run's seed


def test_countdown_puzzles_are_solvable_by_their_stored_solution():
    data = load_task(DataSection(task="countdown", train_size=200, eval_size=20), seed=0)
    for p in data.train + data.eval:
        assert (
            p.prompt
            == f"use {' '.join(map(str, p.columns['numbers']))} to make {p.columns['target']}:"
        )
        assert check_expression(p.answer, p.columns["numbers"], p.columns["target"]) == (
            True,
            "equal",
        )


def test_asking_for_more_held_out_problems_than_exist_is_a_config_error():
    with pytest.raises(ConfigError, match="eval_size"):
        load_task(DataSection(eval_size=400, arithmetic={"digits": 1}), seed=0)


def test_unknown_task_is_refused_at_load_time_with_the_valid_names():
    with pytest.raises(ConfigError, match=r"unknown task 'arithmetc'.*valid: arithmetic"):
        load_config(None, ["data.task=arithmetc"])


def test_sampler_resumes_exactly_and_reshuffles_each_epoch():
    problems = load_task(DataSection(train_size=10, eval_size=5), seed=0).train
    full = PromptSampler(problems, seed=5, shuffle=True)
    first = [d.uid for d in full.draw(7)]
    rest = full.draw(13)
    resumed = PromptSampler(problems, seed=5, shuffle=True)
    resumed.draw(7)
    again = PromptSampler(problems, seed=5, shuffle=True)
    again.load_state_dict(resumed.state_dict())
    assert [(d.uid, d.problem) for d in again.draw(13)] == [(d.uid, d.problem) for d in rest]
    assert first == list(range(7))
    epoch0 = [d.problem.key for d in PromptSampler(problems, seed=5, shuffle=True).draw(10)]
    epoch1 = [d.problem.key for d in rest[3:13]]
    assert sorted(epoch0) == sorted(epoch1) and epoch0 != epoch1


def test_prompt_template_wraps_the_prompt_and_may_use_columns_but_not_the_answer():
    from ascent.data import render_prompt

    problem = load_task(DataSection(task="countdown", train_size=1, eval_size=1), 0).train[0]
    text = render_prompt("Numbers {numbers}, target {target}. {prompt}", problem)
    assert text.endswith(problem.prompt) and str(problem.columns["target"]) in text
    with pytest.raises(ValueError, match=r"uses \{answer\}.*available: prompt, numbers, target"):
        render_prompt("{prompt} {answer}", problem)

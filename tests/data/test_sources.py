"""Several problem sources in one run ([[data.sources]]): SRPO's stage 2 draws math and code
together. Weights decide each batch's mix; every source keeps its own template and held-out
split; History Resampling still drops solved problems, source by source."""

from __future__ import annotations

import json
from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from ascent.config.data import DataSection
from ascent.data import PromptSampler, first_of_each_source, load_task
from ascent.data.history import RewardHistory
from ascent.data.sampler import apportion
from ascent.errors import ConfigError
from ascent.train.evaluate import summarize
from ascent.train.llm_preflight import measured_prompts


def two_sources(add_weight: float = 3.0, sub_weight: float = 1.0, **sub: object) -> DataSection:
    return DataSection(
        sources=[
            {"name": "add", "weight": add_weight, "train_size": 300, "eval_size": 40,
             "prompt_template": "Add: {prompt}"},
            {"name": "sub", "weight": sub_weight, "train_size": 100, "eval_size": 20,
             "arithmetic": {"operators": ["-"]}, **sub},
        ]
    )  # fmt: skip


def test_each_source_keeps_its_template_its_held_out_split_and_a_key_of_its_own():
    task = load_task(two_sources(), seed=0)
    assert task.weights == {"add": 3.0, "sub": 1.0}
    assert Counter(p.source for p in task.train) == {"add": 300, "sub": 100}
    assert Counter(p.source for p in task.eval) == {"add": 40, "sub": 20}
    for p in task.train + task.eval:
        a, op, b = p.columns["a"], p.columns["op"], p.columns["b"]
        assert op == {"add": "+", "sub": "-"}[p.source]
        assert int(p.answer) == (int(a) + int(b) if op == "+" else int(a) - int(b))
        assert p.key.startswith(f"{p.source}/")
        # The source's template is applied once, here; the run's own template is "{prompt}".
        assert p.prompt.startswith("Add: ") == (p.source == "add")
    assert not {p.key for p in task.train} & {p.key for p in task.eval}


def test_batches_mix_the_sources_by_weight_and_an_epoch_gives_each_its_share():
    task = load_task(two_sources(), seed=0)
    sampler = PromptSampler(task.train, seed=5, shuffle=True, weights=task.weights)
    epoch = [sampler.draw(16) for _ in range(25)]  # 400 prompts: one epoch
    for batch in epoch:
        counts = Counter(d.problem.source for d in batch)
        assert counts["add"] in (11, 12, 13)  # 3/4 of 16, give or take the interleave
    drawn = [d for batch in epoch for d in batch]
    assert Counter(d.problem.source for d in drawn) == {"add": 300, "sub": 100}
    assert len({d.uid for d in drawn}) == 400
    # Weights unlike the sizes: the smaller source is repeated to fill its half.
    task = load_task(two_sources(add_weight=1.0, sub_weight=1.0), seed=0)
    sampler = PromptSampler(task.train, seed=5, shuffle=True, weights=task.weights)
    drawn = sampler.draw(400)
    subs = Counter(d.index for d in drawn if d.problem.source == "sub")
    assert sum(subs.values()) == 200 and set(subs.values()) == {2}


def test_a_resumed_sampler_draws_what_the_unbroken_one_would():
    task = load_task(two_sources(), seed=0)
    unbroken = PromptSampler(task.train, seed=1, shuffle=True, weights=task.weights)
    resumed = PromptSampler(task.train, seed=1, shuffle=True, weights=task.weights)
    first = [d.problem.key for d in resumed.draw(250)]
    state = json.loads(json.dumps(resumed.state_dict()))
    again = PromptSampler(task.train, seed=1, shuffle=True, weights=task.weights)
    again.load_state_dict(state)
    assert first + [d.problem.key for d in again.draw(500)] == [
        d.problem.key for d in unbroken.draw(750)
    ]


def test_history_resampling_drops_a_solved_source_and_the_others_take_its_places():
    task = load_task(two_sources(), seed=0)
    sampler = PromptSampler(task.train, seed=2, shuffle=True, weights=task.weights)
    history = RewardHistory()
    for d in sampler.draw(400):  # one epoch: every "sub" problem solved, every "add" mixed
        solved = d.problem.source == "sub"
        history.record(d.index, [1.0, 1.0 if solved else 0.0], [True, solved])
    pool, report = history.end_epoch(0, sampler.pool, min_pool=16)
    assert report.dropped == 100
    sampler.start_epoch(pool)
    nxt = sampler.draw(300)
    assert Counter(d.problem.source for d in nxt) == {"add": 300}
    assert len({d.index for d in nxt}) == 300  # the epoch is the kept pool, once each


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.floats(0.01, 100.0), min_size=1, max_size=6),
    st.integers(0, 5000),
)
def test_apportion_hands_out_every_place_within_one_of_the_exact_share(weights, total):
    shares = [w / sum(weights) for w in weights]
    counts = apportion(np.asarray(shares), total)
    assert sum(counts) == total
    assert all(abs(c - s * total) < 1 for c, s in zip(counts, shares, strict=True))


def test_per_source_accuracy_is_reported_beside_the_overall_one():
    def sample(source: str, correct: bool | None) -> dict:
        return {"completion": "", "reward": 1.0 if correct else 0.0, "correct": correct,
                "source": source}  # fmt: skip

    samples = [sample("add", True)] * 3 + [sample("add", False)] + [sample("sub", False)] * 4
    samples.append(sample("sub", None))  # not judged: counts for neither
    result = summarize(samples)
    assert result.accuracy == 3 / 8
    assert result.by_source == {"add": 0.75, "sub": 0.0}
    assert result.metrics()["eval/add/accuracy"] == 0.75
    one = summarize([{**s, "source": ""} for s in samples])
    assert one.by_source == {} and "eval/add/accuracy" not in one.metrics()


def test_source_settings_are_refused_where_they_cannot_act():
    with pytest.raises(ValidationError, match=r"\[data\] task: with \[\[data.sources\]\]"):
        DataSection(task="countdown", sources=[{"name": "a"}])
    with pytest.raises(ValidationError, match="two sources share a name"):
        DataSection(sources=[{"name": "a"}, {"name": "a", "task": "countdown"}])
    with pytest.raises(ValidationError, match="must be 1-40 letters"):
        DataSection(sources=[{"name": "math/code"}])
    with pytest.raises(ValidationError, match="weight"):
        DataSection(sources=[{"name": "a", "weight": 0}])
    with pytest.raises(ValidationError, match="sources"):  # one level of sources only
        DataSection(sources=[{"name": "a", "sources": []}])


def test_a_bad_source_is_named_in_the_error(tmp_path):
    missing = tmp_path / "nowhere.jsonl"
    cfg = DataSection(sources=[{"name": "add"}, {"name": "code", "path": str(missing)}])
    with pytest.raises(ConfigError, match=r"\[\[data.sources\]\] code: .*nowhere.jsonl"):
        load_task(cfg, seed=0)


def test_checks_that_sample_prompts_see_every_source():
    # Prompt lengths (memory estimate, plan) and reward columns (--dry-run) are checked on a
    # sample; with the sources one after another, the first 256 rows would be source 1's only.
    task = load_task(two_sources(), seed=0)
    sample = first_of_each_source(task.train, 50)
    assert Counter(p.source for p in sample) == {"add": 50, "sub": 50}
    assert sample[:50] == task.train[:50]  # each source's first, in order
    one = load_task(DataSection(train_size=80, eval_size=20), seed=0)
    assert first_of_each_source(one.train, 50) == one.train[:50]
    # The second source's prompts are the longest: a sample of source 1 alone would miss them.
    task = load_task(two_sources(prompt_template="Subtract, then reply: {prompt}"), seed=0)
    longest = max(len(p.prompt) for p in task.train)
    assert max(len(p.prompt) for p in task.train[:256]) < longest
    assert max(len(p.prompt) for p in measured_prompts(task)) == longest

"""SRPO History Resampling: the epoch-end filter keeps and drops the right prompts."""

from __future__ import annotations

import pytest

from ascent.data import Problem, PromptSampler, ResampleReport, RewardHistory


def problems(n: int) -> list[Problem]:
    return [Problem(key=f"k{i}", prompt=f"q{i}", answer=str(i)) for i in range(n)]


def test_all_correct_prompts_are_dropped_mixed_and_all_wrong_are_kept():
    history = RewardHistory()
    history.record(0, [1.0, 1.0, 1.0], [True, True, True])  # all correct: drop
    history.record(1, [1.0, -1.0, 1.0], [True, False, True])  # mixed: keep
    history.record(2, [-1.0, -1.0, -1.0], [False, False, False])  # all wrong: keep
    history.record(3, [1.0, 1.0], [True, True])  # all correct over two visits ...
    history.record(3, [-1.0], [False])  # ... but not the third: mixed, keep
    pool, report = history.end_epoch(epoch=0, pool=[0, 1, 2, 3, 4], min_pool=1)
    assert pool == [1, 2, 3, 4]  # 4 was not drawn this epoch: kept
    assert (report.seen, report.kept, report.dropped) == (4, 4, 1)
    # zero variance before: prompts 0 and 2 of the 4 seen; after: prompt 2 of the 3 kept.
    assert report.zero_std_before == pytest.approx(2 / 4)
    assert report.zero_std_after == pytest.approx(1 / 3)
    assert ResampleReport.from_metrics(report.metrics()) == report
    # The epoch's record starts afresh; the all-time record keeps every reward.
    assert history.epoch_correct == {} and history.rewards[3] == [1.0, 1.0, -1.0]


def test_a_prompt_dropped_once_stays_out_and_too_small_a_pool_is_kept_whole():
    history = RewardHistory()
    history.record(0, [1.0], [True])
    pool, _ = history.end_epoch(0, [0, 1, 2], min_pool=2)
    assert pool == [1, 2]
    history.record(1, [1.0], [True])
    history.record(2, [1.0], [True])
    pool, report = history.end_epoch(1, pool, min_pool=2)
    assert pool == [1, 2] and report.kept_pool and report.dropped == 0
    assert "pool kept whole" in report.line()


def test_history_state_round_trips():
    history = RewardHistory()
    history.record(5, [1.0, -1.0], [True, False])
    again = RewardHistory()
    again.load_state_dict(history.state_dict())
    assert again == history


def test_sampler_epochs_visit_only_the_resampled_pool_and_resume_exactly():
    sampler = PromptSampler(problems(6), seed=1, shuffle=True)
    first = sampler.draw(4)
    assert sampler.remaining() == 2
    sampler.start_epoch([1, 3, 5])  # the 2 undrawn prompts wait for a later epoch
    state = sampler.state_dict()
    second = sampler.draw(3)
    assert sorted(d.index for d in second) == [1, 3, 5]
    assert {d.uid for d in first}.isdisjoint(d.uid for d in second)  # uids stay unique
    resumed = PromptSampler(problems(6), seed=1, shuffle=True)
    resumed.load_state_dict(state)
    assert [d.uid for d in resumed.draw(5)] == [d.uid for d in second] + [
        d.uid for d in sampler.draw(2)
    ]

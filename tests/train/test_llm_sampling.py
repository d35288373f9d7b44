"""Which completions a step trains on: dynamic sampling, positive replay, history resampling,
overlong handling."""

from __future__ import annotations

import itertools
import logging

import pytest
import torch

from ascent.data import Problem
from ascent.rewards import CompositeReward, RewardOutput
from ascent.rollout import RolloutBatch
from ascent.train.llm_replay import PositiveReplay
from ascent.train.llm_rollout import Scored
from ascent.train.llm_setup import build_run
from tests.train.test_llm_loop import config


def flat_unless_odd(prompts, completions, **_):
    """Rewards all equal (0) for prompts whose second digit is even; 0, 1, 0, 1, ... else."""
    seen: dict[str, int] = {}
    out = []
    for p in prompts:
        seen[p] = seen.get(p, -1) + 1
        out.append(float(seen[p] % 2) if int(p[1]) % 2 else 0.0)
    return out


def scripted_run(tmp_path, reward, *overrides):
    run = build_run(config(tmp_path, "sampling.dynamic=true", *overrides), torch.device("cpu"))
    run.close()
    run.rollouts.reward = CompositeReward({"scripted": reward}, [1.0])
    return run


def test_dynamic_sampling_refills_the_batch_with_groups_whose_rewards_differ(tmp_path):
    run = scripted_run(tmp_path, flat_unless_odd, "sampling.max_rounds=8")
    metrics, batch = run.step(1)
    prompts = {p.prompt for p in batch.problems}
    assert len(batch.completions) == 16 and len(prompts) == 2  # the requested 2 groups of 8
    assert all(int(p[1]) % 2 for p in prompts)  # only informative groups were kept
    drawn = 2 * (1 + int(metrics["dynamic/rounds"]))
    assert metrics["dynamic/kept_groups"] == 2 and metrics["dynamic/rounds"] >= 1
    assert metrics["dynamic/dropped_groups"] >= drawn - 2 - 1  # all flat ones dropped ...
    assert metrics["frac_reward_zero_std"] == pytest.approx(
        metrics["dynamic/dropped_groups"] / drawn
    )  # ... and the rate is reported over everything generated
    assert "update_skipped" not in metrics


def test_dynamic_sampling_stops_at_max_rounds_with_a_warning(tmp_path, caplog):
    run = scripted_run(tmp_path, lambda p, c, **_: [1.0] * len(c), "sampling.max_rounds=2")
    with caplog.at_level(logging.WARNING, logger="ascent.train"):
        metrics, batch = run.step(1)
    assert metrics["dynamic/rounds"] == 2 and metrics["dynamic/dropped_groups"] == 6
    assert metrics["dynamic/kept_groups"] == 0 and len(batch.completions) == 0
    assert metrics["update_skipped"] == 1.0
    assert "0 of 2 groups had mixed rewards after 2 extra rounds" in caplog.text


def rows(n: int, step: int, correct: list[bool]) -> Scored:
    """`n` one-token completions; row i judged correct when correct[i]."""
    batch = RolloutBatch(
        prompt_ids=torch.ones(n, 2, dtype=torch.long),
        prompt_mask=torch.ones(n, 2, dtype=torch.long),
        response_ids=torch.arange(n)[:, None] + 100 * step,
        response_mask=torch.ones(n, 1),
        logprobs=torch.zeros(n, 1),
        group_ids=torch.arange(n) + 1000 * step,
        finished=torch.ones(n, dtype=torch.bool),
        versions=torch.zeros(n, dtype=torch.long),
    )
    details = [{"math": {"correct": ok}} for ok in correct]
    rewards = RewardOutput([1.0 if ok else -1.0 for ok in correct], {}, details)
    return Scored(batch, [Problem("k", "p", "a")] * n, ["c"] * n, rewards)


def tokens(scored: Scored) -> list[int]:
    return scored.rollout.response_ids[:, 0].tolist()


def test_replay_buffers_correct_rows_only_and_forgets_the_oldest_and_the_stale():
    replay = PositiveReplay(capacity=6, max_staleness=3, seed=0, pad_id=0)
    assert replay.add(rows(4, step=1, correct=[True, False, True, False]), step=1) == 2
    replay.add(rows(5, step=2, correct=[True] * 5), step=2)
    assert len(replay) == 6  # capacity: the first correct row of step 1 went
    batch, metrics = replay.sample(10, step=4)
    assert sorted(tokens(batch)) == [102, 200, 201, 202, 203, 204] and batch.replayed == (True,) * 6
    assert metrics["replay/mean_age"] == pytest.approx((3 + 5 * 2) / 6)
    batch, _ = replay.sample(10, step=5)  # step-1 rows are 4 steps old: past the limit
    assert sorted(tokens(batch)) == [200, 201, 202, 203, 204] and len(replay) == 5
    assert replay.sample(10, step=6)[0] is None  # all stale now


def test_replay_draws_the_requested_count_uniformly_without_replacement():
    replay = PositiveReplay(capacity=100, max_staleness=10_000, seed=0, pad_id=0)
    replay.add(rows(20, step=0, correct=[True] * 20), step=0)
    counts = torch.zeros(20)
    for step in range(1, 2001):
        drawn = tokens(replay.sample(5, step)[0])
        assert len(set(drawn)) == 5
        counts[drawn] += 1
    assert torch.allclose(counts / 2000, torch.full((20,), 0.25), atol=0.04)


def test_each_batch_holds_replay_ratio_of_replayed_rows(tmp_path, monkeypatch):
    cfg = config(
        tmp_path,
        'algorithm.advantage="gae"',
        "train.batch_size=32",
        "sampling.replay_ratio=0.25",
        "algorithm.is_cap=2.0",
        "rollout.max_new_tokens=5",
    )
    run = build_run(cfg, torch.device("cpu"))
    seen: list = []
    original = run.actor.update
    run.actor.update = lambda b, s, **k: seen.append(b) or original(b, s, **k)
    for step in range(1, 7):
        buffered = len(run.replay.items)
        metrics, _ = run.step(step)
        batch = seen[-1]
        assert metrics["replay/rows"] == min(8, buffered)
        assert len(batch.rollout) == 24 + metrics["replay/rows"]  # 3 fresh groups + replayed
        assert batch.behaviour_logp is not None and batch.returns is not None
    assert metrics["replay/rows"] == 8  # the buffer filled up: a quarter of the batch
    run.close()


def test_history_records_each_group_and_resamples_when_the_epoch_runs_out(tmp_path):
    cfg = config(tmp_path, "sampling.history_resampling=true", "data.train_size=5")
    run = build_run(cfg, torch.device("cpu"))
    _, first = run.step(1)
    record = run.rollouts.history.epoch_correct
    assert sum(len(v) for v in record.values()) == 16 and len(record) == 2
    assert sorted(itertools.chain(*record.values())) == sorted(first.correct)
    metrics, _ = run.step(2)
    assert "resample/epoch" not in metrics  # 1 prompt left, a step needs 2: the epoch ends
    metrics, _ = run.step(3)
    assert metrics["resample/seen"] == 4 and metrics["resample/epoch"] == 0
    assert metrics["resample/kept"] + metrics["resample/dropped"] == 5
    run.close()


@pytest.mark.parametrize("mode", ["mask", "penalty"])
def test_overlong_completions_are_masked_or_penalised(tmp_path, monkeypatch, mode):
    extra = ["algorithm.overlong_buffer=1"] if mode == "penalty" else []
    cfg = config(tmp_path, f'algorithm.overlong="{mode}"', "rollout.max_new_tokens=3", *extra)
    run = build_run(cfg, torch.device("cpu"))
    seen: list = []
    original = run.actor.update
    run.actor.update = lambda b, s, **k: seen.append(b) or original(b, s, **k)
    metrics, scored = run.step(1)
    cut = (~scored.rollout.finished).float().mean()
    assert 0 < cut < 1  # some answers need the fourth token
    if mode == "mask":
        assert metrics["overlong/masked"] == pytest.approx(float(cut))
        cut_rows = ~seen[0].rollout.finished  # still there, with nothing left to learn from
        assert bool(cut_rows.any()) and len(seen[0].rollout) == 16
        assert seen[0].rollout.response_mask[cut_rows].sum() == 0
        assert seen[0].advantages[cut_rows].abs().sum() == 0
    else:  # 3 tokens = L_max: -1; 2 tokens = L_max - L_cache: 0
        at_max = (scored.rollout.response_lengths == 3).float().mean()
        assert metrics["overlong/penalty"] == pytest.approx(-float(at_max))
    run.close()

"""Each failure pattern is recognised on a hand-made metric history, and healthy runs are not."""

from __future__ import annotations

import json
import random

import pytest

from ascent.observe.diagnosis import diagnose
from ascent.observe.live import LiveDiagnosis
from ascent.observe.report import build_report, sparkline


def rows(**series):
    n = len(next(iter(series.values())))
    return [{"step": i + 1, **{k: v[i] for k, v in series.items()}} for i in range(n)]


def codes(history):
    return [f.code for f in diagnose(history)]


def healthy(n=40):
    return rows(
        reward=[-1 + 1.5 * i / n for i in range(n)],
        kl=[0.001 * (i + 1) for i in range(n)],
        frac_reward_zero_std=[0.2] * n,
        **{"completions/mean_length": [8.0] * n},
        loss=[0.1] * n,
    )


def test_a_healthy_run_has_no_findings():
    assert codes(healthy()) == []


def test_kl_past_one_for_a_window_is_flagged_with_the_fix():
    history = rows(kl=[0.2, 0.5, 1.2, 1.5, 1.1, 1.3, 1.8])
    (finding,) = diagnose(history)
    assert finding.code == "kl_high" and finding.step == 7
    assert "kl_coef" in finding.fix and "lr" in finding.fix


def test_one_kl_spike_is_not_flagged():
    assert codes(rows(kl=[0.1, 0.1, 3.0, 0.1, 0.1, 0.1, 0.1])) == []


def test_kl_stuck_at_zero_suggests_a_higher_lr():
    history = rows(kl=[0.0] * 30)
    assert codes(history) == ["kl_zero"]
    assert "lr" in diagnose(history)[0].fix


def test_saturated_groups_suggest_resampling():
    history = rows(frac_reward_zero_std=[0.95] * 12, reward=[0.9, 0.95] * 6)
    assert codes(history) == ["saturation"]
    assert "resampling" in diagnose(history)[0].fix


def test_reward_constant_at_its_minimum_points_at_extraction():
    history = rows(reward=[-1.0] * 12)
    assert "reward_at_floor" in codes(history)
    assert "extraction" in diagnose(history)[0].fix


def test_length_collapse():
    history = rows(**{"completions/mean_length": [100.0] * 10 + [60.0] * 5 + [20.0] * 10})
    assert codes(history) == ["length_collapse"]


def test_immediate_up_while_delayed_flat_is_reward_hacking():
    history = rows(
        **{
            "reward/immediate": [0.01 * i for i in range(25)],
            "reward/delayed": [0.2] * 25,
        }
    )
    assert codes(history) == ["reward_hacking"]


def test_immediate_up_while_delayed_falls_is_reward_hacking_too():
    # the agentic ablation's immediate-only run: wrong answers the tester cannot catch
    history = rows(
        **{
            "reward/immediate": [0.01 * i for i in range(25)],
            "reward/delayed": [0.25 - 0.005 * i for i in range(25)],
        }
    )
    assert codes(history) == ["reward_hacking"]


def test_both_rewards_rising_is_not_hacking():
    ramp = [0.01 * i for i in range(25)]
    assert codes(rows(**{"reward/immediate": ramp, "reward/delayed": ramp})) == []


@pytest.mark.parametrize("bad", [None, float("nan"), float("inf")])
def test_nan_loss(bad):
    history = rows(loss=[0.5, 0.4, bad])
    assert codes(history)[0] == "nan_loss"
    assert diagnose(history)[0].step == 3


def test_sparkline_rises_with_the_values():
    line = sparkline([0, 1, 2, 3, 4, 5, 6, 7])
    assert line == "▁▂▃▄▅▆▇█"
    assert sparkline([2.0, 2.0]) == "▁▁"


def test_report_reads_a_run_directory(tmp_path, run_cli):
    with open(tmp_path / "metrics.jsonl", "w") as fh:
        for row in rows(reward=[-1.0] * 12):
            fh.write(json.dumps(row) + "\n")
        fh.write('{"step": 13, "rew')  # cut short by a kill
    (tmp_path / "summary.json").write_text(json.dumps({"eval_accuracy_after": 0.5}))
    table, summary, findings = build_report(tmp_path)
    assert table[0][:3] == ["reward", "-1", "-1"]
    assert summary["eval_accuracy_after"] == 0.5
    assert [f.code for f in findings] == ["reward_at_floor"]
    code, out, _ = run_cli("report", str(tmp_path))
    assert code == 0
    assert "reward_at_floor" not in out  # users see the message, not the code
    assert "same, lowest reward" in out and "eval_accuracy_after: 0.5" in out


def test_report_on_a_missing_directory_is_a_one_line_error(tmp_path, run_cli):
    code, _, err = run_cli("report", str(tmp_path / "nope"))
    assert code == 2 and "no such run directory" in err


def test_a_reward_that_spikes_then_collapses_is_flagged_with_the_fix():
    up = [0.1 + 0.6 * i / 20 for i in range(20)]  # 0.1 -> 0.7 over 20 steps
    down = [0.7 - 0.6 * i / 10 for i in range(10)] + [0.12] * 20  # back to the start
    history = rows(reward=up + down, kl=[0.01] * 50)
    found = [f for f in diagnose(history) if f.code == "reward_spike_collapse"]
    assert len(found) == 1
    assert "fell back" in found[0].message and "lower optim.lr" in found[0].fix
    # a rise that holds, or a dip that keeps most of the gain, is no collapse
    assert "reward_spike_collapse" not in codes(rows(reward=up + [0.7] * 30, kl=[0.01] * 50))
    kept = up + [0.7 - 0.2 * i / 10 for i in range(10)] + [0.5] * 20
    assert "reward_spike_collapse" not in codes(rows(reward=kept, kl=[0.01] * 50))


def _noisy(trend: list[float], seed: int, sigma: float = 0.15) -> list[float]:
    rng = random.Random(seed)
    return [x + rng.gauss(0.0, sigma) for x in trend]


def test_noise_on_a_rising_reward_is_no_spike_and_a_noisy_collapse_still_is(tmp_path):
    """The demo's reward rises slowly under per-step noise of 0.15: the highest of many noisy
    10-step means sat 0.1-0.2 above the first, and the old rule warned 88 times in one run.
    Seen live (the latest 200 rows after every step), a steady rise stays quiet, while the
    same noise on a real rise and fall is still caught."""
    rising = [-0.45 + 0.5 * i / 1600 for i in range(1600)]
    spike = [-0.4 + 0.7 * min(i, 100) / 100 for i in range(160)] + [-0.4] * 80
    for seed in range(3):
        said: list[str] = []
        live = LiveDiagnosis(tmp_path / f"rise{seed}", said.append)
        (tmp_path / f"rise{seed}").mkdir()
        for step, value in enumerate(_noisy(rising, seed), 1):
            live.observe(step, {"reward": value})
        assert said == []
        history = rows(reward=_noisy(spike, 20 + seed))
        assert "reward_spike_collapse" in codes(history)


def test_a_short_burst_on_a_rising_reward_is_no_collapse(tmp_path):
    """What the OpenEnv recipe's three seeds showed: a reward rising 0.25 -> 0.55 under
    per-step noise of 0.08, with ten steps 0.13 above the trend and back. Quiet, live."""
    trend = [0.25 + 0.3 * i / 1600 for i in range(600)]  # the runs' slope, 600 of its steps
    burst = [v + (0.13 if 490 <= i < 500 else 0.0) for i, v in enumerate(trend)]
    for seed in range(3):
        said: list[str] = []
        (tmp_path / f"b{seed}").mkdir()
        live = LiveDiagnosis(tmp_path / f"b{seed}", said.append)
        for step, value in enumerate(_noisy(burst, seed, sigma=0.08), 1):
            live.observe(step, {"reward": value})
        assert said == []


def test_a_reflection_rate_that_has_not_risen_by_step_200_is_flagged_on_long_completions():
    n = 220
    long = {"completions/mean_length": [300.0] * n}
    flat = rows(**{"reflection/rate": [0.05] * n}, **long)
    found = [f for f in diagnose(flat) if f.code == "reflection_flat"]
    assert len(found) == 1 and found[0].step == 220
    assert "5.0% -> 5.0%" in found[0].message and "max_new_tokens" in found[0].fix
    rising = rows(**{"reflection/rate": [0.05 + 0.2 * i / n for i in range(n)]}, **long)
    assert "reflection_flat" not in codes(rising)
    # Too early to judge, or completions too short to reflect in (the tiny model's digits).
    assert "reflection_flat" not in codes(flat[:150])
    short = rows(**{"reflection/rate": [0.0] * n}, **{"completions/mean_length": [4.0] * n})
    assert "reflection_flat" not in codes(short)

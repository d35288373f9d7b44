"""Diagnosis during training: a pattern is announced once with its fix, written to
events.jsonl, and announced again only after it has stayed clear; the new rules fire on their
patterns and stay quiet on healthy runs."""

from __future__ import annotations

import json

import pytest

from ascent.observe.diagnosis import classic_entropy_low, entropy_collapse, loss_oscillating
from ascent.observe.live import REARM, LiveDiagnosis, read_events
from ascent.observe.text_metrics import reflection_pattern, text_metrics
from ascent.rundir import RunDir


def feed(live: LiveDiagnosis, kls: list[float], start: int = 1) -> None:
    """Observe steps with these KL values, logging them to metrics.jsonl as a run does."""
    with open(live.path.parent / "metrics.jsonl", "a") as fh:
        for step, kl in enumerate(kls, start):
            row = {"kl": kl, "reward": 0.1 * step}
            fh.write(json.dumps({"step": step, **row}) + "\n")
            live.observe(step, row)


def test_a_pattern_is_announced_once_until_it_has_stayed_clear(tmp_path):
    said: list[str] = []
    live = LiveDiagnosis(tmp_path, said.append)
    feed(live, [0.1] * 5 + [2.0] * 8)  # KL above 1.0 from step 6: established at step 10
    assert len(said) == 1 and said[0].startswith("warning: step 10: KL to the reference")
    assert "raise algorithm.kl_coef" in said[0]
    feed(live, [0.2] * 12, start=14)  # the last high window (ends at 13) is 10 steps old at 23
    feed(live, [3.0] * 5, start=26)  # ... and KL runs away again 3 steps later: the same
    assert len(said) == 1  # trouble, flickering around the line: not announced again
    feed(live, [0.2] * 70, start=31)  # unfound from step 40 (30 + RECENT): cleared at 40 + 50
    feed(live, [3.0] * 5, start=101)  # a new runaway after that is news
    assert len(said) == 2 and said[1].startswith("warning: step 105:")
    events = [(e["step"], e["pattern"], e["event"]) for e in read_events(tmp_path)]
    assert events == [(10, "kl_high", "fired"), (40 + REARM, "kl_high", "cleared"),
                      (105, "kl_high", "fired")]  # fmt: skip


def test_on_resume_later_events_are_dropped_and_active_patterns_stay_quiet(tmp_path):
    said: list[str] = []
    feed(LiveDiagnosis(tmp_path, said.append), [2.0] * 12)
    (tmp_path / "events.jsonl").write_text(
        (tmp_path / "events.jsonl").read_text() + '{"step": 30, "pattern": "x", "event": "fi'
    )  # a line cut by a kill after the checkpoint
    resumed = LiveDiagnosis(tmp_path, said.append, resume_step=8)
    feed(resumed, [2.0] * 4, start=9)
    assert len(said) == 1  # kl_high fired at step 5 before the checkpoint: not again
    assert [e["step"] for e in read_events(tmp_path)] == [5]


def series(key: str, values: list[float]) -> list[dict]:
    return [{"step": i + 1, key: v} for i, v in enumerate(values)]


def test_entropy_collapse_needs_a_fall_to_almost_nothing():
    assert entropy_collapse(series("entropy", [1.2] * 10 + [0.02] * 10)) is not None
    assert entropy_collapse(series("entropy", [1.2] * 10 + [0.4] * 10)) is None  # lower, alive
    assert entropy_collapse(series("entropy", [0.04] * 20)) is None  # always low: a choice


def test_classic_rules_of_the_actor_critic_write_up():
    assert classic_entropy_low(series("policy/entropy", [0.6, 0.3, 0.009, 0.008, 0.005,
                                                          0.004, 0.003])) is not None  # fmt: skip
    assert classic_entropy_low(series("policy/entropy", [0.6] * 10)) is None
    swinging = [0.5 if i % 2 else -0.5 for i in range(12)]
    assert loss_oscillating(series("loss/policy", swinging)) is not None
    drifting = [-0.01 * i for i in range(12)]
    assert loss_oscillating(series("loss/policy", drifting)) is None
    noisy_small = [0.001 if i % 2 else -0.0011 for i in range(6)] + [0.2] * 6
    assert loss_oscillating(series("loss/policy", noisy_small)) is None


def test_reflection_words_and_code_blocks_are_counted_as_whole_words():
    pattern = reflection_pattern(["wait", "let me verify", "hmm"])
    rates = text_metrics(
        ["Wait, 3+4=7.", "await the result", "Let me  verify: ok", "```python\nx\n```", "7"],
        pattern,
    )
    assert rates["reflection/rate"] == pytest.approx(2 / 5)  # "await" is not "wait"
    assert rates["code_block/rate"] == pytest.approx(1 / 5)
    assert reflection_pattern([]) is None and text_metrics([], pattern) == {}


def test_a_run_driven_to_a_high_kl_warns_while_training_and_report_lists_it(tmp_path, run_cli):
    from tests.train.test_llm_loop import SHORT

    sets = [*SHORT, "train.total_steps=12", "train.save_steps=0", "train.eval_steps=0",
            "algorithm.kl_coef=0.001", "optim.lr=3e-3", "optim.warmup_ratio=0",
            f'run.output_dir="{tmp_path}"', "run.name=hot"]  # fmt: skip
    code, out, err = run_cli("train", *[a for s in sets for a in ("--set", s)])
    assert code == 0, err
    assert "warning: step" in out and "KL to the reference stayed above 1.0" in out
    fired = [e for e in read_events(tmp_path / "hot") if e["pattern"] == "kl_high"]
    assert fired and fired[0]["event"] == "fired"
    rows = [json.loads(x) for x in (tmp_path / "hot" / "metrics.jsonl").open()]
    assert "reflection/rate" in rows[-1] and "eval/code_block/rate" in rows[-1]
    code, out, _ = run_cli("report", str(tmp_path / "hot"))
    assert code == 0 and f"step {fired[0]['step']}: kl_high fired" in out
    assert RunDir(tmp_path / "hot").metrics_path.is_file()

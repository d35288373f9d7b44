"""When the engine's log-probs are not the trainer's (bf16 kernels here; vLLM on any
device), the trainer recomputes the old log-probs and weights each token by the truncated
ratio pi_trainer / pi_engine; the gap is reported."""

from __future__ import annotations

import torch

from ascent.configfile import load_config
from ascent.train.llm_setup import build_run
from tests.train.test_llm_loop import config


def test_bf16_rollouts_are_corrected_towards_the_trainers_log_probs(tmp_path):
    run = build_run(config(tmp_path, 'model.dtype="bfloat16"'), torch.device("cpu"))
    assert not run.engine.exact_logprobs and run.credit.parts.engine_correction
    assert run.credit.parts.loss_params.is_cap == 2.0
    metrics, _ = run.step(1)
    assert 0 < metrics["engine/logprob_gap"] < 0.5  # bf16 rounding, not another policy
    assert metrics["engine/kl"] > -1e-6 and "is_clip_frac" in metrics  # k3 >= 0, up to rounding
    assert abs(metrics["is_weight_mean"] - 1.0) < 0.1
    run.close()


def test_the_correction_can_be_turned_off_and_is_idle_for_an_exact_engine(tmp_path):
    off = build_run(
        config(tmp_path, 'model.dtype="bfloat16"', "algorithm.engine_is_cap=0"),
        torch.device("cpu"),
    )
    assert not off.credit.parts.engine_correction and off.credit.parts.loss_params.is_cap is None
    metrics, _ = off.step(1)
    assert "engine/logprob_gap" not in metrics
    off.close()
    exact = build_run(config(tmp_path), torch.device("cpu"))
    assert exact.engine.exact_logprobs and not exact.credit.parts.engine_correction
    exact.close()


def test_setting_the_cap_where_nothing_can_differ_is_warned_about():
    cfg = load_config(None, ['model.dtype="float32"', "algorithm.engine_is_cap=3.0"])
    assert any(
        w.startswith("[algorithm] engine_is_cap: the transformers engine") for w in cfg.warnings
    )

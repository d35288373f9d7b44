"""LLM config checks: settings the trainer cannot honour are refused with the fix to make."""

from __future__ import annotations

import pytest

from ascent.config import load_config
from ascent.errors import ConfigError


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (['rollout.engine="vllm"'], "engine: 'vllm' is not available yet; valid: transformers"),
        (['data.task="countdown"'], 'countdown reward; set functions = \\["countdown"\\]'),
        (["train.save_steps=75", "train.eval_steps=50"], "try save_steps = 50"),
        (['data.prompt_template="Q:"'], "must contain \\{prompt\\}"),
        (["algorithm.is_cap=2.0"], "is_cap: the LLM trainer's rollouts are on-policy"),
    ],
)
def test_settings_the_trainer_cannot_honour_are_refused_at_load_time(overrides, message):
    with pytest.raises(ConfigError, match=message):
        load_config(None, overrides)

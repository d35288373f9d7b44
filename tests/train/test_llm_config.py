"""LLM config checks: settings the trainer cannot honour are refused with the fix to make."""

from __future__ import annotations

import pytest

from ascent.config import load_config
from ascent.errors import ConfigError

GAE = 'algorithm.advantage="gae"'
REPLAY = [GAE, "sampling.replay_ratio=0.25", "algorithm.is_cap=2.0"]


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (['rollout.engine="vllm"'], "engine: 'vllm' is not available yet; valid: transformers"),
        (['data.task="countdown"'], 'countdown reward; set functions = \\["countdown"\\]'),
        (["train.save_steps=75", "train.eval_steps=50"], "try save_steps = 50"),
        (['data.prompt_template="Q:"'], "must contain \\{prompt\\}"),
        (["algorithm.is_cap=2.0"], "is_cap: the LLM trainer's rollouts are on-policy"),
        # the critic
        (["critic.lr=1e-4"], r"\[critic\] lr: advantage 'grpo' uses no critic"),
        ([GAE, "critic.value_coef=1.0"], "value_coef: a separate critic has its own loss"),
        (
            [GAE, 'critic.architecture="head"', 'critic.name_or_path="x"'],
            "name_or_path: a value head",
        ),
        ([GAE, "critic.value_warmup_steps=1600"], "leave none of the 1600 total_steps"),
        (
            ['algorithm.advantage="grpo"', "algorithm.lam_critic=1.0"],
            "lam_critic: advantage 'grpo' does not use it",
        ),
        # sampling
        (["sampling.max_rounds=2"], r"\[sampling\] max_rounds: only dynamic sampling uses it"),
        (
            ["sampling.replay_ratio=0.25", "algorithm.is_cap=2.0"],
            "a replayed completion has no group",
        ),
        ([GAE, "sampling.replay_ratio=0.25"], r"set \[algorithm\] is_cap"),
        (
            [*REPLAY[:2], "sampling.replay_ratio=0.3", REPLAY[2]],
            "38.4 replayed .* whole groups of 8, so try replay_ratio = 0.25 or 0.3125",
        ),
        ([GAE, "sampling.replay_buffer_size=10"], "replay_buffer_size: replay_ratio is 0"),
        (
            ['reward.functions=["code"]', "sampling.history_resampling=true"],
            "history_resampling: it selects completions by",
        ),
        (
            ['reward.functions=["code"]', "algorithm.nll_coef=0.1"],
            "nll_coef: the NLL term trains on correct",
        ),
        # overlong handling
        (["algorithm.overlong_buffer=2"], 'overlong_buffer: only overlong = "penalty" uses it'),
        (['algorithm.overlong="penalty"'], "try overlong_buffer = 1"),
        (
            ['algorithm.overlong="penalty"', "algorithm.overlong_buffer=7"],
            "a buffer of 1 to max_new_tokens \\(6\\)",
        ),
        # stages
        (
            ['stages=[{name="a", rollout={max_new_tokens=0}}]'],
            r"\[stages\] a: stage 1: rollout.max_new_tokens: .*greater than",
        ),
        (
            ['stages=[{name="a", sampling={max_rounds=2}}]'],
            r"\[stages\] a: stage 1: .*max_rounds: only dynamic sampling",
        ),
        (['stages=[{name="a", model={name_or_path="x"}}]'], r"unknown key 'model' in \[stages\]"),
        (['stages=[{name="a"}, {name="a"}]'], "two stages share a name"),
    ],
)
def test_settings_the_trainer_cannot_honour_are_refused_at_load_time(overrides, message):
    with pytest.raises(ConfigError, match=message) as err:
        load_config(None, overrides)
    assert "\n" not in str(err.value)


def test_value_based_recipes_and_their_extras_load():
    cfg = load_config(None, [*REPLAY, "critic.value_warmup_steps=5", "algorithm.nll_coef=0.1"])
    assert cfg.replay_rows == 32 and cfg.critic.value_warmup_steps == 5
    staged = load_config(None, ['stages=[{name="a"}, {name="b", rollout={max_new_tokens=4}}]'])
    (_, a), (_, b) = staged.stage_configs()
    assert (a.rollout.max_new_tokens, b.rollout.max_new_tokens) == (6, 4)
    assert b.optim == staged.optim and not b.stages

"""LLM config checks: settings the trainer cannot honour are refused with the fix to make."""

from __future__ import annotations

import pytest

from ascent.configfile import load_config
from ascent.errors import ConfigError
from ascent.rules.llm_rules import replay_rows

GAE = 'algorithm.advantage="gae"'
REPLAY = [GAE, "sampling.replay_ratio=0.25", "algorithm.is_cap=2.0"]


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            ['rollout.engine="openai"'],
            "engine: 'openai' is not available yet; valid: transformers, vllm",
        ),
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
        # a policy loss's own keys
        (["algorithm.sapo_tau_neg=2.0"], "sapo_tau_neg: policy_loss 'ppo_clip' does not use it"),
        (
            ['algorithm.policy_loss="sapo"', "algorithm.clip_high=0.28"],
            r"clip_high: policy_loss 'sapo' does not use it \(it reads: sapo_tau_neg, sapo_tau_pos",
        ),
        (
            ['algorithm.policy_loss="cispo"', "algorithm.dual_clip=3.0"],
            "dual_clip: policy_loss 'cispo' does not use it",
        ),
        (['algorithm.advantage="rloo"', "algorithm.gamma=0.9"], "gamma: advantage 'rloo' does not"),
        (['algorithm.advantage="turn_grpo"'], 'set advantage = "grpo"'),
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
    assert replay_rows(cfg) == 32 and cfg.critic.value_warmup_steps == 5
    staged = load_config(None, ['stages=[{name="a"}, {name="b", rollout={max_new_tokens=4}}]'])
    (_, a), (_, b) = staged.stage_configs()
    assert (a.rollout.max_new_tokens, b.rollout.max_new_tokens) == (6, 4)
    assert b.optim == staged.optim and not b.stages


FOUR_STEPS = ["train.mini_batch_size=32", "train.micro_batch_size=32"]
AGENTIC = ["agentic.enabled=true", 'agentic.roles.hypothesis="off"', 'agentic.roles.testgen="off"',
           'agentic.roles.summarizer="off"']  # fmt: skip


@pytest.mark.parametrize(
    ("overrides", "warned"),
    [
        (["algorithm.clip_high=0.28"], "clip_high"),
        (["algorithm.clip_low=0.1", "algorithm.dual_clip=3.0"], "clip_low / dual_clip"),
        (["algorithm.clip_high=0.28", *AGENTIC], "clip_high"),  # the clip's anchor: pi_theta
        (["algorithm.clip_high=0.28", *FOUR_STEPS], None),
        (["algorithm.clip_high=0.28", "train.ppo_epochs=2"], None),
        (["algorithm.clip_high=0.28", *AGENTIC, "agentic.off_policy_correction=false"], None),
        ([], None),  # the defaults are no declaration
    ],
)
def test_a_clip_that_can_never_bind_is_warned_about_at_load_time(overrides, warned, run_cli):
    cfg = load_config(None, ["train.batch_size=128", *overrides])
    if warned is None:
        assert cfg.warnings == []
        return
    (warning,) = cfg.warnings
    assert warning.startswith(f"[algorithm] {warned}: one optimiser step per batch")
    assert "mini_batch_size = 32" in warning
    sets = [f"--set={o}" for o in ["train.batch_size=128", *overrides]]
    code, out, _ = run_cli("config", "show", *sets)
    assert code == 0 and f"# warning: [algorithm] {warned}:" in out


def test_the_recipes_that_declare_clip_higher_let_it_act():
    from pathlib import Path

    examples = Path(__file__).resolve().parents[2] / "examples"
    for name in ("dapo", "vapo"):
        cfg = load_config(examples / f"{name}.toml")
        assert cfg.algorithm.clip_high > cfg.algorithm.clip_low and cfg.warnings == []


def test_a_sandbox_without_isolation_is_warned_about():
    assert load_config(None).warnings == []
    cfg = load_config(None, ["sandbox.unsafe_local=true"])
    assert any("unsafe_local = true: model-written programs run WITHOUT isolation" in w
               for w in cfg.warnings)  # fmt: skip

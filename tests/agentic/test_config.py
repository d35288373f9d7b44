"""`[agentic]`: what it accepts, what it refuses (with the fix), and the recipes load."""

from __future__ import annotations

import pytest

from ascent.configfile import load_config
from ascent.errors import ConfigError

ON = ["agentic.enabled=true", 'agentic.roles.hypothesis="off"', 'agentic.roles.testgen="scripted"',
      'agentic.roles.summarizer="scripted"']  # fmt: skip


def test_defaults_are_the_write_ups():
    a = load_config(None, ON).agentic
    assert (a.max_turns, a.summarize_threshold, a.context_window) == (6, 24000, 32768)
    assert (a.immediate_reward_weight, a.delayed_reward_weight) == (0.3, 0.7)
    assert (a.adversarial_penalty, a.correction_clip, a.off_policy_correction) == (-0.5, 5.0, True)
    code = load_config(None, ON).reward.code  # the tiers are [reward.code]'s, not a copy
    assert (code.compile_reward, code.sample_reward, code.pass_reward) == (0.1, 0.3, 1.0)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (['agentic.roles.hypothesis="api"'], 'add hypothesis_model = "name" to [models]'),
        (['agentic.roles.solver="off"'], "solver cannot be"),
        (['agentic.roles.solver="scripted"'], "no role is played by the trained policy"),
        (["agentic.summarize_threshold=40000"], "must be below context_window"),
        (["agentic.immediate_reward_weight=0", "agentic.delayed_reward_weight=0"], "both 0"),
        (['algorithm.advantage="gae"'], "must be grpo or dr_grpo"),
        (['algorithm.kl_mode="reward"', "algorithm.kl_coef=0.01"], 'kl_mode = "loss"'),
        (["algorithm.is_cap=5.0"], "correction_clip"),
        (['data.task="countdown"', 'reward.functions=["countdown"]'], "'countdown' has none"),
        (["rollout.top_p=0.9"], "off_policy_correction would weight tokens by the wrong"),
        (["rollout.top_k=20"], "set top_k = 0 and top_p = 1.0"),
    ],
)
def test_settings_agentic_episodes_cannot_honour_are_refused(overrides, message):
    with pytest.raises(ConfigError, match=r"agentic|algorithm|data") as err:
        load_config(None, [*ON, *overrides])
    assert message in str(err.value)


def test_a_context_window_below_the_default_threshold_is_fine_without_a_summarizer():
    cfg = load_config(None, [*ON, 'agentic.roles.summarizer="off"', "agentic.context_window=4096"])
    assert cfg.agentic.context_window == 4096 < cfg.agentic.summarize_threshold


def test_truncated_sampling_is_accepted_without_the_off_policy_correction():
    # The recorded log-probs are of the untruncated policy (ascent.rollout.sampling), which
    # only the correction's weight pi_old / pi_behaviour would read as the sampler's.
    cfg = load_config(None, [*ON, "rollout.top_p=0.9", "agentic.off_policy_correction=false"])
    assert cfg.rollout.top_p == 0.9


def test_is_cap_is_still_refused_outside_agentic_runs():
    with pytest.raises(ConfigError, match="on-policy"):
        load_config(None, ["algorithm.is_cap=5.0"])


def test_agentic_settings_are_checked_only_when_enabled():
    cfg = load_config(None, ['agentic.roles.hypothesis="api"'])  # off: nothing to check
    assert not cfg.agentic.enabled


@pytest.mark.parametrize("recipe", ["examples/agentic_tiny.toml", "examples/agentic_grpo.toml"])
def test_agentic_recipes_load(recipe):
    cfg = load_config(recipe)
    assert cfg.agentic.enabled and cfg.agentic.roles.solver == "policy"


@pytest.mark.parametrize(
    "setting",
    ["algorithm.nll_coef=0.1", 'algorithm.overlong="mask"', "sampling.dynamic=true",
     "sampling.history_resampling=true", "sampling.replay_ratio=0.3"],
)  # fmt: skip
def test_single_completion_features_are_refused_in_agentic_runs(setting):
    with pytest.raises(ConfigError, match="agentic episodes do not support it"):
        load_config(None, [*ON, setting])


@pytest.mark.parametrize(
    ("overrides", "why"),
    [
        (["agentic.off_policy_correction=false", "agentic.correction_clip=3"], "correction"),
        (["agentic.api_max_tokens=100"], "no role is served by the API"),
        (['agentic.roles.testgen="off"', "agentic.adversarial_penalty=-1"], "testgen"),
        (['agentic.roles.testgen="api"', "agentic.testgen_reward_weight=2"], "testgen not played"),
        (['agentic.roles.summarizer="off"', "agentic.summarize_threshold=100"], "summarizer"),
    ],
)
def test_keys_whose_mechanism_is_off_are_refused(overrides, why):
    with pytest.raises(ConfigError, match="does nothing with") as err:
        load_config(None, [*ON, *overrides])
    assert why in str(err.value)

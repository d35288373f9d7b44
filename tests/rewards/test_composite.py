"""Several rewards weighted into one: registry names, import paths, weights, None, errors."""

from __future__ import annotations

import pytest

from ascent.config.rewards import RewardSection, SandboxSection
from ascent.errors import AscentError, UnknownNameError
from ascent.rewards import REWARDS, CompositeReward, RewardOutput, build_reward

CUSTOM = "tests.rewards.custom_rewards"


def build(functions: list[str], weights: list[float] | None = None) -> CompositeReward:
    return build_reward(RewardSection(functions=functions, weights=weights or []), SandboxSection())


def test_builtin_rewards_are_registered_by_name():
    assert {"math", "code"} <= set(REWARDS.names())


def test_unknown_reward_name_lists_the_valid_ones():
    with pytest.raises(UnknownNameError, match=r"unknown reward 'maths' \(did you mean 'math'\?\)"):
        build(["maths"])


def test_a_builder_registered_by_another_module_is_built_with_both_sections():
    seen = {}

    def build_echo(reward_cfg, sandbox_cfg):
        seen["sections"] = (type(reward_cfg).__name__, type(sandbox_cfg).__name__)
        return lambda prompts, completions, **columns: [2.0] * len(completions)

    REWARDS.register("test-echo")(build_echo)
    try:
        out = build(["test-echo"])(["p", "q"], ["a", "b"])
    finally:
        REWARDS._items.pop("test-echo")  # the registry has no public way to forget a name
        REWARDS._meta.pop("test-echo")
    assert seen["sections"] == ("RewardSection", "SandboxSection")
    assert out.total == [2.0, 2.0]
    with pytest.raises(ValueError, match="already registered"):
        REWARDS.register("math")(build_echo)


def test_weighted_total_skips_components_that_do_not_apply():
    reward = build([f"{CUSTOM}:length_reward", f"{CUSTOM}:first_only"], [2.0, 0.5])
    out = reward(["p"] * 3, ["ab", "abcd", ""])
    assert isinstance(out, RewardOutput)
    # length: 0.2, 0.4, 0.0 (x2); first_only: 1.0, None, None (x0.5)
    assert out.total == pytest.approx([0.9, 0.8, 0.0])
    assert out.components == {
        f"{CUSTOM}:length_reward": pytest.approx([0.2, 0.4, 0.0]),
        f"{CUSTOM}:first_only": [1.0, None, None],
    }


def test_a_sample_no_component_applies_to_has_no_total():
    # TRL's rule: every reward None -> the sample's reward is None (the trainer masks it), not 0.
    reward = build([f"{CUSTOM}:first_only", f"{CUSTOM}:first_only_negative"], [1.0, 2.0])
    out = reward(["p"] * 2, ["a", "b"])
    assert out.total == [1.0 - 2.0, None]


def test_empty_weights_mean_one_each_and_columns_reach_custom_functions():
    reward = build([f"{CUSTOM}:uses_a_column", f"{CUSTOM}:length_reward"])
    out = reward(["p", "p"], ["yes", "no"], target=["yes", "yes"])
    assert out.total == pytest.approx([1.0 + 0.3, 0.0 + 0.2])


def test_details_are_kept_per_sample_and_per_component():
    reward = build(["math", f"{CUSTOM}:first_only"])
    try:
        out = reward(["p", "p"], ["\\boxed{4}", "\\boxed{5}"], answer=["4", "4"])
    finally:
        reward.close()
    assert out.total == [2.0, -1.0]
    assert out.details[0]["math"]["extracted"] == "4"
    assert out.details[1]["math"]["outcome"] == "not_equal"
    assert f"{CUSTOM}:first_only" not in out.details[0]  # a plain function has no details


def test_submit_scores_in_the_background_with_the_same_result():
    reward = build([f"{CUSTOM}:length_reward"])
    try:
        future = reward.submit(["p"], ["abc"])
        assert future.result(timeout=30).total == reward(["p"], ["abc"]).total
    finally:
        reward.close()


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("tests.rewards.no_such_module:f", "cannot import tests.rewards.no_such_module"),
        (f"{CUSTOM}:missing", "has no attribute 'missing'"),
        (f"{CUSTOM}:NOT_CALLABLE", "is not callable"),
        (":f", "package.module:function"),
    ],
)
def test_bad_import_paths_say_what_is_wrong(name, message):
    with pytest.raises(AscentError, match=message):
        build([name])


@pytest.mark.parametrize(
    ("name", "message"),
    [("too_few", "returned 1 values for 2 completions"), ("not_a_number", "must be a number")],
)
def test_bad_reward_values_are_refused(name, message):
    reward = build([f"{CUSTOM}:{name}"])
    with pytest.raises(AscentError, match=message):
        reward(["p", "p"], ["a", "b"])


def test_config_refuses_weights_that_do_not_match_and_repeated_functions():
    with pytest.raises(ValueError, match="weights has 1 values for 2 functions"):
        RewardSection(functions=["math", "code"], weights=[1.0])
    with pytest.raises(ValueError, match="same reward twice"):
        RewardSection(functions=["math", "math"])
    with pytest.raises(ValueError):
        RewardSection(functions=[])

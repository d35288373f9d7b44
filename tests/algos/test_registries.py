"""The algorithm registries: names, errors, refusal of conflicting registrations."""

from __future__ import annotations

import pytest

from ascent.algos import ADVANTAGES, AGGREGATIONS, KL_ESTIMATORS, POLICY_LOSSES
from ascent.errors import UnknownNameError


def test_registries_hold_the_documented_names():
    assert ADVANTAGES.names() == [
        "dr_grpo",
        "gae",
        "grpo",
        "length_adaptive_gae",
        "reinforce_pp",
        "reinforce_pp_baseline",
        "rloo",
        "turn_dr_grpo",
        "turn_grpo",
    ]
    assert POLICY_LOSSES.names() == ["cispo", "gspo", "ppo_clip", "sapo", "vanilla_pg"]
    assert AGGREGATIONS.names() == [
        "seq_mean_token_mean",
        "seq_mean_token_sum",
        "seq_mean_token_sum_norm",
        "token_mean",
    ]
    assert KL_ESTIMATORS.names() == ["k1", "k2", "k3"]


@pytest.mark.parametrize("registry", [ADVANTAGES, POLICY_LOSSES, AGGREGATIONS, KL_ESTIMATORS])
def test_unknown_name_error_lists_the_valid_names(registry):
    with pytest.raises(UnknownNameError) as info:
        registry.get("no_such_thing")
    message = str(info.value)
    assert "no_such_thing" in message
    for name in registry.names():
        assert name in message


def test_unknown_name_suggests_the_closest_one():
    with pytest.raises(UnknownNameError, match="did you mean 'grpo'"):
        ADVANTAGES.get("gpro")


@pytest.mark.parametrize("registry", [ADVANTAGES, POLICY_LOSSES, AGGREGATIONS, KL_ESTIMATORS])
def test_re_registering_a_name_to_another_function_raises(registry):
    name = registry.names()[0]
    original = registry.get(name)
    with pytest.raises(ValueError, match="already registered"):
        registry.register(name)(lambda *args: None)
    assert registry.get(name) is original


def test_re_registering_the_same_function_is_harmless():
    fn = ADVANTAGES.get("gae")
    assert ADVANTAGES.register("gae", **ADVANTAGES.meta("gae"))(fn) is fn

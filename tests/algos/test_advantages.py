"""Advantage estimators against hand computations and plain-Python reference loops."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from ascent.algos import ADVANTAGES, AdvantageBatch, AdvantageParams, Turns, length_adaptive_lambda

F64 = torch.float64


def t(rows: list[list[float]]) -> torch.Tensor:
    return torch.tensor(rows, dtype=F64)


def run(name: str, batch: AdvantageBatch, **params: float | None):
    return ADVANTAGES.get(name)(batch, AdvantageParams(**params))


# Row 0: an LLM turn, a tool observation token (masked out), another turn, then padding.
# Row 1: a classic-RL stream: step 1 terminates an episode, step 3 is a time-limit
# truncation (bootstrapped with V(final obs) = 5.0), step 4 ends the rollout mid-episode
# (bootstrapped with V(next obs) = 3.0).
MASK = t([[1, 1, 0, 1, 0], [1, 1, 1, 1, 1]])
REWARDS = t([[0, 0, 7, 1, 0], [1, 1, 1, 1, 1]])  # the 7 sits on the observation: ignored
VALUES = t([[0.5, 0.6, 9.0, 0.8, 9.0], [2.0, 1.0, 3.0, 2.0, 4.0]])
NEXT_VALUES = t([[0.6, 0.8, 0.0, 0.0, 0.0], [1.0, 0.0, 2.0, 5.0, 3.0]])
ENDS = t([[0, 0, 0, 0, 0], [0, 1, 0, 1, 0]])


def test_gae_matches_hand_computation_with_terminal_truncation_observation_and_padding():
    batch = AdvantageBatch(REWARDS, MASK, VALUES, NEXT_VALUES, ENDS)
    result = run("gae", batch, gamma=0.9, lam=0.8)
    # gamma * lam = 0.72.
    # Row 0: d3 = 1 + 0 - 0.8 = 0.2; d1 = 0.9*0.8 - 0.6 = 0.12 (jumps over the observation);
    #        d0 = 0.9*0.6 - 0.5 = 0.04.
    #        A3 = 0.2; A1 = 0.12 + 0.72*0.2 = 0.264; A0 = 0.04 + 0.72*0.264 = 0.23008.
    # Row 1: A4 = 1 + 0.9*3 - 4 = -0.3; A3 = 1 + 0.9*5 - 2 = 3.5 (cut: truncated);
    #        A2 = 1 + 0.9*2 - 3 + 0.72*3.5 = 2.32; A1 = 1 + 0 - 1 = 0 (cut: terminal);
    #        A0 = 1 + 0.9*1 - 2 + 0.72*0 = -0.1.
    expected = t([[0.23008, 0.264, 0, 0.2, 0], [-0.1, 0.0, 2.32, 3.5, -0.3]])
    torch.testing.assert_close(result.advantages, expected)
    # Returns use lam_critic = lam = 0.8: A + V on masked steps.
    expected_returns = t([[0.73008, 0.864, 0, 1.0, 0], [1.9, 1.0, 5.32, 5.5, 3.7]])
    torch.testing.assert_close(result.returns, expected_returns)


def test_decoupled_gae_returns_use_lam_critic():
    batch = AdvantageBatch(REWARDS, MASK, VALUES, NEXT_VALUES, ENDS)
    result = run("gae", batch, gamma=0.9, lam=0.8, lam_critic=1.0)
    # lam_critic = 1 gives discounted Monte-Carlo returns, bootstrapped at truncations:
    # row 0: R3 = 1, R1 = 0.9*1, R0 = 0.81; row 1: R4 = 1 + 0.9*3 = 3.7, R3 = 1 + 0.9*5 = 5.5,
    # R2 = 1 + 0.9*5.5 = 5.95, R1 = 1 (terminal), R0 = 1 + 0.9*1 = 1.9.
    expected_returns = t([[0.81, 0.9, 0, 1.0, 0], [1.9, 1.0, 5.95, 5.5, 3.7]])
    torch.testing.assert_close(result.returns, expected_returns)
    # The policy advantages still use lam = 0.8.
    torch.testing.assert_close(result.advantages[1, 2], torch.tensor(2.32, dtype=F64))


def test_gae_derives_next_values_from_the_next_masked_step():
    batch = AdvantageBatch(REWARDS[:1], MASK[:1], VALUES[:1])
    result = run("gae", batch, gamma=0.9, lam=0.8)
    torch.testing.assert_close(result.advantages, t([[0.23008, 0.264, 0, 0.2, 0]]))


def test_gae_episode_end_without_next_values_means_termination():
    rewards, mask, values = t([[1, 0, 1]]), t([[1, 1, 1]]), t([[0.2, 0.4, 0.6]])
    ended = run("gae", AdvantageBatch(rewards, mask, values, episode_ends=t([[1, 0, 0]])))
    # gamma = lam = 1. A2 = 1 - 0.6 = 0.4; A1 = 0.6 - 0.4 + 0.4 = 0.6; A0 = 1 + 0 - 0.2 = 0.8.
    torch.testing.assert_close(ended.advantages, t([[0.8, 0.6, 0.4]]))
    joined = run("gae", AdvantageBatch(rewards, mask, values))
    # Without the end: A0 = 1 + 0.4 - 0.2 + 0.6 = 1.8.
    torch.testing.assert_close(joined.advantages, t([[1.8, 0.6, 0.4]]))


def test_gae_without_values_is_refused():
    with pytest.raises(ValueError, match="needs critic values"):
        run("gae", AdvantageBatch(t([[1.0]]), t([[1.0]])))


def reward_to_go(rewards: list[list[float]], mask: list[list[int]]) -> list[list[float]]:
    out = []
    for r_row, m_row in zip(rewards, mask, strict=True):
        row = []
        for i in range(len(r_row)):
            later = sum(r for r, m in zip(r_row[i:], m_row[i:], strict=True) if m)
            row.append(later if m_row[i] else 0.0)
        out.append(row)
    return out


rows_st = st.integers(1, 4).flatmap(
    lambda b: st.integers(1, 6).flatmap(
        lambda n: st.tuples(
            st.lists(st.lists(st.integers(-3, 3), min_size=n, max_size=n), min_size=b, max_size=b),
            st.lists(st.lists(st.integers(0, 1), min_size=n, max_size=n), min_size=b, max_size=b),
        )
    )
)


@settings(max_examples=40, deadline=None)
@given(rows_st)
def test_gae_with_unit_gamma_lam_and_zero_values_is_reward_to_go(rows):
    rewards, mask = rows
    batch = AdvantageBatch(
        t(rewards), t(mask), values=torch.zeros(len(rewards), len(rewards[0]), dtype=F64)
    )
    result = run("gae", batch, gamma=1.0, lam=1.0)
    torch.testing.assert_close(result.advantages.double(), t(reward_to_go(rewards, mask)))
    torch.testing.assert_close(result.returns.double(), t(reward_to_go(rewards, mask)))


def reference_gae(rewards, mask, values, ends, gamma, lam):
    """Plain loop: per row, walk the masked steps backwards, cutting at episode ends."""
    out = []
    for r, m, v, e in zip(rewards, mask, values, ends, strict=True):
        steps = [i for i in range(len(r)) if m[i]]
        adv = [0.0] * len(r)
        running, next_value = 0.0, 0.0
        for k in reversed(range(len(steps))):
            i = steps[k]
            is_last = k == len(steps) - 1
            if e[i] or is_last:
                running, next_value = 0.0, 0.0
            delta = r[i] + gamma * next_value - v[i]
            running = delta + gamma * lam * running
            adv[i] = running
            next_value = v[i]
        out.append(adv)
    return out


@settings(max_examples=40, deadline=None)
@given(
    rows_st,
    st.data(),
    st.floats(0.0, 1.0),
    st.floats(0.0, 1.0),
)
def test_gae_matches_a_plain_loop_on_random_masks_and_episode_ends(rows, data, gamma, lam):
    rewards, mask = rows
    shape = (len(rewards), len(rewards[0]))
    cell = st.lists(st.floats(-2, 2), min_size=shape[1], max_size=shape[1])
    values = data.draw(st.lists(cell, min_size=shape[0], max_size=shape[0]))
    bit = st.lists(st.integers(0, 1), min_size=shape[1], max_size=shape[1])
    ends = data.draw(st.lists(bit, min_size=shape[0], max_size=shape[0]))
    batch = AdvantageBatch(t(rewards), t(mask), t(values), episode_ends=t(ends))
    result = run("gae", batch, gamma=gamma, lam=lam)
    expected = reference_gae(rewards, mask, values, ends, gamma, lam)
    torch.testing.assert_close(result.advantages, t(expected))


def test_length_adaptive_gae_matches_hand_computation():
    # alpha = 0.5: row 0 has 4 tokens -> lam = 1 - 1/2 = 0.5; row 1 has 1 token ->
    # 1 - 1/0.5 = -1, clamped to 0.
    mask = t([[1, 1, 1, 1], [1, 0, 0, 0]])
    rewards = t([[0, 0, 0, 1], [1, 0, 0, 0]])
    values = t([[0.1, 0.2, 0.3, 0.4], [0.5, 0, 0, 0]])
    result = run("length_adaptive_gae", AdvantageBatch(rewards, mask, values), length_alpha=0.5)
    # Row 0, gamma = 1: deltas d3 = 1 - 0.4 = 0.6, d2 = d1 = d0 = 0.1;
    # A3 = 0.6, A2 = 0.1 + 0.5*0.6 = 0.4, A1 = 0.1 + 0.5*0.4 = 0.3, A0 = 0.1 + 0.15 = 0.25.
    expected = t([[0.25, 0.3, 0.4, 0.6], [0.5, 0, 0, 0]])
    torch.testing.assert_close(result.advantages, expected)
    # lam_critic unset -> 1.0 for this estimator: returns are the Monte-Carlo return, 1.
    torch.testing.assert_close(result.returns, t([[1, 1, 1, 1], [1, 0, 0, 0]]))


def test_length_adaptive_gae_honours_an_explicit_lam_critic():
    mask, rewards = t([[1, 1]]), t([[0, 1]])
    values = t([[0.5, 0.5]])
    result = run("length_adaptive_gae", AdvantageBatch(rewards, mask, values), lam_critic=0.0)
    # lam_critic = 0: one-step TD targets. R1 = 1, R0 = 0 + V1 = 0.5.
    torch.testing.assert_close(result.returns, t([[0.5, 1.0]]))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 500), min_size=1, max_size=8), st.floats(0.001, 1.0))
def test_length_adaptive_lambda_is_the_clamped_formula(lengths, alpha):
    got = length_adaptive_lambda(torch.tensor(lengths), alpha)
    for value, length in zip(got.tolist(), lengths, strict=True):
        expected = 0.0 if length == 0 else min(1.0, max(0.0, 1.0 - 1.0 / (alpha * length)))
        assert math.isclose(value, expected, abs_tol=1e-12)


# Five completions of two prompts, interleaved: ids 4 and 9 (not 0..G-1, not contiguous).
GROUP_IDS = torch.tensor([4, 9, 4, 9, 4])
# Sequence rewards: row 0: 0.5 + 0.5 = 1 (two per-turn rewards); row 1: 0 (the 5 is on a
# masked-out token); row 2: 0; row 3: 1; row 4: 1.
GROUP_MASK = t([[1, 1, 1], [1, 1, 0], [1, 0, 0], [1, 1, 1], [1, 1, 0]])
GROUP_REWARDS = t([[0, 0.5, 0.5], [0, 0, 5], [0, 0, 0], [0, 0, 1], [0, 1, 0]])


def test_grpo_advantage_matches_hand_computation():
    batch = AdvantageBatch(GROUP_REWARDS, GROUP_MASK, group_ids=GROUP_IDS)
    result = run("grpo", batch, std_eps=0.0)
    # Group 4: rewards (1, 0, 1), mean 2/3, unbiased std sqrt((1/9 + 4/9 + 1/9) / 2) = 1/sqrt(3);
    # advantages (1/3, -2/3, 1/3) * sqrt(3) = (0.57735, -1.15470, 0.57735).
    # Group 9: rewards (0, 1), mean 1/2, unbiased std sqrt(1/2); advantages -/+ 0.70711.
    a, b, c = 0.5773503, -1.1547005, 0.7071068
    expected = t([[a, a, a], [-c, -c, 0], [b, 0, 0], [c, c, c], [a, a, 0]])
    torch.testing.assert_close(result.advantages, expected)
    expected_returns = t([[1, 1, 1], [0, 0, 0], [0, 0, 0], [1, 1, 1], [1, 1, 0]])
    torch.testing.assert_close(result.returns, expected_returns)


def test_grpo_zero_variance_group_gets_zero_advantage():
    ids = torch.tensor([0, 0, 1, 1])
    batch = AdvantageBatch(t([[1], [1], [0], [1]]), t([[1], [1], [1], [1]]), group_ids=ids)
    result = run("grpo", batch)
    assert result.advantages[0, 0] == 0 and result.advantages[1, 0] == 0


def test_dr_grpo_advantage_is_centred_but_not_scaled():
    batch = AdvantageBatch(GROUP_REWARDS, GROUP_MASK, group_ids=GROUP_IDS)
    result = run("dr_grpo", batch)
    a, b = 1 / 3, -2 / 3
    expected = t([[a, a, a], [-0.5, -0.5, 0], [b, 0, 0], [0.5, 0.5, 0.5], [a, a, 0]])
    torch.testing.assert_close(result.advantages, expected)


@pytest.mark.parametrize("name", ["grpo", "dr_grpo", "rloo", "reinforce_pp_baseline"])
def test_group_of_one_is_refused(name):
    batch = AdvantageBatch(
        t([[1], [0], [1]]), t([[1], [1], [1]]), group_ids=torch.tensor([3, 3, 8])
    )
    with pytest.raises(ValueError, match=r"group\(s\) \[8\] have a single completion"):
        run(name, batch)


@pytest.mark.parametrize("name", ["grpo", "dr_grpo", "rloo", "reinforce_pp_baseline"])
def test_group_estimators_need_group_ids(name):
    with pytest.raises(ValueError, match="needs group_ids"):
        run(name, AdvantageBatch(t([[1], [0]]), t([[1], [1]])))


groups_st = st.lists(
    st.lists(st.integers(-4, 4).map(lambda x: x / 2), min_size=2, max_size=4),
    min_size=1,
    max_size=4,
).flatmap(
    lambda groups: st.permutations(
        [(10 * g + 3, r) for g, rewards in enumerate(groups) for r in rewards]
    )
)


@pytest.mark.parametrize("name", ["grpo", "dr_grpo"])
@settings(max_examples=40, deadline=None)
@given(groups_st)
def test_group_advantages_sum_to_zero_within_each_group(name, members):
    ids = [g for g, _ in members]
    rewards = t([[r, 0.0] for _, r in members])
    mask = t([[1, 0] for _ in members])
    batch = AdvantageBatch(rewards, mask, group_ids=torch.tensor(ids))
    adv = run(name, batch).advantages[:, 0]
    for g in set(ids):
        total = sum(a for a, i in zip(adv.tolist(), ids, strict=True) if i == g)
        assert abs(total) < 1e-9


def test_every_estimator_shares_one_signature_and_declares_its_parameters():
    turns = Turns(  # read by the turn-level (agentic) estimators only
        token_turn=torch.tensor([[0, 0], [1, 1]]),
        rewards=torch.tensor([0.1, 0.5]),
        pools=torch.tensor([0, 0]),
        episodes=torch.tensor([0, 1]),
        episode_rewards=torch.tensor([1.0, 0.0]),
        episode_groups=torch.tensor([0, 0]),
    )
    batch = AdvantageBatch(
        t([[0, 1], [0, 0]]),
        t([[1, 1], [1, 1]]),
        t([[0.1, 0.2], [0.3, 0.4]]),
        group_ids=torch.tensor([0, 0]),
        turns=turns,
    )
    fields = set(AdvantageParams.__dataclass_fields__)
    for name in ADVANTAGES.names():
        meta = ADVANTAGES.meta(name)
        assert meta["uses"] <= fields
        assert isinstance(meta["needs_values"], bool)
        result = ADVANTAGES.get(name)(batch, AdvantageParams())
        assert result.advantages.shape == result.returns.shape == (2, 2)
    assert ADVANTAGES.meta("gae")["needs_values"] and not ADVANTAGES.meta("grpo")["needs_values"]


def test_rloo_baseline_is_the_mean_of_the_other_completions():
    # group 7: rewards 1, 0, 0, 1; group 3: 2, 5. Row 0 has two response tokens.
    rewards = t([[0, 1], [0, 0], [0, 0], [0, 1], [0, 2], [0, 5]])
    mask = t([[1, 1], [0, 1], [0, 1], [0, 1], [0, 1], [0, 1]])
    batch = AdvantageBatch(rewards, mask, group_ids=torch.tensor([7, 7, 7, 7, 3, 3]))
    adv = run("rloo", batch).advantages
    one, zero = 1 - (0 + 0 + 1) / 3, 0 - (1 + 0 + 1) / 3
    expected = t([[one, one], [0, zero], [0, zero], [0, one], [0, 2 - 5], [0, 5 - 2]])
    torch.testing.assert_close(adv, expected)


def test_reinforce_pp_is_the_discounted_reward_to_go_over_policy_tokens():
    # A KL penalty on every token, the outcome on the last one; token 1 of row 0 is an
    # observation (mask 0): the return skips it, as GAE does.
    rewards = t([[-0.1, 9.0, -0.1, 1.0 - 0.1], [-0.2, -0.2, 0.0, 0.0]])
    mask = t([[1, 0, 1, 1], [1, 1, 0, 0]])
    adv = run("reinforce_pp", AdvantageBatch(rewards, mask), gamma=0.5).advantages
    r0 = [-0.1 + 0.5 * (-0.1 + 0.5 * 0.9), 0.0, -0.1 + 0.5 * 0.9, 0.9]
    r1 = [-0.2 + 0.5 * -0.2, -0.2, 0.0, 0.0]
    torch.testing.assert_close(adv, t([r0, r1]))


def test_reinforce_pp_baseline_subtracts_the_group_mean_at_the_last_token():
    rewards = t([[0, 1], [0, 0], [0, 0], [0, 0]])
    mask = t([[1, 1], [1, 1], [0, 1], [0, 1]])
    batch = AdvantageBatch(rewards, mask, group_ids=torch.tensor([1, 1, 2, 2]))
    adv = run("reinforce_pp_baseline", batch).advantages  # gamma 1: the return is the sum
    torch.testing.assert_close(adv, t([[0.5, 0.5], [-0.5, -0.5], [0, 0], [0, 0]]))


def test_reinforce_pp_estimators_are_whitened_by_the_trainer():
    from ascent.configfile import load_config
    from ascent.train.parts import algorithm_parts

    for name in ("reinforce_pp", "reinforce_pp_baseline"):
        assert ADVANTAGES.meta(name)["whitened"]
        parts = algorithm_parts(load_config(None, [f'algorithm.advantage="{name}"']))
        assert parts.normalize_advantages
    assert not algorithm_parts(
        load_config(None, ['algorithm.advantage="rloo"'])
    ).normalize_advantages

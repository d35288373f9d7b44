"""Credit assignment: immediate per-turn and delayed per-episode advantages, by hand."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
import torch

from ascent.algos import ADVANTAGES, AdvantageBatch, AdvantageParams, Turns
from ascent.algos.agentic import agentic_credit, group_normalise, turn_advantages_to_tokens


def normalised(values: list[float]) -> list[float]:
    mean = sum(values) / len(values)
    std = math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))
    return [(v - mean) / std for v in values]


def test_credit_matches_hand_computation_on_a_two_turn_episode():
    # One problem, G = 2 episodes. Episode A: attempt 1 compiles and passes the samples but a
    # confirmed generated test breaks it (0.3 - 0.5), attempt 2 passes (0.3); its submitted
    # program passes the hidden tests (delayed 1.0). Episode B: one attempt that only
    # compiles (0.1), hidden tests fail (delayed 0.0).
    turn_rewards = torch.tensor([0.3 - 0.5, 0.3, 0.1])
    credit = agentic_credit(
        turn_rewards,
        turn_pools=torch.tensor([0, 0, 0]),  # all three are solve turns of the same problem
        turn_episodes=torch.tensor([0, 0, 1]),
        episode_rewards=torch.tensor([1.0, 0.0]),
        episode_groups=torch.tensor([7, 7]),
        immediate_weight=0.3,
        delayed_weight=0.7,
        eps=0.0,
    )
    imm = normalised([-0.2, 0.3, 0.1])
    delay = normalised([1.0, 0.0])
    expected = [
        0.3 * imm[0] + 0.7 * delay[0],  # A's first turn: broken, but its episode succeeded
        0.3 * imm[1] + 0.7 * delay[0],
        0.3 * imm[2] + 0.7 * delay[1],
    ]
    assert credit.advantages.tolist() == pytest.approx(expected, abs=1e-6)
    assert credit.immediate.tolist() == pytest.approx(imm, abs=1e-6)
    assert credit.delayed.tolist() == pytest.approx([delay[0], delay[0], delay[1]], abs=1e-6)
    # The broken first attempt gets less credit than the fix in the same episode.
    assert credit.advantages[0] < credit.advantages[1]


def test_weights_select_immediate_only_or_delayed_only():
    args = (
        torch.tensor([-0.2, 0.3, 0.1]),
        torch.tensor([0, 0, 0]),
        torch.tensor([0, 0, 1]),
        torch.tensor([1.0, 0.0]),
        torch.tensor([7, 7]),
    )
    only_imm = agentic_credit(*args, immediate_weight=1.0, delayed_weight=0.0)
    only_delay = agentic_credit(*args, immediate_weight=0.0, delayed_weight=1.0)
    assert torch.allclose(only_imm.advantages, only_imm.immediate)
    assert torch.allclose(only_delay.advantages, only_delay.delayed)
    # Delayed-only credit cannot tell the two turns of episode A apart.
    assert only_delay.advantages[0] == only_delay.advantages[1]


def test_turns_are_normalised_within_their_own_pool_and_group():
    # Two problems; the testgen turns form their own pool: their +0.5 adversarial credit is not
    # compared with the solver's tiers.
    rewards = torch.tensor([0.1, 0.3, 0.5, 0.0, 0.1, 0.1])
    pools = torch.tensor([0, 0, 1, 1, 2, 2])
    out = group_normalise(rewards, pools, eps=0.0)
    assert out[:4].tolist() == pytest.approx(normalised([0.1, 0.3]) + normalised([0.5, 0.0]))
    assert out[4:].tolist() == [0.0, 0.0]  # equal rewards: no signal
    assert group_normalise(torch.tensor([0.7]), torch.tensor([3])).tolist() == [0.0]


def test_dr_grpo_variant_only_centres():
    out = group_normalise(torch.tensor([1.0, 0.0, 0.0, 0.0]), torch.tensor([1, 1, 1, 1]),
                          scale_by_std=False)  # fmt: skip
    assert out.tolist() == pytest.approx([0.75, -0.25, -0.25, -0.25])


def test_turn_advantages_land_on_their_tokens_only():
    token_turn = torch.tensor([[0, 0, -1, -1, 1, 1, -1], [2, -1, -1, -1, -1, -1, -1]])
    tokens = turn_advantages_to_tokens(torch.tensor([0.5, -1.0, 2.0]), token_turn)
    assert tokens.tolist() == [
        [0.5, 0.5, 0.0, 0.0, -1.0, -1.0, 0.0],
        [2.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0],
    ]


def two_episode_batch() -> AdvantageBatch:
    """Episode A (row 0): turn 0, an observation token, turn 1; episode B (row 1): turn 2 on
    two tokens, then padding. One problem, one pool of solve turns."""
    turns = Turns(
        token_turn=torch.tensor([[0, -1, 1], [2, 2, -1]]),
        rewards=torch.tensor([-0.2, 0.3, 0.1]),
        pools=torch.tensor([0, 0, 0]),
        episodes=torch.tensor([0, 0, 1]),
        episode_rewards=torch.tensor([1.0, 0.0]),
        episode_groups=torch.tensor([7, 7]),
    )
    mask = torch.tensor([[1.0, 0.0, 1.0], [1.0, 1.0, 0.0]])
    return AdvantageBatch(torch.zeros(2, 3), mask, group_ids=torch.tensor([7, 7]), turns=turns)


def test_turn_grpo_estimator_puts_each_turns_credit_on_its_policy_tokens():
    params = AdvantageParams(std_eps=0.0, immediate_weight=0.3, delayed_weight=0.7)
    result = ADVANTAGES.get("turn_grpo")(two_episode_batch(), params)
    imm, delay = normalised([-0.2, 0.3, 0.1]), normalised([1.0, 0.0])
    a0, a1 = 0.3 * imm[0] + 0.7 * delay[0], 0.3 * imm[1] + 0.7 * delay[0]
    a2 = 0.3 * imm[2] + 0.7 * delay[1]
    expected = torch.tensor([[a0, 0.0, a1], [a2, a2, 0.0]])
    assert torch.allclose(result.advantages, expected, atol=1e-6)
    assert result.metrics["adv/delayed_std"] > 0 and result.metrics["adv/immediate_std"] > 0


def test_turn_dr_grpo_estimator_only_centres():
    params = AdvantageParams(immediate_weight=0.0, delayed_weight=1.0)
    result = ADVANTAGES.get("turn_dr_grpo")(two_episode_batch(), params)
    assert torch.allclose(result.advantages, torch.tensor([[0.5, 0.0, 0.5], [-0.5, -0.5, 0.0]]))


def test_turn_estimators_refuse_a_batch_without_turns_and_credit_a_blank_row_nothing():
    plain = AdvantageBatch(torch.zeros(1, 2), torch.ones(1, 2), group_ids=torch.tensor([0]))
    with pytest.raises(ValueError, match=r"needs batch\.turns"):
        ADVANTAGES.get("turn_grpo")(plain, AdvantageParams())
    blank = AdvantageBatch(
        torch.zeros(1, 1), torch.zeros(1, 1), turns=Turns.none((1, 1), torch.device("cpu"))
    )
    assert ADVANTAGES.get("turn_grpo")(blank, AdvantageParams()).advantages.tolist() == [[0.0]]


def test_gamma_and_lam_discount_the_outcome_for_turns_further_from_it():
    # Episode A's two solve turns (the first one turn before the last) and episode B's one.
    batch = two_episode_batch()
    turns = replace(batch.turns, turns_after=torch.tensor([1, 0, 0]))
    discounted = replace(batch, turns=turns)
    params = AdvantageParams(std_eps=0.0, immediate_weight=0.0, delayed_weight=1.0)
    flat = ADVANTAGES.get("turn_grpo")(discounted, params).advantages
    gl = 0.9 * 0.8
    params = AdvantageParams(std_eps=0.0, gamma=0.9, lam=0.8, immediate_weight=0.0,
                             delayed_weight=1.0)  # fmt: skip
    adv = ADVANTAGES.get("turn_grpo")(discounted, params).advantages
    delay = normalised([1.0, 0.0])
    expected = torch.tensor([[gl * delay[0], 0.0, delay[0]], [delay[1], delay[1], 0.0]])
    assert torch.allclose(adv, expected, atol=1e-6)
    assert torch.allclose(flat[0, 0], flat[0, 2])  # gamma = lam = 1: no discount


def test_turns_of_counts_the_policy_turns_after_each_turn_of_its_episode():
    from ascent.data import Problem
    from ascent.rollout.agentic.rows import build_rows
    from ascent.rollout.agentic.transcript import Episode, PolicyThread, Turn
    from ascent.train.agentic_source import turns_of

    def episode(uid: int, solves: int) -> Episode:
        ep = Episode(Problem(key=str(uid), prompt="p", answer="1"), None, uid)  # type: ignore[arg-type]
        thread = PolicyThread("solver", [1, 2])
        for k in range(solves):
            ep.turns.append(Turn("solver", "policy", k, "", reward=0.1 * k, version=0))
            if k:
                thread.observe([3])  # the verdict between attempts
            thread.act([4, 5], [-0.1, -0.2], k, True)
        ep.threads.append(thread)
        ep.delayed = 1.0
        return ep

    turns = turns_of(build_rows([episode(0, 3), episode(1, 1)], 0, torch.device("cpu")))
    assert turns.episodes.tolist() == [0, 0, 0, 1]
    assert turns.turns_after.tolist() == [2, 1, 0, 0]
    assert turns.token_turn.tolist()[0] == [0, 0, -1, 1, 1, -1, 2, 2]

"""Classic PPO rollouts: autoreset steps, terminal vs truncated, and GAE over them."""

from __future__ import annotations

import random

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium import spaces
from hypothesis import given, settings
from hypothesis import strategies as st

from ascent.algos import ADVANTAGES, AdvantageParams
from ascent.config.classic import EnvSection
from ascent.models.actor_critic import ActorCritic
from ascent.train.classic_rollout import (
    SOLVED_WINDOW,
    EnvRunner,
    EpisodeStats,
    RolloutBuffer,
    make_vector_env,
)

COUNTER = "AscentTest/Counter-v0"


class CounterEnv(gym.Env):
    """Observation: steps taken in the episode. Reward 1 a step. Action 1 ends it (terminal)."""

    observation_space = spaces.Box(0.0, 100.0, (1,), np.float32)
    action_space = spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.array([0.0], np.float32), {}

    def step(self, action):
        self.t += 1
        return np.array([self.t], np.float32), 1.0, bool(action == 1), False, {}


if COUNTER not in gym.registry:
    gym.register(COUNTER, entry_point=CounterEnv, max_episode_steps=3)  # truncates at step 3


class ScriptedAgent:
    """Plays a fixed (T, N) script of actions; V(s) = 10 * s, so a value names its state."""

    def __init__(self, script: list[list[int]]) -> None:
        self.script = iter(script)

    def sample(self, obs):
        actions = torch.tensor(next(self.script))
        return actions, torch.zeros(len(actions))

    def value(self, obs):
        return 10.0 * obs[:, 0]


# env 0 always pushes on: its episode is truncated by the time limit at t = 2.
# env 1 ends its episode (terminal) at t = 1 and t = 4.
SCRIPT = [[0, 0], [0, 1], [0, 0], [0, 0], [0, 1], [0, 0]]


def collect_script() -> tuple[RolloutBuffer, EpisodeStats, EnvRunner]:
    envs = make_vector_env(EnvSection(id=COUNTER, num_envs=2, vectorization="sync"))
    stats = EpisodeStats(threshold=None, clock=lambda: 0.0)
    runner = EnvRunner(envs, stats, torch.device("cpu"), seed=0)
    buf = RolloutBuffer.allocate(len(SCRIPT), envs, torch.device("cpu"))
    runner.collect(ScriptedAgent(SCRIPT), buf)
    return buf, stats, runner


def column(t: torch.Tensor, env: int) -> list[float]:
    return [float(x) for x in t[:, env]]


def test_autoreset_steps_are_masked_and_truncation_bootstraps_with_the_final_observation():
    buf, stats, runner = collect_script()
    # env 0: s = 0, 1, 2 -> truncated; the reset step sees the final obs s = 3; then 0, 1.
    assert column(buf.mask, 0) == [1, 1, 1, 0, 1, 1]
    assert column(buf.values, 0) == [0, 10, 20, 30, 0, 10]
    assert column(buf.truncated, 0) == [0, 0, 1, 0, 0, 0]
    assert column(buf.rewards, 0) == [1, 1, 1, 0, 1, 1]
    # Next values: V(final obs) = 30 after the truncation; V(last obs s = 2) = 20 at the end.
    assert column(buf.next_values, 0)[:3] == [10, 20, 30]
    assert column(buf.next_values, 0)[4:] == [10, 20]
    # env 1: terminal at t = 1 and t = 4, each followed by a masked reset step.
    assert column(buf.mask, 1) == [1, 1, 0, 1, 1, 0]
    assert column(buf.terminated, 1) == [0, 1, 0, 0, 1, 0]
    assert column(buf.next_values, 1)[1] == 0.0  # terminal: no bootstrap
    assert column(buf.next_values, 1)[4] == 0.0
    # Episodes in the order they ended: env 1 (2 steps), env 0 (3 steps), env 1 (2 steps).
    assert stats.returns == [2.0, 3.0, 2.0]
    assert stats.lengths == [2, 3, 2]
    assert runner.env_steps == 12  # two envs x six steps, reset steps counted


def test_gae_on_a_rollout_matches_the_hand_computation():
    buf, _, _ = collect_script()
    result = ADVANTAGES.get("gae")(buf.advantage_batch(), AdvantageParams(gamma=0.9, lam=0.8))
    # gamma * lam = 0.72; delta_t = r_t + 0.9 * next_value_t - V_t.
    # env 0: A5 = 1 + 18 - 10 = 9; A4 = 1 + 9 - 0 + 0.72 * 9 = 16.48; A3 = 0 (reset step);
    #        A2 = 1 + 0.9 * 30 - 20 = 8 (truncated: bootstrapped, not carried);
    #        A1 = 1 + 18 - 10 + 0.72 * 8 = 14.76; A0 = 1 + 9 - 0 + 0.72 * 14.76 = 20.6272.
    # env 1: A5 = 0; A4 = 1 + 0 - 10 = -9 (terminal); A3 = 1 + 9 - 0 - 0.72 * 9 = 3.52;
    #        A2 = 0; A1 = -9; A0 = 3.52.
    expected = torch.tensor(
        [[20.6272, 14.76, 8.0, 0.0, 16.48, 9.0], [3.52, -9.0, 0.0, 3.52, -9.0, 0.0]]
    )
    torch.testing.assert_close(result.advantages, expected)
    torch.testing.assert_close(result.returns, (expected + buf.values.T) * buf.mask.T)


def hand_gae(rewards, values, terminated, truncated, mask, last_value, gamma, lam):
    """The textbook recursion, one env at a time, over plain Python lists of (T, N)."""
    steps, n = len(rewards), len(rewards[0])
    advantages = [[0.0] * n for _ in range(steps)]
    for env in range(n):
        following = 0.0  # advantage of the next decision in the same episode
        for t in reversed(range(steps)):
            if not mask[t][env]:
                continue
            value_after = values[t + 1][env] if t + 1 < steps else last_value[env]
            if terminated[t][env]:
                next_value, following = 0.0, 0.0
            elif truncated[t][env]:
                next_value, following = value_after, 0.0  # value_after = V(final obs)
            else:
                next_value = value_after
            delta = rewards[t][env] + gamma * next_value - values[t][env]
            advantages[t][env] = delta + gamma * lam * following
            following = advantages[t][env]
    return advantages


def random_rollout(seed: int, steps: int = 12, n: int = 3) -> RolloutBuffer:
    """A rollout obeying NEXT_STEP autoreset: a reset step follows every episode end."""
    rng = random.Random(seed)
    fields = {k: [[0.0] * n for _ in range(steps)] for k in ("r", "v", "term", "trunc", "mask")}
    for env in range(n):
        resetting = rng.random() < 0.2
        for t in range(steps):
            fields["v"][t][env] = rng.uniform(-2, 2)
            fields["mask"][t][env] = 0.0 if resetting else 1.0
            if not resetting:
                fields["r"][t][env] = rng.uniform(-1, 1)
                end = rng.random()
                fields["term"][t][env] = float(end < 0.15)
                fields["trunc"][t][env] = float(0.15 <= end < 0.3)
            resetting = bool(fields["term"][t][env] or fields["trunc"][t][env])
    tensor = {k: torch.tensor(v, dtype=torch.float64) for k, v in fields.items()}
    return RolloutBuffer(
        obs=torch.zeros(steps, n, 1),
        actions=torch.zeros(steps, n, dtype=torch.long),
        logp=torch.zeros(steps, n),
        values=tensor["v"],
        rewards=tensor["r"],
        terminated=tensor["term"].bool(),
        truncated=tensor["trunc"].bool(),
        mask=tensor["mask"].bool(),
        last_value=torch.tensor([rng.uniform(-2, 2) for _ in range(n)], dtype=torch.float64),
    )


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 10**6))
def test_gae_matches_a_hand_loop_on_random_rollouts(seed):
    buf = random_rollout(seed)
    result = ADVANTAGES.get("gae")(buf.advantage_batch(), AdvantageParams(gamma=0.97, lam=0.9))
    expected = hand_gae(
        buf.rewards.tolist(),
        buf.values.tolist(),
        buf.terminated.tolist(),
        buf.truncated.tolist(),
        buf.mask.tolist(),
        buf.last_value.tolist(),
        0.97,
        0.9,
    )
    torch.testing.assert_close(result.advantages.T, torch.tensor(expected, dtype=torch.float64))


def test_solved_needs_a_full_window_and_records_the_step():
    stats = EpisodeStats(threshold=475.0, clock=lambda: 1.5)
    for i in range(SOLVED_WINDOW - 1):
        stats.add(500.0, 500, env_steps=100 * (i + 1))
    assert stats.solved_at_step is None  # 19 perfect episodes are not yet 20
    stats.add(500.0, 500, env_steps=2000)
    assert (stats.solved_at_step, stats.solved_wall_s) == (2000, 1.5)
    stats.add(0.0, 10, env_steps=2100)
    assert stats.solved_at_step == 2000  # the first time counts


def test_window_mean_is_over_the_last_20_episodes():
    stats = EpisodeStats(threshold=None, clock=lambda: 0.0)
    for r in range(30):
        stats.add(float(r), 1, env_steps=r)
    assert stats.window_mean == pytest.approx(sum(range(10, 30)) / 20)
    metrics = stats.pop_update_metrics()
    assert metrics["episode/count"] == 30
    assert metrics["episode/return_mean"] == pytest.approx(14.5)
    assert stats.pop_update_metrics()["episode/return_mean"] is None  # none since


def test_runner_state_round_trips_mid_episode():
    _, _, runner = collect_script()
    state = runner.state_dict()
    assert state["envs"] is not None  # sync envs pickle
    twin = EnvRunner(
        make_vector_env(EnvSection(id=COUNTER, num_envs=2, vectorization="sync")),
        EpisodeStats(threshold=None, clock=lambda: 0.0),
        torch.device("cpu"),
        seed=123,
    )
    assert twin.load_state_dict(state, seed=123)
    more = [[0, 0]] * 3
    a = RolloutBuffer.allocate(3, runner.envs, torch.device("cpu"))
    b = RolloutBuffer.allocate(3, runner.envs, torch.device("cpu"))
    runner.collect(ScriptedAgent(more), a)
    twin.collect(ScriptedAgent(more), b)
    for name in ("obs", "rewards", "terminated", "truncated", "mask"):
        assert torch.equal(getattr(a, name), getattr(b, name)), name


def test_a_restored_runner_feeds_the_agent_the_same_bits_as_an_unbroken_one():
    """CartPole's vector env hands over its observations as a transposed view, a checkpoint
    holds a plain copy, and a matrix product can round the two layouts differently in the
    last bit; the first step after a resume must still compute exactly what an unbroken run
    computes (a kill-and-resume test caught one such bit growing into a different run)."""
    torch.manual_seed(0)
    envs = make_vector_env(EnvSection(id="CartPole-v1", num_envs=2))
    agent = ActorCritic.for_spaces(
        envs.single_observation_space,
        envs.single_action_space,
        hidden_sizes=[64, 64],
        activation="tanh",
    )
    runner = EnvRunner(envs, EpisodeStats(None, lambda: 0.0), torch.device("cpu"), seed=7)
    one_step = RolloutBuffer.allocate(1, envs, torch.device("cpu"))
    for _ in range(40):
        state = runner.state_dict()
        twin = EnvRunner(
            make_vector_env(EnvSection(id="CartPole-v1", num_envs=2)),
            EpisodeStats(None, lambda: 0.0),
            torch.device("cpu"),
            seed=1,
        )
        assert twin.load_state_dict(state, seed=1)
        restored = RolloutBuffer.allocate(1, envs, torch.device("cpu"))
        rng = torch.get_rng_state()
        twin.collect(agent, restored)
        torch.set_rng_state(rng)
        runner.collect(agent, one_step)
        for name in ("obs", "actions", "logp", "values", "last_value"):
            assert torch.equal(getattr(one_step, name), getattr(restored, name)), name

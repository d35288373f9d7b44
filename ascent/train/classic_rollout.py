"""Experience from vectorised gymnasium environments, collected into preallocated tensors.

Autoreset. gymnasium 1.x vector envs reset a finished env on the *next* call to `step`
(`AutoresetMode.NEXT_STEP`: the default, and the only mode of CartPole's batched
implementation). The step that ends an episode returns the episode's final observation;
the following step ignores the action, resets that env and returns its first observation
with reward 0. That reset step is not a decision, so it is stored with mask 0, like an
observation token in an LLM rollout, and the core's GAE steps over it. It also hands us the
time-limit bootstrap: the observation the agent sees at a reset step IS the final
observation of the episode that just ended, so the value computed there is V(final obs):

    next_values[t]  = values[t + 1]          (last_value after the rollout's final step)
    next_values[t]  = 0                      where the episode terminated at t
    episode_ends[t] = terminated[t] | truncated[t]      (GAE does not carry across an end)

A truncated episode is bootstrapped with V(final obs); a terminated one is not.

Env steps are counted per slot, num_envs per call to `step`, reset steps included: when
comparing with a library that resets within the same step, this count is the conservative
one (ours is never smaller for the same number of real transitions).
"""

from __future__ import annotations

import functools
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from torch import Tensor

from ascent.algos import AdvantageBatch
from ascent.config.classic import EnvSection
from ascent.errors import AscentError
from ascent.gym_envs import env_spec, unsupported_space
from ascent.models.actor_critic import ActorCritic
from ascent.train import env_snapshot

SOLVED_WINDOW = 20  # "solved": mean return of the last 20 finished episodes >= threshold


def make_vector_env(env: EnvSection) -> gym.vector.VectorEnv:
    """`num_envs` copies of `env.id` that autoreset on the next step (see the module doc)."""
    next_step = gym.vector.AutoresetMode.NEXT_STEP
    spec = env_spec(env.id)
    if env.vectorization == "auto" and spec.vector_entry_point is not None:
        envs = gym.make_vec(env.id, env.num_envs, vectorization_mode="vector_entry_point")
    else:
        fns = [functools.partial(gym.make, env.id) for _ in range(env.num_envs)]
        vec = (
            gym.vector.AsyncVectorEnv if env.vectorization == "async" else gym.vector.SyncVectorEnv
        )
        envs = vec(fns, autoreset_mode=next_step)
    mode = envs.metadata.get("autoreset_mode", next_step)
    if mode != next_step:
        envs.close()
        raise AscentError(
            f"[env] id {env.id!r}: its vector env resets in mode {mode}, the trainer handles "
            'NEXT_STEP; set [env] vectorization = "sync"'
        )
    problem = unsupported_space(envs.single_observation_space, envs.single_action_space)
    if problem is not None:
        envs.close()
        raise AscentError(f"[env] id {env.id!r}: {problem}")
    return envs


@dataclass(frozen=True)
class Samples:
    """Steps of a rollout in one flat batch of M, the unit the minibatch loop shuffles."""

    obs: Tensor  # (M, obs_dim)
    actions: Tensor  # (M,) long or (M, action_dim) float
    logp: Tensor  # (M,) log pi_old(a|s)
    values: Tensor  # (M,) V_old(s)
    advantages: Tensor  # (M,) GAE advantages
    returns: Tensor  # (M,) critic targets
    mask: Tensor  # (M,) bool: 1 on decisions, 0 on autoreset steps

    def __len__(self) -> int:
        return self.mask.shape[0]

    def select(self, index: Tensor) -> Samples:
        return Samples(*(getattr(self, f.name)[index] for f in fields(self)))


@dataclass
class RolloutBuffer:
    """One rollout: T = rollout_steps steps of N = num_envs envs, preallocated once."""

    obs: Tensor  # (T, N, obs_dim) s_t, flattened
    actions: Tensor  # (T, N) long, or (T, N, action_dim) float: a_t as sampled (unclipped)
    logp: Tensor  # (T, N) log pi_old(a_t | s_t)
    values: Tensor  # (T, N) V_old(s_t)
    rewards: Tensor  # (T, N) r_t
    terminated: Tensor  # (T, N) bool: the episode reached a terminal state at t
    truncated: Tensor  # (T, N) bool: a time limit cut the episode at t
    mask: Tensor  # (T, N) bool: 1 on decisions, 0 on autoreset steps
    last_value: Tensor  # (N,) V of the observation after the rollout's final step

    @classmethod
    def allocate(
        cls, steps: int, envs: gym.vector.VectorEnv, device: torch.device
    ) -> RolloutBuffer:
        n = envs.num_envs
        obs_dim = int(np.prod(envs.single_observation_space.shape))
        space = envs.single_action_space
        if isinstance(space, gym.spaces.Discrete):
            actions = torch.zeros((steps, n), dtype=torch.long, device=device)
        else:
            actions = torch.zeros((steps, n, *space.shape), device=device)

        def zeros(dtype: torch.dtype = torch.float32) -> Tensor:
            return torch.zeros((steps, n), dtype=dtype, device=device)

        return cls(
            obs=torch.zeros((steps, n, obs_dim), device=device),
            actions=actions,
            logp=zeros(),
            values=zeros(),
            rewards=zeros(),
            terminated=zeros(torch.bool),
            truncated=zeros(torch.bool),
            mask=zeros(torch.bool),
            last_value=torch.zeros(n, device=device),
        )

    @property
    def next_values(self) -> Tensor:
        """(T, N) V(s_{t+1}): 0 after a terminal step, V(final obs) after a truncation."""
        following = torch.cat([self.values[1:], self.last_value[None]])
        return torch.where(self.terminated, torch.zeros_like(following), following)

    def samples(self, advantages: Tensor, returns: Tensor) -> Samples:
        """The rollout flattened to T * N steps, with its (T, N) advantages and returns."""
        return Samples(
            obs=self.obs.flatten(0, 1),
            actions=self.actions.flatten(0, 1),
            logp=self.logp.flatten(),
            values=self.values.flatten(),
            advantages=advantages.flatten(),
            returns=returns.flatten(),
            mask=self.mask.flatten(),
        )

    def advantage_batch(self) -> AdvantageBatch:
        """The rollout as the core's (B, T) batch: one row per env stream, hence `.T`."""
        return AdvantageBatch(
            rewards=self.rewards.T,
            mask=self.mask.T,
            values=self.values.T,
            next_values=self.next_values.T,
            episode_ends=(self.terminated | self.truncated).T,
        )


class EpisodeStats:
    """Finished episodes: those of the current update, and the window that decides "solved"."""

    def __init__(self, threshold: float | None, clock: Callable[[], float]) -> None:
        self.threshold = threshold
        self.clock = clock  # seconds since the run started
        self.window: deque[float] = deque(maxlen=SOLVED_WINDOW)
        self.returns: list[float] = []  # episodes finished in the current update
        self.lengths: list[int] = []
        self.episodes = 0
        self.solved_at_step: int | None = None
        self.solved_wall_s: float | None = None

    def add(self, episode_return: float, length: int, env_steps: int) -> None:
        self.window.append(episode_return)
        self.returns.append(episode_return)
        self.lengths.append(length)
        self.episodes += 1
        mean = self.window_mean
        solved = self.threshold is not None and mean is not None and mean >= self.threshold
        if solved and self.solved_at_step is None and len(self.window) == SOLVED_WINDOW:
            self.solved_at_step, self.solved_wall_s = env_steps, self.clock()

    @property
    def window_mean(self) -> float | None:
        return float(np.mean(self.window)) if self.window else None

    def pop_update_metrics(self) -> dict[str, float | int | None]:
        """Metrics of the episodes finished since the last call (None when there were none)."""
        returns, lengths = self.returns, self.lengths
        self.returns, self.lengths = [], []
        return {
            "episode/count": len(returns),
            "episode/return_mean": float(np.mean(returns)) if returns else None,
            "episode/return_max": float(np.max(returns)) if returns else None,
            "episode/length_mean": float(np.mean(lengths)) if lengths else None,
            "episode/return_last20": self.window_mean,
        }

    def state_dict(self) -> dict[str, Any]:
        keys = ("episodes", "solved_at_step", "solved_wall_s")
        return {"window": list(self.window), **{k: getattr(self, k) for k in keys}}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.window.extend(state["window"])
        self.episodes = state["episodes"]
        self.solved_at_step, self.solved_wall_s = state["solved_at_step"], state["solved_wall_s"]


class EnvRunner:
    """Steps the vector env with the agent and remembers where every episode stands."""

    def __init__(
        self, envs: gym.vector.VectorEnv, stats: EpisodeStats, device: torch.device, seed: int
    ) -> None:
        self.envs, self.stats, self.device = envs, stats, device
        n = envs.num_envs
        self.next_obs: np.ndarray = envs.reset(seed=seed)[0]
        self.resetting = np.zeros(n, dtype=bool)  # True: this env autoresets at the next step
        self.episode_return = np.zeros(n)
        self.episode_length = np.zeros(n, dtype=np.int64)
        self.env_steps = 0
        space = envs.single_action_space
        self._box = (space.low, space.high) if isinstance(space, gym.spaces.Box) else None

    @torch.no_grad()
    def collect(self, agent: ActorCritic, buf: RolloutBuffer) -> None:
        """Fill `buf` with the next rollout_steps steps of every env."""
        for t in range(buf.obs.shape[0]):
            obs = self._obs_tensor(self.next_obs)
            actions, logp = agent.sample(obs)
            buf.obs[t], buf.actions[t], buf.logp[t] = obs, actions, logp
            buf.values[t] = agent.value(obs)
            buf.mask[t] = torch.from_numpy(~self.resetting)
            self.next_obs, reward, terminated, truncated, _ = self.envs.step(
                self._env_action(actions)
            )
            buf.rewards[t] = torch.from_numpy(np.asarray(reward))
            buf.terminated[t] = torch.from_numpy(terminated)
            buf.truncated[t] = torch.from_numpy(truncated)
            self._count(reward, terminated | truncated)
        buf.last_value.copy_(agent.value(self._obs_tensor(self.next_obs)))

    def _count(self, reward: np.ndarray, done: np.ndarray) -> None:
        """Advance the step counter and the episodes; hand finished ones to `stats`."""
        self.env_steps += self.envs.num_envs
        self.episode_return += reward  # 0 at reset steps
        self.episode_length += ~self.resetting
        for i in np.flatnonzero(done):
            self.stats.add(
                float(self.episode_return[i]), int(self.episode_length[i]), self.env_steps
            )
        self.episode_return[done] = 0.0
        self.episode_length[done] = 0
        self.resetting = done

    def _obs_tensor(self, obs: np.ndarray) -> Tensor:
        """The observations as one contiguous float32 batch. Contiguous whatever the env
        hands over: a vector env may return a transposed view (CartPole's does), and the
        matrix product rounds a transposed input otherwise in its last bit, so a run resumed
        from a checkpoint's plain copy of the observations would drift from an unbroken one."""
        flat = np.ascontiguousarray(obs.reshape(self.envs.num_envs, -1), dtype=np.float32)
        return torch.from_numpy(flat).to(self.device)

    def _env_action(self, actions: Tensor) -> np.ndarray:
        """Actions as the env takes them: Gaussian samples are clipped to the Box."""
        array = actions.cpu().numpy()
        return array if self._box is None else np.clip(array, *self._box)

    def state_dict(self) -> dict[str, Any]:
        """Everything needed to continue exactly here, the envs themselves included (as
        plain data; None when they hold state that cannot be, e.g. async envs)."""
        arrays = ("next_obs", "resetting", "episode_return", "episode_length")
        return {
            "envs": env_snapshot.snapshot(self.envs),
            "stats": self.stats.state_dict(),
            "env_steps": self.env_steps,
            **{k: torch.from_numpy(np.array(getattr(self, k), copy=True)) for k in arrays},
        }

    def load_state_dict(self, state: dict[str, Any], seed: int) -> bool:
        """Continue from `state`; False when the envs could not be saved and restart instead."""
        self.stats.load_state_dict(state["stats"])
        self.env_steps = state["env_steps"]
        if state["envs"] is None:  # fresh episodes, seeded for this point of the run
            self.next_obs = self.envs.reset(seed=seed)[0]
            return False
        env_snapshot.restore(self.envs, state["envs"])
        self.next_obs = state["next_obs"].numpy().copy()
        self.resetting = state["resetting"].numpy().copy()
        self.episode_return = state["episode_return"].numpy().copy()
        self.episode_length = state["episode_length"].numpy().copy()
        return True

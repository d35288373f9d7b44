"""`ascent eval` for classic PPO: run a checkpoint's greedy policy for N episodes.

Greedy means the most likely action (the Gaussian's mean for continuous actions), so a
checkpoint always gets the same score. Episode i starts from `env.reset(seed=seed + 10_000
+ i)`: seeded, and apart from the seeds training started from.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from pathlib import Path

import gymnasium as gym
import numpy as np
import torch

from ascent.errors import AscentError
from ascent.models.actor_critic import ActorCritic
from ascent.rules import ClassicConfig
from ascent.rundir import best_checkpoint, latest_checkpoint
from ascent.runtime import resolve_threads
from ascent.train.checkpoint import CLASSIC_KIND, load_checkpoint

EVAL_SEED_OFFSET = 10_000
MAX_EPISODE_STEPS = 100_000  # for envs registered without a time limit


@dataclass(frozen=True)
class EvalResult:
    env_id: str
    checkpoint: Path
    returns: list[float]

    @property
    def mean(self) -> float:
        return statistics.fmean(self.returns)

    @property
    def std(self) -> float:
        return statistics.pstdev(self.returns)

    def describe(self) -> str:
        return (
            f"{self.env_id}: mean return {self.mean:.2f} +- {self.std:.2f} (std) over "
            f"{len(self.returns)} episodes, greedy policy from {self.checkpoint}"
        )


def resolve_checkpoint(run_path: Path, checkpoint: Path | None) -> Path:
    """The checkpoint asked for, else the run's best, else its latest."""
    if checkpoint is not None:
        if not Path(checkpoint).exists():
            raise AscentError(f"--checkpoint {checkpoint}: no such file or directory")
        return Path(checkpoint)
    found = best_checkpoint(run_path) or latest_checkpoint(run_path)
    if found is None:
        raise AscentError(
            f"{run_path}: no checkpoint to evaluate (looked for checkpoints/step-*/); train it "
            "first, or pass --checkpoint PATH"
        )
    return found


def load_agent(cfg: ClassicConfig, env: gym.Env, checkpoint: Path) -> ActorCritic:
    state = load_checkpoint(checkpoint, CLASSIC_KIND, required=("agent",))
    agent = ActorCritic.for_spaces(
        env.observation_space,
        env.action_space,
        hidden_sizes=cfg.model.hidden_sizes,
        activation=cfg.model.activation,
    )
    try:
        agent.load_state_dict(state["agent"])
    except RuntimeError:
        raise AscentError(
            f"{checkpoint}: the weights do not fit [model] {cfg.model.hidden_sizes} / "
            f"{cfg.env.id}; evaluate with the config the run was trained with (RUN_DIR/config.toml)"
        ) from None
    return agent.eval()


@torch.no_grad()
def evaluate_classic(
    cfg: ClassicConfig, run_path: Path, *, checkpoint: Path | None = None, episodes: int = 10
) -> EvalResult:
    """Mean and std of the return of `episodes` greedy episodes of a trained policy."""
    if episodes < 1:
        raise AscentError(f"--episodes {episodes}: evaluate at least 1 episode")
    torch.set_num_threads(resolve_threads(cfg.run.threads))
    path = resolve_checkpoint(run_path, checkpoint)
    env = gym.make(cfg.env.id)
    agent = load_agent(cfg, env, path)
    box = env.action_space if isinstance(env.action_space, gym.spaces.Box) else None
    returns = []
    for i in range(episodes):
        obs, _ = env.reset(seed=cfg.run.seed + EVAL_SEED_OFFSET + i)
        total, done, steps = 0.0, False, 0
        while not done and steps < MAX_EPISODE_STEPS:
            x = torch.as_tensor(np.asarray(obs, dtype=np.float32).reshape(1, -1))
            action = agent.greedy(x)[0].numpy()
            if box is not None:
                action = np.clip(action, box.low, box.high)
            obs, reward, terminated, truncated, _ = env.step(action if box else int(action))
            total += float(reward)
            done, steps = terminated or truncated, steps + 1
        returns.append(total)
    env.close()
    return EvalResult(cfg.env.id, path, returns)

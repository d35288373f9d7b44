"""Sections of a classic actor-critic PPO run on a gymnasium environment.

The defaults are SPEC.md's classic PPO defaults for CartPole-v1 (20k steps, 2048-step
rollouts, 10 epochs of 64-sample minibatches, gamma 0.99, lambda 0.95, clip 0.2, ...).
`examples/ppo_cartpole.toml` spells them out; `examples/ppo_cartpole_fast.toml` is the tuned
recipe.

An optional `settings.json` beside the config file carries the machine's runtime settings
(where runs are written, device, threads, deterministic kernels), so one recipe can be shared
between machines: `ascent/configfile/settings_json.py` reads it.

`[api]`, `[models]` and `[assistant]` are the LLM config's sections (`ascent/config/api.py`):
in a classic run the only API role is the log assistant's, which reads the metrics every
`log_interval` updates. (The write-up's `[service]` is refused by the loader with where each
of its keys lives in `[api]` / `[models]`: `ascent/configfile/aliases.py`.)
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from ascent.config.api import ApiSection, AssistantSection, ModelsSection
from ascent.config.base import Section
from ascent.config.run import LoggingSection, RunSection
from ascent.gym_envs import check_env


class EnvSection(Section):
    """`[env]`: the gymnasium environment and how many copies run side by side."""

    id: str = Field(
        "CartPole-v1",
        description="gymnasium environment id ('module:Id' imports the module that registers it).",
    )
    num_envs: int = Field(1, ge=1, description="Environments stepped together (gymnasium.vector).")
    vectorization: Literal["auto", "sync", "async"] = Field(
        "auto",
        description="auto: the env's own batched implementation when it has one, else sync; "
        "async: one process per env (for slow envs).",
    )

    @field_validator("id")
    @classmethod
    def _usable_env(cls, env_id: str) -> str:
        check_env(env_id)
        return env_id


class ClassicModelSection(Section):
    """`[model]`: the actor and critic networks (two separate MLPs)."""

    hidden_sizes: list[int] = Field(
        default_factory=lambda: [64, 64], description="Hidden layer widths of each MLP."
    )
    activation: Literal["tanh", "relu"] = Field("tanh", description="Hidden-layer activation.")

    @field_validator("hidden_sizes")
    @classmethod
    def _positive(cls, sizes: list[int]) -> list[int]:
        if not sizes or any(s < 1 for s in sizes):
            raise ValueError(
                f"[model] hidden_sizes: {sizes} must list positive widths, e.g. [64, 64]"
            )
        return sizes


class ClassicTrainSection(Section):
    """`[train]` of a classic PPO run: rollouts, GAE, the PPO losses, checkpoints."""

    total_timesteps: int = Field(
        20000, ge=1, description="Environment steps in all (rounded up to whole rollouts)."
    )
    rollout_steps: int = Field(
        2048, ge=1, description="Steps per environment in one rollout (one update per rollout)."
    )
    update_epochs: int = Field(10, ge=1, description="Passes over each rollout.")
    batch_size: int = Field(
        64, ge=1, description="Transitions per minibatch (one optimiser step each)."
    )
    gamma: float = Field(0.99, ge=0.0, le=1.0, description="Discount factor.")
    gae_lambda: float = Field(0.95, ge=0.0, le=1.0, description="GAE lambda.")
    objective: Literal["ppo", "actor_critic"] = Field(
        "ppo",
        description="ppo: the clipped surrogate; actor_critic: the plain policy gradient "
        "-A x ratio, no clip (the step before PPO in the actor-critic -> PPO progression).",
    )
    clip_range: float = Field(
        0.2, gt=0.0, lt=1.0, description="PPO clip: the ratio is kept within [1 - c, 1 + c]."
    )
    anneal_clip_range: bool = Field(
        False, description="Decay clip_range linearly towards 0 over the run (rl-zoo CartPole)."
    )
    clip_range_vf: float | None = Field(
        None,
        gt=0.0,
        description="Clip each value update to +- this around the rollout's values; "
        "unset: no value clipping.",
    )
    entropy_coef: float = Field(0.01, ge=0.0, description="Weight of the entropy bonus.")
    value_coef: float = Field(
        0.5, ge=0.0, description="Weight of the value loss, 0.5 (V - R)^2 per step."
    )
    max_grad_norm: float = Field(
        0.5, gt=0.0, description="Clip the gradient norm to this (see grad_clip)."
    )
    grad_clip: Literal["global", "per_network"] = Field(
        "global",
        description="global: one norm over the actor and the critic together; per_network: "
        "each network's gradient clipped to max_grad_norm on its own.",
    )
    normalize_advantages: bool = Field(
        True, description="Whiten the advantages (mean 0, std 1) over advantage_norm's scope."
    )
    advantage_norm: Literal["minibatch", "rollout"] = Field(
        "minibatch",
        description="What normalize_advantages whitens over: each minibatch, or the whole "
        "rollout once before the update.",
    )
    solved_return: float | None = Field(
        None,
        description="Mean return of the last 20 episodes that counts as solved; "
        "unset: the env's reward_threshold (475 for CartPole-v1).",
    )
    stop_when_solved: bool = Field(
        False, description="End the run after the update during which it counts as solved."
    )
    save_every: int = Field(
        10, ge=0, description="Checkpoint every N updates (0: only at the end)."
    )
    keep_last: int = Field(2, ge=1, description="Checkpoints to keep besides the best one.")

    @model_validator(mode="after")
    def _no_idle_keys(self) -> ClassicTrainSection:
        """A key that cannot act under the chosen objective or normalisation is refused."""
        if self.objective == "actor_critic":
            for key in ("clip_range", "anneal_clip_range", "clip_range_vf"):
                if self.explicitly_set(key):
                    raise ValueError(
                        f'[train] {key}: objective = "actor_critic" clips nothing; remove '
                        'the key, or use objective = "ppo"'
                    )
        if self.explicitly_set("advantage_norm") and not self.normalize_advantages:
            raise ValueError(
                "[train] advantage_norm: normalize_advantages = false, so nothing is whitened; "
                "remove the key or set normalize_advantages = true"
            )
        return self


class ClassicOptimSection(Section):
    """`[optim]` of a classic PPO run: one Adam with an actor and a critic learning rate."""

    lr_actor: float = Field(3e-4, gt=0.0, description="Adam learning rate of the policy network.")
    lr_critic: float = Field(1e-3, gt=0.0, description="Adam learning rate of the value network.")
    eps: float = Field(1e-5, gt=0.0, description="Adam epsilon (1e-5 as in the PPO baselines).")
    anneal_lr: bool = Field(
        True, description="Decay both learning rates linearly to 0 over the run."
    )


class ClassicSections(Section):
    """Every table of a classic PPO run, typed; `ClassicConfig` (ascent.rules) adds the rules
    between them."""

    run: RunSection = Field(default_factory=RunSection, description="Run directory, seed, device.")
    env: EnvSection = Field(default_factory=EnvSection, description="Environment.")
    model: ClassicModelSection = Field(
        default_factory=ClassicModelSection, description="Actor and critic networks."
    )
    train: ClassicTrainSection = Field(
        default_factory=ClassicTrainSection, description="PPO settings."
    )
    optim: ClassicOptimSection = Field(
        default_factory=ClassicOptimSection, description="Optimisers."
    )
    logging: LoggingSection = Field(
        default_factory=LoggingSection, description="Metrics and trackers."
    )
    api: ApiSection = Field(
        default_factory=ApiSection, description="OpenAI-compatible endpoint of the log assistant."
    )
    models: ModelsSection = Field(
        default_factory=ModelsSection,
        description="The log assistant's model (analyst_model); no other role is called.",
    )
    assistant: AssistantSection = Field(
        default_factory=AssistantSection,
        description="Log assistant: three sentences on the metrics every log_interval updates.",
    )

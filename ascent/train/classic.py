"""Classic actor-critic PPO on a gymnasium environment, built on the shared algorithm core.

One update reads top to bottom, as in CleanRL's `ppo.py`:

  1. anneal the learning rates (and, if asked, the clip range) linearly towards 0;
  2. collect rollout_steps steps of num_envs envs into preallocated tensors
     (`classic_rollout`: autoreset steps are masked out, a time-limit truncation is
     bootstrapped with V(final observation), a terminal step is not);
  3. advantages and critic targets by GAE from the core (`ADVANTAGES["gae"]`);
  4. update_epochs passes over shuffled minibatches: the clipped surrogate
     (`POLICY_LOSSES["ppo_clip"]`) on per-minibatch whitened advantages, the value loss
     (`value_loss`, clipped when clip_range_vf is set) and the entropy bonus; one backward,
     the global grad-norm clip, one Adam step;
  5. log; checkpoint every save_every updates and at the end.

With `[assistant] enabled`, an API role reads the metrics every log_interval updates and
answers in three sentences, on a thread of its own: a dead or hanging endpoint never slows
or stops the loop, and its tokens are counted in `api_usage.json`.

The run directory, atomic checkpoints, metrics.jsonl and the progress bar are the ones the
LLM loop uses. The "best" checkpoint is the one with the highest mean return over the last
20 training episodes: every training episode is a fresh draw from the environment, so there
is no training set to overfit, unlike an LLM's prompts. Resuming restores the weights, the
optimiser, the RNGs and the environments themselves (pickled, mid-episode), so N updates,
then a resume, then N more give the weights of 2N updates in one go.

Metrics, one JSON line per update (`step` is the update number):

    env_steps                  environment steps so far (num_envs per vector step)
    episode/count              episodes finished during this update's rollout
    episode/return_mean        their mean return (null when none finished)
    episode/return_max         their best return
    episode/length_mean        their mean length
    episode/return_last20      mean return of the last 20 finished episodes ("solved" test)
    loss/policy                clipped surrogate (mean over minibatches, as all below)
    loss/value                 0.5 (V - R)^2, clipped when clip_range_vf is set
    loss/total                 policy + value_coef * value - entropy_coef * entropy
    policy/entropy             mean entropy of the policy on the rollout's states
    policy/approx_kl           k3 estimate of KL(pi_old || pi)
    policy/clip_frac           fraction of steps where the ratio clip was active
    value/clip_frac            fraction of steps where the value clip was active (if set)
    value/explained_variance   1 - Var[R - V] / Var[R] over the rollout, before the update
    optim/grad_norm            global gradient norm before clipping
    optim/lr_actor, optim/lr_critic   learning rates of this update
    policy/clip_range          clip range of this update
    perf/sps                   environment steps per second over this update

summary.json adds: last20_mean_return, env_steps, episodes, wall_s, solved_return (the
threshold), solved_at_step and solved_wall_s (null when never solved), final_metrics.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from ascent.algos import (
    ADVANTAGES,
    AGGREGATIONS,
    POLICY_LOSSES,
    AdvantageParams,
    AggregationScale,
    PolicyLossInput,
    PolicyLossParams,
    explained_variance,
    masked_whiten,
    value_loss,
)
from ascent.api import UsageLedger
from ascent.api.assistant import assistant_session
from ascent.config.classic import ClassicOptimSection, ClassicTrainSection
from ascent.models.actor_critic import ActorCritic
from ascent.observe.live import LiveDiagnosis
from ascent.observe.metrics import MetricsLogger
from ascent.observe.progress import TrainProgress
from ascent.rules import ClassicConfig
from ascent.rundir import RunDir
from ascent.runtime import resolve_device
from ascent.train.checkpoint import (
    CLASSIC_KIND,
    KIND_KEY,
    capture_rng_state,
    load_checkpoint,
    restore_rng_state,
    save_checkpoint,
    unfit_checkpoint,
)
from ascent.train.classic_rollout import (
    EnvRunner,
    EpisodeStats,
    RolloutBuffer,
    Samples,
    make_vector_env,
)
from ascent.train.optim_state import load_keeping_settings
from ascent.train.updates import clip_and_norm

GAE = ADVANTAGES.get("gae")
CLIPPED_SURROGATE = POLICY_LOSSES.get("ppo_clip")
PLAIN_GRADIENT = POLICY_LOSSES.get("vanilla_pg")  # [train] objective = "actor_critic"
MEAN = AGGREGATIONS.get("token_mean")  # average over the minibatch's decision steps
REQUIRED = ("update", "agent", "optimizer", "rng", "runner")
PROGRESS_FIELDS = {
    "episode/return_last20": "return",
    "policy/approx_kl": "kl",
    "value/explained_variance": "ev",
    "perf/sps": "sps",
}


def train_classic(cfg: ClassicConfig, run_dir: RunDir) -> dict[str, Any]:
    """Train PPO as `cfg` says; write checkpoints, metrics.jsonl and summary.json."""
    device = resolve_device(cfg.run.device)
    resumed = None
    if run_dir.resume_from is not None:
        resumed = load_checkpoint(run_dir.resume_from, CLASSIC_KIND, required=REQUIRED)
    done = resumed["update"] if resumed else 0
    logger = MetricsLogger(
        run_dir,
        cfg.logging,
        config=cfg.model_dump(mode="json"),
        resume_step=done if resumed else None,
    )
    agent, optimizer, runner = _build(cfg, device, clock=lambda: logger.elapsed)
    if resumed:
        _restore(run_dir.resume_from, resumed, agent, optimizer, runner, seed=cfg.run.seed + done)
    buffer = RolloutBuffer.allocate(cfg.train.rollout_steps, runner.envs, device)
    gae_params = AdvantageParams(gamma=cfg.train.gamma, lam=cfg.train.gae_lambda)
    progress = TrainProgress(
        cfg.num_updates * cfg.transitions_per_update,
        PROGRESS_FIELDS,
        enabled=cfg.logging.progress,
        description=cfg.env.id,
        start=runner.env_steps,
    )
    update = done  # stays so when resuming a run that already finished
    live = LiveDiagnosis(run_dir.path, progress.print, resume_step=done if resumed else None)
    usage = UsageLedger()  # the log assistant's tokens
    with logger, progress, assistant_session(cfg, run_dir.path, progress.print, usage) as assistant:
        for update in range(done + 1, cfg.num_updates + 1):
            started = (time.perf_counter(), runner.env_steps)
            schedule = anneal(optimizer, cfg, update)
            runner.collect(agent, buffer)
            gae = GAE(buffer.advantage_batch(), gae_params)
            advantages, returns = gae.advantages.T, gae.returns.T  # rows were envs: back to (T, N)
            ev = explained_variance(buffer.values, returns, buffer.mask).item()
            limit = schedule.get("policy/clip_range")  # None: actor_critic clips nothing
            clip = PolicyLossParams() if limit is None else PolicyLossParams(limit, limit)
            losses = ppo_update(
                agent, optimizer, buffer.samples(advantages, returns), cfg.train, clip
            )
            metrics = {
                "env_steps": runner.env_steps,
                **runner.stats.pop_update_metrics(),
                **losses,
                "value/explained_variance": ev,
                **schedule,
                "perf/sps": (runner.env_steps - started[1]) / (time.perf_counter() - started[0]),
            }
            logger.log(update, metrics)
            progress.update(runner.env_steps, metrics)
            live.observe(update, metrics)
            if assistant is not None:
                assistant.observe(update, metrics)
            stop = cfg.train.stop_when_solved and runner.stats.solved_at_step is not None
            every = cfg.train.save_every
            if stop or update == cfg.num_updates or (every and update % every == 0):
                _save(run_dir, cfg, update, agent, optimizer, runner)
            if stop:
                break
    usage.finish(run_dir.path)
    runner.envs.close()
    return _write_summary(run_dir, cfg, update, runner, logger)


def _build(
    cfg: ClassicConfig, device: torch.device, clock: Callable[[], float]
) -> tuple[ActorCritic, torch.optim.Optimizer, EnvRunner]:
    """The envs (reset with the run's seed), the agent on `device`, and its optimiser."""
    envs = make_vector_env(cfg.env)
    agent = ActorCritic.for_spaces(
        envs.single_observation_space,
        envs.single_action_space,
        hidden_sizes=cfg.model.hidden_sizes,
        activation=cfg.model.activation,
    ).to(device)
    runner = EnvRunner(envs, EpisodeStats(cfg.solved_return, clock), device, seed=cfg.run.seed)
    return agent, make_optimizer(agent, cfg.optim), runner


def make_optimizer(agent: ActorCritic, optim: ClassicOptimSection) -> torch.optim.Adam:
    """One Adam, two parameter groups: the actor's (group 0) and the critic's (group 1).

    The fused kernel updates all of a group's tensors in one call: for a network this small
    the per-tensor loop of the default implementation costs more than the arithmetic.
    """
    groups = [
        {"params": agent.actor_parameters(), "lr": optim.lr_actor},
        {"params": list(agent.critic.parameters()), "lr": optim.lr_critic},
    ]
    device = next(agent.parameters()).device
    return torch.optim.Adam(groups, eps=optim.eps, fused=device.type in ("cpu", "cuda"))


def anneal(optimizer: torch.optim.Optimizer, cfg: ClassicConfig, update: int) -> dict[str, float]:
    """Set this update's learning rates, and return them with its clip range.

    Each annealed value falls linearly from its configured value towards 0 over the run.
    """
    frac = 1.0 - (update - 1) / cfg.num_updates
    lr_frac = frac if cfg.optim.anneal_lr else 1.0
    actor, critic = optimizer.param_groups
    actor["lr"], critic["lr"] = lr_frac * cfg.optim.lr_actor, lr_frac * cfg.optim.lr_critic
    rates = {"optim/lr_actor": actor["lr"], "optim/lr_critic": critic["lr"]}
    if cfg.train.objective == "actor_critic":  # nothing is clipped
        return rates
    clip = cfg.train.clip_range * (frac if cfg.train.anneal_clip_range else 1.0)
    return rates | {"policy/clip_range": clip}


def ppo_update(
    agent: ActorCritic,
    optimizer: torch.optim.Optimizer,
    samples: Samples,
    train: ClassicTrainSection,
    clip: PolicyLossParams,
) -> dict[str, float]:
    """update_epochs passes over shuffled minibatches; the metrics averaged over minibatches."""
    history: list[dict[str, Tensor]] = []
    if train.normalize_advantages and train.advantage_norm == "rollout":
        whitened = masked_whiten(samples.advantages[None], samples.mask[None])[0]
        samples = dataclasses.replace(samples, advantages=whitened)
    for _ in range(train.update_epochs):
        for index in torch.randperm(len(samples), device=samples.mask.device).split(
            train.batch_size
        ):
            loss, metrics = ppo_loss(agent, samples.select(index), train, clip)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            metrics |= _clip_gradients(agent, train)
            optimizer.step()
            history.append(metrics)
    return {key: torch.stack([m[key] for m in history]).mean().item() for key in history[0]}


def _clip_gradients(agent: ActorCritic, train: ClassicTrainSection) -> dict[str, Tensor]:
    """Clip as `[train] grad_clip` says and return the norms before clipping (a non-finite
    one stops the run before the weights take it)."""
    actor, critic = agent.actor_parameters(), list(agent.critic.parameters())
    if train.grad_clip == "global":
        return {"optim/grad_norm": torch.tensor(clip_and_norm(actor + critic, train.max_grad_norm))}
    a, c = clip_and_norm(actor, train.max_grad_norm), clip_and_norm(critic, train.max_grad_norm)
    return {
        "optim/grad_norm": torch.tensor(math.hypot(a, c)),
        "optim/grad_norm_actor": torch.tensor(a),
        "optim/grad_norm_critic": torch.tensor(c),
    }


def ppo_loss(
    agent: ActorCritic, batch: Samples, train: ClassicTrainSection, clip: PolicyLossParams
) -> tuple[Tensor, dict[str, Tensor]]:
    """policy + value_coef * value - entropy_coef * entropy over one minibatch.

    The core's losses take (B, T) tensors; a minibatch of M shuffled steps is one row (1, M).
    Autoreset steps (mask 0) take no part in any term.
    """
    logp, entropy = agent.evaluate(batch.obs, batch.actions)
    values = agent.value(batch.obs)
    mask = batch.mask[None]
    advantages = batch.advantages[None]
    if train.normalize_advantages and train.advantage_norm == "minibatch":
        advantages = masked_whiten(advantages, mask)
    policy_objective = PLAIN_GRADIENT if train.objective == "actor_critic" else CLIPPED_SURROGATE
    surrogate, policy_metrics = policy_objective(
        PolicyLossInput(logp[None], batch.logp[None], advantages, mask), clip
    )
    value_err, value_metrics = value_loss(
        values[None], batch.values[None], batch.returns[None], mask, train.clip_range_vf
    )
    scale = AggregationScale.from_mask(mask)
    policy_loss = MEAN(surrogate, mask, scale)
    critic_loss = MEAN(value_err, mask, scale)
    mean_entropy = MEAN(entropy[None], mask, scale)
    loss = policy_loss + train.value_coef * critic_loss - train.entropy_coef * mean_entropy
    metrics = {
        "loss/policy": policy_loss.detach(),
        "loss/value": critic_loss.detach(),
        "loss/total": loss.detach(),
        "policy/entropy": mean_entropy.detach(),
        "policy/approx_kl": policy_metrics["approx_kl"],
        "policy/clip_frac": policy_metrics["clip_ratio"],
    }
    if "value_clip_frac" in value_metrics:
        metrics["value/clip_frac"] = value_metrics["value_clip_frac"]
    return loss, metrics


def _save(
    run_dir: RunDir,
    cfg: ClassicConfig,
    update: int,
    agent: ActorCritic,
    optimizer: torch.optim.Optimizer,
    runner: EnvRunner,
) -> None:
    state = {
        KIND_KEY: CLASSIC_KIND,
        "update": update,
        "agent": agent.state_dict(),
        "optimizer": optimizer.state_dict(),
        "rng": capture_rng_state(),
        "runner": runner.state_dict(),
    }
    metric = runner.stats.window_mean  # best = highest mean return of the last 20 episodes
    save_checkpoint(
        run_dir.checkpoints, update, state, metric=metric, keep_last=cfg.train.keep_last
    )


def _restore(
    path: Path,
    state: dict[str, Any],
    agent: ActorCritic,
    optimizer: torch.optim.Optimizer,
    runner: EnvRunner,
    seed: int,
) -> None:
    try:
        agent.load_state_dict(state["agent"])
        load_keeping_settings(optimizer, lambda: optimizer.load_state_dict(state["optimizer"]))
        fresh_episodes = not runner.load_state_dict(state["runner"], seed=seed)
        restore_rng_state(state["rng"])
    except (RuntimeError, KeyError, ValueError, TypeError, IndexError, AttributeError) as err:
        raise unfit_checkpoint(path, err) from None
    if fresh_episodes:
        print(
            "note: the environments could not be saved with the checkpoint (async envs), so "
            "resuming starts fresh episodes; the run is not bit-identical to an unbroken one"
        )


def _write_summary(
    run_dir: RunDir, cfg: ClassicConfig, update: int, runner: EnvRunner, logger: MetricsLogger
) -> dict[str, Any]:
    stats = runner.stats
    summary = {
        "kind": "classic_ppo",
        "env_id": cfg.env.id,
        "updates": update,
        "env_steps": runner.env_steps,
        "episodes": stats.episodes,
        "wall_s": round(logger.elapsed, 3),
        "last20_mean_return": stats.window_mean,
        "solved_return": cfg.solved_return,
        "solved_at_step": stats.solved_at_step,
        "solved_wall_s": None if stats.solved_wall_s is None else round(stats.solved_wall_s, 3),
        "final_metrics": logger.last,
    }
    run_dir.write_summary(summary)
    return summary

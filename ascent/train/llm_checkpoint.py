"""What an LLM run's checkpoint holds, and its final model.

    step-000100/
      state.pt        rank 0's plain state: progress, schedules, prompt sampler, reward
                      history, policy version (tensors and plain values only)
      rank-R.pt       each rank's sampling stream and RNG states (and its replay buffer)
      shards/         the actor's (and critic's) parameters and optimiser state, keyed by
                      parameter name, one file per rank (torch.distributed.checkpoint)
      meta.json       step, validation metric, world size
      manifest.json   every other file's size and sha256 (rundir.write_manifest): what
                      --resume checks before it trusts the checkpoint

A checkpoint written by N ranks resumes on M: the shards are resharded; the per-rank streams
restart from (seed, step, rank) instead, with a note, so such a resume continues the same
training but does not replay the unbroken run's samples bit for bit (with M = N it does).

`final-model/` is the trained policy as a save_pretrained directory (LoRA merged, shards
gathered), written by rank 0 from the actor's weight stream.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from ascent.models import load_frozen, load_policy
from ascent.rules import LLMConfig
from ascent.rundir import FINAL_MODEL, RunDir
from ascent.train.checkpoint import (
    KIND_KEY,
    LLM_KIND,
    capture_rng_state,
    export_model,
    load_checkpoint,
    load_rank_state,
    restore_rng_state,
    save_checkpoint,
    unfit_checkpoint,
)
from ascent.train.controller import Controller
from ascent.train.shards import load_shards

REQUIRED = ("progress", "schedules", "sampler", "version")


@dataclass
class Progress:
    """What the loop carries from step to step (checkpointed with the weights)."""

    step: int = 0
    wall_s: float = 0.0  # wall time of the run so far, over all its sessions (resumes)
    before: dict[str, float] = field(default_factory=dict)  # eval metrics before RL
    last_eval: dict[str, float] = field(default_factory=dict)
    last_eval_step: int = -1
    best_watched: float | None = None  # [train] plateau_metric's best value so far
    flat_evals: int = 0  # evaluations in a row without an improvement of plateau_min_delta


def _shards(run: Controller) -> dict[str, Any]:
    state = run.actor.checkpoint_state()
    if hasattr(run.critic, "checkpoint_state"):
        state |= run.critic.checkpoint_state()
    return state


def _schedules(run: Controller) -> dict[str, Any]:
    state = run.actor.schedule_state()
    if hasattr(run.critic, "schedule_state"):
        state |= run.critic.schedule_state()
    return state


def save_run(run: Controller, run_dir: RunDir, progress: Progress, keep_last: int) -> Path:
    """A checkpoint of step `progress.step` (all ranks together); the best is kept by the
    validation reward when this step was evaluated, and the `keep_last` newest besides."""
    fresh = progress.last_eval_step == progress.step
    # prefetched batches not trained on yet are dropped: their prompts are drawn again
    position = getattr(run.source, "sampler_state", run.rollouts.sampler.state_dict)
    state = {
        KIND_KEY: LLM_KIND,
        "progress": vars(progress).copy(),
        "schedules": _schedules(run),
        "sampler": position(),
        "version": run.version,
    }
    history = run.rollouts.history
    if history is not None:
        state["history"] = history.state_dict()
    rank_state = {"rng": capture_rng_state(), "generator": run.rollouts.generator.get_state()}
    if run.replay is not None:
        rank_state["replay"] = run.replay.state_dict()
    return save_checkpoint(
        run_dir.checkpoints,
        progress.step,
        state,
        metric=progress.last_eval.get("eval/reward") if fresh else None,
        keep_last=keep_last,
        shards=_shards(run),
        rank_state=rank_state,
        dist=run.dist,
    )


def restore_run(run: Controller, path: Path, seed: int) -> Progress:
    """Continue from checkpoint `path`; the weights also reach the engines. (`seed`: the
    run's, from which a rank's sampling stream restarts when the world size changed.)"""
    history = run.rollouts.history
    required = (*REQUIRED, *(("history",) if history is not None else ()))
    state = load_checkpoint(path, LLM_KIND, required=required)
    shards = _shards(run)
    load_shards(path, shards)
    try:
        run.actor.load_checkpoint_state(shards)
        if hasattr(run.critic, "load_checkpoint_state"):
            run.critic.load_checkpoint_state(shards)
        run.actor.load_schedule_state(state["schedules"])
        if hasattr(run.critic, "load_schedule_state"):
            run.critic.load_schedule_state(state["schedules"])
        run.rollouts.sampler.load_state_dict(state["sampler"])
        if history is not None:
            history.load_state_dict(state["history"])
        run.version = int(state["version"])
        progress = Progress(**state["progress"])
        _restore_rank_state(run, path, progress.step, seed)
    except (RuntimeError, KeyError, ValueError, TypeError, IndexError) as err:
        raise unfit_checkpoint(path, err) from None
    run.publish()
    return progress


def _restore_rank_state(run: Controller, path: Path, step: int, seed: int) -> None:
    rank_state = load_rank_state(path, run.dist)
    if rank_state is None:
        if run.dist.main:
            print(
                f"note: {path} was written by another number of ranks: weights, optimiser and "
                "data position continue; each rank's sampling stream restarts from its seed"
            )
        run.rollouts.generator.manual_seed(seed * 1_000_003 + step * 131 + run.dist.rank)
        return
    restore_rng_state(rank_state["rng"])
    run.rollouts.generator.set_state(rank_state["generator"])
    if run.replay is not None:
        run.replay.load_state_dict(rank_state["replay"])


def export_final(run: Controller, cfg: LLMConfig, run_dir: RunDir) -> Path:
    """The trained policy as `RUN/final-model/`: a plain model of the run's architecture
    filled from the actor's weight stream (LoRA merged, shards gathered; every rank streams,
    rank 0 writes)."""
    target = run_dir.path / FINAL_MODEL
    model_cfg, cpu = cfg.model, torch.device("cpu")
    model = (
        load_frozen(model_cfg.name_or_path, model_cfg, cpu, torch.float32)
        if run.dist.main
        else None
    )
    params = {}
    if model is not None:
        params = dict(model.named_parameters(remove_duplicate=False))
        params |= dict(model.named_buffers())
    with torch.no_grad():
        for name, tensor in run.actor.weights():
            if model is not None and name in params:
                params[name].copy_(tensor.to("cpu", params[name].dtype))
    if run.dist.main:
        export_model(target, model, run.tokenizer)
    run.dist.barrier()
    return target


def policy_from_checkpoint(checkpoint: Path, model_cfg: Any) -> torch.nn.Module:
    """The run's policy (`[model]` as the run had it) with the weights of `checkpoint`, on
    the CPU, in one process whatever number of ranks wrote it."""
    from torch.distributed.checkpoint.state_dict import get_model_state_dict, set_model_state_dict

    load_checkpoint(checkpoint, LLM_KIND, required=REQUIRED)  # refuses what is not ours
    policy = load_policy(model_cfg, torch.device("cpu"))
    template = {"model": get_model_state_dict(policy)}
    load_shards(checkpoint, template)
    try:
        set_model_state_dict(policy, template["model"])
    except (RuntimeError, KeyError, ValueError) as err:
        raise unfit_checkpoint(checkpoint, err) from None
    return policy

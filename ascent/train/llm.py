"""The LLM RL loop: one trainer for every recipe in `examples/`.

    before = evaluate(held-out)
    for step in 1..total_steps:
        controller.step: rows -> rewards -> advantages -> update -> new weights (controller.py)
        log metrics; dump samples every sample_every; evaluate every eval_steps;
        checkpoint every save_steps (the best one kept by validation reward)
    after = evaluate(held-out); final-model/; summary.json

On N ranks (`ascent train CONFIG --nproc N`) every rank runs this loop: rollouts, the
sharded update and the evaluation are split between them, and rank 0 alone prints, logs,
dumps samples and writes summary.json (with `world_size`). A finished run exports the policy
and its tokenizer to `RUN/final-model/` (save_pretrained, LoRA merged), which `ascent serve
RUN` and `ascent eval` load. With `[assistant]` enabled, an API role reads the metrics every
log_interval steps (never slowing the loop).

A config with `[[stages]]` runs each stage this way in turn, the next starting from the
previous stage's final weights (llm_stages.py).

Ctrl-C finishes the current step (on every rank: the request is shared), saves a checkpoint
and exits; a second Ctrl-C aborts at once. `ascent train CONFIG --resume RUN_DIR` restores
weights, optimiser, schedule, RNG streams and data position, and continues as if never
stopped (llm_checkpoint.py).
"""

from __future__ import annotations

import json
import resource
import signal
import threading
import time
from collections.abc import Iterator
from contextlib import closing, contextmanager
from pathlib import Path
from typing import Any

from transformers.utils import logging as hf_logging

from ascent.api.assistant import LogAssistant, assistant_session
from ascent.config.llm_sections import TrainSection
from ascent.data import ResampleReport
from ascent.errors import AscentError
from ascent.observe.live import LiveDiagnosis
from ascent.observe.metrics import MetricsLogger
from ascent.observe.progress import TrainProgress
from ascent.rules import LLMConfig
from ascent.rundir import RunDir
from ascent.runtime import resolve_device
from ascent.train.agentic_source import EpisodeSource, usage_report
from ascent.train.controller import Controller
from ascent.train.distributed import Dist
from ascent.train.evaluate import EvalResult, eval_policy
from ascent.train.llm_checkpoint import Progress, export_final, restore_run, save_run
from ascent.train.llm_rollout import sample_rows
from ascent.train.llm_setup import build_run
from ascent.train.llm_stages import train_stages
from ascent.train.numerics import check_numerics

PROGRESS_FIELDS = {
    "reward": "reward",
    "kl": "kl",
    "completions/mean_length": "len",
    "tokens_per_s": "tok/s",
    "eval/accuracy": "eval acc",
}


@contextmanager
def stop_requests() -> Iterator[dict[str, bool]]:
    """The first Ctrl-C (or SIGTERM: `kill`, a scheduler's preemption) asks the loop to stop
    after the current step and save; the second aborts."""
    flag = {"stop": False}
    if threading.current_thread() is not threading.main_thread():
        yield flag
        return

    def handler(signum: int, frame: object) -> None:
        if flag["stop"]:
            raise KeyboardInterrupt
        flag["stop"] = True

    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield flag
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


def _write_jsonl(path: Path, rows: list[dict[str, Any]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")


def _evaluate(
    run: Controller, cfg: LLMConfig, run_dir: RunDir, progress: Progress, label: str
) -> EvalResult:
    result = eval_policy(run.rollouts, run.task.eval, cfg.rollout)
    progress.last_eval, progress.last_eval_step = result.metrics(), progress.step
    if run.dist.main:
        _write_jsonl(run_dir.samples_dir / f"eval-{label}.jsonl", result.samples)
    return result


def _accuracy_line(when: str, result: dict[str, float], n: int, before: dict[str, float]) -> str:
    acc = result.get("eval/accuracy")
    if acc is None:
        return f"held-out reward {when} RL: {result['eval/reward']:.3f} ({n} problems)"
    line = f"held-out accuracy {when} RL: {acc:.1%} ({n} problems)"
    if "eval/accuracy" in before and when == "after":
        line += f", {100 * (acc - before['eval/accuracy']):+.1f} points"
    return line


def peak_rss_mb() -> float:
    """The most resident memory this process has held so far (Linux reports KiB), in MiB: what
    `ascent plan` predicts as peak_memory_mb. Engines and workers in other processes (vLLM,
    Ray actors, sandboxes) are not counted."""
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


def _by_source(
    weights: dict[str, float] | None, before: dict[str, float], after: dict[str, float]
) -> dict[str, Any]:
    """Each [[data.sources]] source's held-out accuracy before and after (nothing with one)."""
    if not weights:
        return {}
    key = "eval/{}/accuracy".format
    return {
        "eval_accuracy_by_source": {
            name: {"before": before.get(key(name)), "after": after.get(key(name))}
            for name in weights
        }
    }


class _Clock:
    """Wall time of the run across sessions: earlier sessions' total plus this one's."""

    def __init__(self, progress: Progress) -> None:
        self.progress = progress
        self.base = progress.wall_s
        self.t0 = time.perf_counter()

    def tick(self) -> float:
        self.progress.wall_s = self.base + time.perf_counter() - self.t0
        return self.progress.wall_s


class _Silent:
    """The metrics logger of ranks other than 0: they log nothing."""

    def __init__(self) -> None:
        self.last: dict[str, Any] = {}

    def log(self, step: int, metrics: dict[str, Any]) -> None:
        return None

    def __enter__(self) -> _Silent:
        return self

    def __exit__(self, *exc: object) -> None:
        return None


def plateaued(t: TrainSection, progress: Progress) -> bool:
    """After an evaluation: has `[train] plateau_metric` stopped improving for
    plateau_patience evaluations? (The evaluation before RL is the first reference.)"""
    value = progress.last_eval.get(t.plateau_metric)
    if not t.plateau_patience or value is None:
        return False
    if progress.best_watched is None or value > progress.best_watched + t.plateau_min_delta:
        progress.best_watched, progress.flat_evals = value, 0
        return False
    progress.flat_evals += 1
    return progress.flat_evals >= t.plateau_patience


def _loop(
    run: Controller,
    cfg: LLMConfig,
    run_dir: RunDir,
    progress: Progress,
    log: MetricsLogger | _Silent,
    bar: TrainProgress,
    stop: dict[str, bool],
    clock: _Clock,
    assistant: LogAssistant | None = None,
    live: LiveDiagnosis | None = None,
) -> tuple[int, str]:
    """Train until total_steps, a plateau or a stop request; return the step last
    checkpointed and why the loop ended ("total_steps", "plateau" or "interrupted")."""
    t, every, main = cfg.train, cfg.logging, run.dist.main
    saved, flat = -1, False
    while progress.step < t.total_steps and not flat and not run.dist.any(stop["stop"]):
        progress.step += 1
        metrics, scored = run.step(progress.step)
        report = ResampleReport.from_metrics(metrics)
        if report is not None:  # history resampling ended an epoch in this step
            bar.print(report.line())
        last = progress.step == t.total_steps
        if (t.eval_steps and progress.step % t.eval_steps == 0) or last:
            label = f"step-{progress.step:06d}"
            metrics.update(_evaluate(run, cfg, run_dir, progress, label).metrics())
            flat = plateaued(t, progress)
            if flat:
                last = True  # the stage is over: checkpoint it as the last step
                bar.print(
                    f"{t.plateau_metric} has not improved by {t.plateau_min_delta:g} for "
                    f"{t.plateau_patience} evaluations (best {progress.best_watched:.4g}): "
                    f"ending at step {progress.step}"
                )
        log.log(progress.step, metrics)
        bar.update(progress.step, metrics)
        if live is not None:
            live.observe(progress.step, metrics)
        if assistant is not None:
            assistant.observe(progress.step, metrics)
        if main and every.sample_every and progress.step % every.sample_every == 0:
            rows = sample_rows(scored, progress.step, every.num_samples)
            _write_jsonl(run_dir.samples_dir / f"step-{progress.step:06d}.jsonl", rows)
        if (t.save_steps and progress.step % t.save_steps == 0) or last:
            clock.tick()
            save_run(run, run_dir, progress, t.keep_last)
            saved = progress.step
    stop["stop"] = run.dist.any(stop["stop"])
    reason = "interrupted" if stop["stop"] else ("plateau" if flat else "total_steps")
    return saved, reason


def train_llm(cfg: LLMConfig, run_dir: RunDir, dist: Dist | None = None) -> dict[str, Any]:
    """Train `cfg` in `run_dir` (resuming it when `run_dir.resume_from` is set), on this
    process's rank of `dist` (default: one process on `[run] device`).

    Returns the summary it writes to `run_dir/summary.json`: eval_accuracy_before/after
    (fractions of the held-out split; None when the reward does not judge correctness),
    eval_reward_before/after, steps, wall_s (all sessions of the run), world_size, the final
    metrics and the run's paths.
    """
    dist = dist or Dist.single(resolve_device(cfg.run.device))
    if cfg.stages:
        return train_stages(cfg, run_dir, dist, train_llm)
    hf_logging.disable_progress_bar()
    run = build_run(cfg, dist)
    resuming = run_dir.resume_from is not None
    try:
        progress = restore_run(run, run_dir.resume_from, cfg.run.seed) if resuming else Progress()
    except BaseException:
        run.close()  # no engine, reward worker or producer may outlive a failed resume
        raise
    preflight = None
    if cfg.run.preflight:
        try:
            preflight = _preflight(run, cfg, dist)
        except BaseException:
            run.close()
            raise
    clock = _Clock(progress)
    n_eval = len(run.task.eval)
    log = _Silent()
    if dist.main:
        log = MetricsLogger(
            run_dir, cfg.logging, config=cfg.model_dump(mode="json"),
            resume_step=progress.step if resuming else None,
        )  # fmt: skip
    bar = TrainProgress(
        cfg.train.total_steps,
        PROGRESS_FIELDS,
        enabled=cfg.logging.progress and dist.main,
        start=progress.step,
        quiet=not dist.main,
    )
    episodes = run.source if isinstance(run.source, EpisodeSource) else None
    # the analyst's tokens are counted with the agentic roles' when there are some
    with (
        closing(run),
        log,
        stop_requests() as stop,
        bar,
        usage_report(episodes, dist, run_dir, bar.print) as usage,
        assistant_session(
            cfg, run_dir.path, bar.print, usage, enabled=dist.main, interrupted=lambda: stop["stop"]
        ) as assistant,
    ):
        if not progress.before:
            progress.before = _evaluate(run, cfg, run_dir, progress, "before").metrics()
            plateaued(cfg.train, progress)  # the reference a plateau is judged against
        bar.print(_accuracy_line("before", progress.before, n_eval, {}))
        live = None
        if dist.main:
            resume_step = progress.step if resuming else None
            live = LiveDiagnosis(run_dir.path, bar.print, resume_step=resume_step)
        saved, ended = _loop(run, cfg, run_dir, progress, log, bar, stop, clock, assistant, live)
        if stop["stop"] and saved != progress.step:
            clock.tick()
            save_run(run, run_dir, progress, cfg.train.keep_last)
        elif not stop["stop"]:
            bar.print(_accuracy_line("after", progress.last_eval, n_eval, progress.before))
            export_final(run, cfg, run_dir)
        sampler = episodes.engine if episodes is not None else run.engine
        summary = _summary(
            run, cfg, progress, log, clock.tick(), ended=ended, transport=sampler.transport.name
        )
        if preflight is not None:
            summary["preflight"] = preflight
    if dist.main:
        run_dir.write_summary(summary)
    if stop["stop"]:
        if dist.main:
            print(
                f"interrupted after step {progress.step}: checkpoint saved; continue with "
                f"`ascent train CONFIG --resume {run_dir.path}`"
            )
        raise KeyboardInterrupt
    return summary


def _preflight(run: Controller, cfg: LLMConfig, dist: Dist) -> dict[str, Any]:
    """`[run] preflight`: the numerics check on the run's own workers, printed; a weight sync
    that does not reach the engine stops the run (nothing it trained would be sampled)."""
    report = check_numerics(run, cfg)
    if dist.main:
        print("numerics preflight (engine against trainer, one batch):")
        for line in report.table():
            print(f"  {line}")
        for line in report.advice:
            print(f"warning: {line}")
    if not report.weight_sync_ok:
        raise AscentError(f"[run] preflight: {report.advice[-1]}")
    return report.as_json()


def _placement(cfg: LLMConfig) -> dict[str, Any]:
    """Where the run's roles ran (summary.json)."""
    c = cfg.cluster
    if c.backend == "local":
        return {"backend": "local"}
    import ray

    return {
        "backend": "ray",
        "placement": c.placement,
        "rollout_replicas": c.rollout_replicas,
        "reward_workers": c.reward_workers,
        "nodes": sum(1 for n in ray.nodes() if n.get("Alive")),
    }


def _summary(
    run: Controller,
    cfg: LLMConfig,
    progress: Progress,
    log: MetricsLogger | _Silent,
    wall: float,
    *,
    ended: str,
    transport: str,
) -> dict[str, Any]:
    after = progress.last_eval if progress.last_eval_step == progress.step else {}
    return {
        "eval_accuracy_before": progress.before.get("eval/accuracy"),
        "eval_accuracy_after": after.get("eval/accuracy"),
        "eval_reward_before": progress.before.get("eval/reward"),
        "eval_reward_after": after.get("eval/reward"),
        **_by_source(run.task.weights, progress.before, after),
        "eval_problems": len(run.task.eval),
        "steps": progress.step,
        "total_steps": cfg.train.total_steps,
        "wall_s": round(wall, 2),
        "interrupted": ended == "interrupted",
        "ended": ended,  # total_steps, plateau or interrupted
        "world_size": run.dist.world_size,
        "peak_rss_mb": peak_rss_mb(),
        "placement": _placement(cfg),
        "weight_transport": transport,  # how the new weights reached the sampling engine
        "final_metrics": {k: v for k, v in log.last.items() if k != "step"},
    }

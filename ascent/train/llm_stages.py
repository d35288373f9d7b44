"""Staged training (SRPO): `[[stages]]` run one after another, each from the last one's weights.

    RUN/stages/01-<name>/   stage 1: a complete run directory (config, metrics, checkpoints,
                            summary.json) and final-model/, its last weights as a
                            save_pretrained directory (with the tokenizer; LoRA merged)
    RUN/stages/02-<name>/   stage 2: [model] name_or_path = stage 1's final-model/, its own
                            [data], [rollout] max_new_tokens, ... from its [[stages]] table
    RUN/summary.json        the summary every run writes: accuracy before stage 1 and after
                            the last stage, steps and wall time summed, and one entry per stage

The reference policy of a stage (for KL) is its starting point, and a critic is built afresh
from it: what carries over between stages is the policy's weights.

`--resume` of a staged run skips the stages that finished (their summary.json and
final-model/ are there), resumes the one in progress and runs the rest.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ascent.rules import LLMConfig
from ascent.rundir import FINAL_MODEL, RunDir, release
from ascent.train.distributed import Dist


def stage_config(cfg: LLMConfig, index: int, name: str, start: str, parent: Path) -> LLMConfig:
    """A stage's config: its run directory under `parent`, its weights from `start`."""
    run = cfg.run.model_copy(update={"name": f"{index:02d}-{name}", "output_dir": str(parent)})
    model = cfg.model.model_copy(update={"name_or_path": start})
    return cfg.model_copy(update={"run": run, "model": model})


def train_stages(
    cfg: LLMConfig,
    run_dir: RunDir,
    dist: Dist,
    train_one: Callable[[LLMConfig, RunDir, Dist], dict[str, Any]],
) -> dict[str, Any]:
    """Run every stage in order with `train_one` (the trainer of one run, which the caller
    passes so that this module needs nothing above it); return (and write, on rank 0) the
    run's summary."""
    start = cfg.model.name_or_path
    stages: list[dict[str, Any]] = []
    configs = cfg.stage_configs()
    for index, (name, stage_cfg) in enumerate(configs, 1):
        stage_cfg = stage_config(stage_cfg, index, name, start, run_dir.path / "stages")
        path = Path(stage_cfg.run.output_dir) / stage_cfg.run.name
        if run_dir.resuming and _finished(path):
            if dist.main:
                print(f"stage {index}/{len(configs)} '{name}': finished earlier, skipped")
            summary = json.loads((path / "summary.json").read_text())
            stage_dir = RunDir(path)
        else:
            if dist.main:
                print(f"stage {index}/{len(configs)} '{name}': starting from {start}")
            resume = path if run_dir.resuming and path.is_dir() else None
            # rank 0 creates it, every rank gets the same RunDir (as train.create_run_dir)
            created = RunDir.create(stage_cfg, resume=resume) if dist.main else None
            stage_dir = dist.broadcast(created)
            try:
                summary = train_one(stage_cfg, stage_dir, dist)  # ends by exporting final-model/
            finally:
                release(stage_dir.path)  # the run's own lock (its directory) covers the rest
        start = str(stage_dir.path / FINAL_MODEL)
        kept = {k: v for k, v in summary.items() if k not in ("final_metrics", "paths")}
        stages.append({"name": name, "run_dir": str(stage_dir.path), "final_model": start, **kept})
    first, last = stages[0], stages[-1]
    summary = {
        "eval_accuracy_before": first["eval_accuracy_before"],
        "eval_accuracy_after": last["eval_accuracy_after"],
        "eval_reward_before": first["eval_reward_before"],
        "eval_reward_after": last["eval_reward_after"],
        "eval_problems": last["eval_problems"],
        "steps": sum(s["steps"] for s in stages),
        "total_steps": sum(s["total_steps"] for s in stages),
        "wall_s": round(sum(s["wall_s"] for s in stages), 2),
        "peak_rss_mb": max(s.get("peak_rss_mb", 0.0) for s in stages),
        "interrupted": False,
        "final_metrics": summary["final_metrics"],
        "stages": stages,
    }
    if dist.main:
        run_dir.write_summary(summary)
    return summary


def _finished(stage: Path) -> bool:
    """The stage ran to its end: final-model/ exported and summary.json written after it."""
    try:
        summary = json.loads((stage / "summary.json").read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return False
    return not summary.get("interrupted") and (stage / FINAL_MODEL / "config.json").is_file()

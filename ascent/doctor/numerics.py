"""`ascent doctor --numerics CONFIG`: the numerics preflight (ascent.train.numerics) on the
configured model, engine, dtype and sampling settings, before any run: a table, what to
change, and, last, one JSON object. Exit 0 when the engine samples the trainer's policy,
1 when something is off (the table and the advice say what)."""

from __future__ import annotations

import json
from contextlib import closing
from pathlib import Path

from transformers.utils import logging as hf_logging

from ascent.configfile import load_config
from ascent.errors import AscentError
from ascent.rules import LLMConfig
from ascent.runtime import resolve_device, setup_runtime
from ascent.train.distributed import Dist
from ascent.train.llm_setup import build_run
from ascent.train.numerics import check_numerics


def numerics(config: Path, overrides: list[str]) -> tuple[list[str], int]:
    """The lines to print (the JSON object last) and the exit code."""
    cfg = load_config(config, overrides)
    if not isinstance(cfg, LLMConfig):
        raise AscentError(
            f"{config}: --numerics compares an LLM engine with its trainer; this is a classic "
            "PPO config"
        )
    setup_runtime(cfg.run, 1)
    hf_logging.disable_progress_bar()
    run = build_run(cfg, Dist.single(resolve_device(cfg.run.device)))
    with closing(run):
        report = check_numerics(run, cfg)
    engine = cfg.rollout.engine
    lines = [f"numerics of {cfg.model.name_or_path} with the {engine} engine, one batch:"]
    lines += report.table()
    lines += [f"fix: {line}" for line in report.advice]
    lines.append(json.dumps(report.as_json()))
    return lines, 0 if report.verdict == "ok" else 1

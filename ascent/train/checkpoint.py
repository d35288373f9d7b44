"""Checkpoints that survive being killed at any moment.

Layout under `RUN/checkpoints/`:

    step-000100/            one complete checkpoint (state.pt, meta.json, optional extras
                            such as a save_pretrained `model/` directory)
    best.json               {"step": ..., "metric": ...}: the best by validation metric
    .tmp-step-000200-PID/   a save in progress; ignored, removed by the next save

A save writes everything into a temporary directory, fsyncs it, and renames it into place, so
a reader only ever sees complete checkpoints: killing the process mid-save leaves the previous
one loadable. The last `keep_last` checkpoints and the best one are kept; older ones pruned.

A finished LLM run also writes `RUN/final-model/` (`export_model`): the trained policy and its
tokenizer as a save_pretrained directory, which `ascent serve`, `ascent eval`, the next stage
of a staged run, or plain `AutoModelForCausalLM.from_pretrained` load like any model.
"""

from __future__ import annotations

import json
import os
import random
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ascent.errors import AscentError

STATE_FILE = "state.pt"
META_FILE = "meta.json"
BEST_FILE = "best.json"
PREFIX = "step-"
FINAL_MODEL = "final-model"


def write_text_atomic(path: Path, text: str) -> None:
    """Replace `path` with `text` so that readers see the old or the new file, never half."""
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.write(text)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def write_json_atomic(path: Path, data: Any) -> None:
    write_text_atomic(path, json.dumps(data, indent=2, sort_keys=True) + "\n")


def replace_dir(tmp: Path, final: Path) -> None:
    """Move the complete directory `tmp` to `final`, replacing what is there without a gap."""
    _fsync_tree(tmp)
    if final.exists():
        old = final.parent / f".tmp-old-{final.name}-{os.getpid()}"
        os.replace(final, old)
        os.replace(tmp, final)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.replace(tmp, final)


def export_model(target: Path, model: Any, tokenizer: Any) -> Path:
    """Write `model` and `tokenizer` into `target` as one save_pretrained directory, atomically
    (a run killed while exporting keeps the previous export, or none)."""
    target = Path(target)
    tmp = target.parent / f".tmp-{target.name}-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    replace_dir(tmp, target)
    return target


def checkpoint_name(step: int) -> str:
    return f"{PREFIX}{step:06d}"


def _fsync_tree(root: Path) -> None:
    for path in sorted(root.rglob("*")):
        if path.is_file():
            with open(path, "rb") as fh:
                os.fsync(fh.fileno())


def list_checkpoints(ckpt_dir: Path) -> list[Path]:
    """Complete checkpoints, oldest first."""
    if not ckpt_dir.is_dir():
        return []
    found = [
        p
        for p in ckpt_dir.iterdir()
        if p.is_dir() and p.name.startswith(PREFIX) and (p / META_FILE).is_file()
    ]
    return sorted(found, key=lambda p: int(p.name[len(PREFIX) :]))


def latest_checkpoint(run_or_ckpt_dir: Path) -> Path | None:
    ckpt_dir = _ckpt_dir(Path(run_or_ckpt_dir))
    found = list_checkpoints(ckpt_dir)
    return found[-1] if found else None


def best_checkpoint(run_or_ckpt_dir: Path) -> Path | None:
    ckpt_dir = _ckpt_dir(Path(run_or_ckpt_dir))
    best = _read_best(ckpt_dir)
    if best is None:
        return None
    path = ckpt_dir / checkpoint_name(int(best["step"]))
    return path if (path / META_FILE).is_file() else None


def _ckpt_dir(path: Path) -> Path:
    return path / "checkpoints" if (path / "checkpoints").is_dir() else path


def _read_best(ckpt_dir: Path) -> dict[str, Any] | None:
    try:
        return json.loads((ckpt_dir / BEST_FILE).read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return None


def save_checkpoint(
    ckpt_dir: Path,
    step: int,
    state: dict[str, Any],
    *,
    metric: float | None = None,
    keep_last: int = 2,
    write_extra: Callable[[Path], None] | None = None,
) -> Path:
    """Atomically write checkpoint `step`; track the best by `metric` (higher is better).

    `state` is anything `torch.save` can write (state dicts, RNG states, counters).
    `write_extra(tmp_dir)` may add files (e.g. `model.save_pretrained(tmp_dir / "model")`)
    before the checkpoint becomes visible.
    """
    ckpt_dir = Path(ckpt_dir)
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    for stale in ckpt_dir.glob(".tmp-*"):
        shutil.rmtree(stale, ignore_errors=True)
    final = ckpt_dir / checkpoint_name(step)
    tmp = ckpt_dir / f".tmp-{final.name}-{os.getpid()}"
    tmp.mkdir()
    torch.save(state, tmp / STATE_FILE)
    if write_extra is not None:
        write_extra(tmp)
    (tmp / META_FILE).write_text(json.dumps({"step": step, "metric": metric}) + "\n")
    replace_dir(tmp, final)  # re-saving a step (e.g. after a resume) swaps, never leaves a gap
    if metric is not None:
        best = _read_best(ckpt_dir)
        if best is None or best.get("metric") is None or metric > best["metric"]:
            write_json_atomic(ckpt_dir / BEST_FILE, {"step": step, "metric": metric})
    _prune(ckpt_dir, keep_last)
    return final


def _prune(ckpt_dir: Path, keep_last: int) -> None:
    found = list_checkpoints(ckpt_dir)
    best = _read_best(ckpt_dir)
    protected = {p.name for p in found[-keep_last:]}
    if best is not None:
        protected.add(checkpoint_name(int(best["step"])))
    for path in found:
        if path.name not in protected:
            shutil.rmtree(path, ignore_errors=True)


def load_checkpoint(path: Path) -> dict[str, Any]:
    """Load a checkpoint's state; `path` is a run dir, its checkpoints dir, or one checkpoint."""
    path = Path(path)
    if not (path / STATE_FILE).is_file():
        latest = latest_checkpoint(path)
        if latest is None:
            raise AscentError(
                f"{path}: no complete checkpoint found (looked for checkpoints/step-*/); "
                "check the path, or start a new run without --resume"
            )
        path = latest
    # Our own files: they hold RNG states and Python scalars, which weights_only refuses.
    return torch.load(path / STATE_FILE, map_location="cpu", weights_only=False)


def capture_rng_state() -> dict[str, Any]:
    state: dict[str, Any] = {
        "python": random.getstate(),
        "numpy": np.random.get_state(),
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore_rng_state(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])

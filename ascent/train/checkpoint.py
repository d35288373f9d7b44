"""Checkpoints that survive being killed at any moment.

Layout under `RUN/checkpoints/`:

    step-000100/            one complete checkpoint (state.pt, meta.json, optional extras
                            such as a save_pretrained `model/` directory)
    best.json               {"step": ..., "metric": ...}: the best by validation metric
    .tmp-step-000200-PID/   a save in progress; ignored, removed by the next save

A save writes everything into a temporary directory, fsyncs it, and renames it into place, so
a reader only ever sees complete checkpoints: killing the process mid-save leaves the previous
one loadable. Each carries a manifest of its files' sizes and hashes (`write_manifest`), so
damage done after the save is found before loading (`rundir.resume_point`); a full disk
during a save removes the partial one and stops the run in one line (`disk_full`). The last
`keep_last` checkpoints and the best one are kept; older ones pruned.

A checkpoint is data, never code: `state.pt` holds only tensors and plain values (numbers,
strings, None, lists, tuples, dicts), checked when it is written and enforced when it is read
(`torch.load(weights_only=True)`), so a tampered or foreign file is refused in one line and
nothing in it runs. Each state names its `kind` ("llm", "classic"); loading checks it, so a
checkpoint of another kind of run is refused by name rather than by a missing key.

A finished LLM run also writes `RUN/final-model/` (`export_model`): the trained policy and its
tokenizer as a save_pretrained directory, which `ascent serve`, `ascent eval`, the next stage
of a staged run, or plain `AutoModelForCausalLM.from_pretrained` load like any model.
"""

from __future__ import annotations

import errno
import json
import os
import pickle
import random
import shutil
import zipfile
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ascent.errors import AscentError
from ascent.rundir import (
    BEST_FILE,
    META_FILE,
    checkpoint_name,
    latest_checkpoint,
    list_checkpoints,
    read_best,
    replace_dir,
    write_json_atomic,
    write_manifest,
)
from ascent.train.distributed import Dist
from ascent.train.shards import save_shards

STATE_FILE = "state.pt"
KIND_KEY = "kind"
LLM_KIND, CLASSIC_KIND = "llm", "classic"  # the values of `kind`
FULL_BELOW_BYTES = 2**20  # free space left on a disk a failed write found full
PLAIN = (bool, int, float, str, type(None), torch.Tensor, torch.dtype, torch.Size)


def export_model(target: Path, model: Any, tokenizer: Any) -> Path:
    """Write `model` and `tokenizer` into `target` as one save_pretrained directory, atomically
    (a run killed while exporting keeps the previous export, or none)."""
    target = Path(target)
    tmp = target.parent / f".tmp-{target.name}-{os.getpid()}"
    for stale in target.parent.glob(f".tmp-*{target.name}-*"):  # debris of a killed export
        shutil.rmtree(stale, ignore_errors=True)
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    replace_dir(tmp, target)
    return target


def save_checkpoint(
    ckpt_dir: Path,
    step: int,
    state: dict[str, Any],
    *,
    metric: float | None = None,
    keep_last: int = 2,
    write_extra: Callable[[Path], None] | None = None,
    shards: dict[str, Any] | None = None,
    rank_state: dict[str, Any] | None = None,
    dist: Dist | None = None,
) -> Path:
    """Atomically write checkpoint `step`; track the best by `metric` (higher is better).

    `state` (rank 0's) and `rank_state` (each rank's own: its sampling stream) hold tensors
    and plain values only (`check_plain`): state dicts, RNG states as returned by
    `capture_rng_state`, counters. `shards` (the workers' `checkpoint_state`: weights and
    optimiser state, sharded on several ranks) goes to `shards/` with DCP. `write_extra(tmp)`
    may add files (e.g. `model.save_pretrained(tmp / "model")`). On several ranks every rank
    calls this together; rank 0 alone renames the finished directory into place.
    """
    dist = dist or Dist.single()
    check_plain(state)
    check_plain(rank_state or {})
    ckpt_dir = Path(ckpt_dir)
    final = ckpt_dir / checkpoint_name(step)
    tmp = ckpt_dir / f".tmp-{final.name}"
    if dist.main:
        ckpt_dir.mkdir(parents=True, exist_ok=True)
        for stale in ckpt_dir.glob(".tmp-*"):
            shutil.rmtree(stale, ignore_errors=True)
        tmp.mkdir()
    dist.barrier()
    try:
        if shards is not None:
            save_shards(tmp, shards)
        if rank_state is not None:
            torch.save(rank_state, tmp / rank_file(dist.rank))
        dist.barrier()
        if dist.main:
            torch.save(state, tmp / STATE_FILE)
            if write_extra is not None:
                write_extra(tmp)
            meta = {"step": step, "metric": metric, "world_size": dist.world_size}
            (tmp / META_FILE).write_text(json.dumps(meta) + "\n")
            write_manifest(tmp)
    except BaseException as err:
        if not disk_full(err, tmp):
            raise
        shutil.rmtree(tmp, ignore_errors=True)  # the space it took, back
        raise AscentError(disk_full_message(ckpt_dir.parent, f"saving {final.name}")) from None
    if dist.main:
        replace_dir(tmp, final)  # re-saving a step (after a resume) swaps, never leaves a gap
        if metric is not None:
            best = read_best(ckpt_dir)
            if best is None or best.get("metric") is None or metric > best["metric"]:
                write_json_atomic(ckpt_dir / BEST_FILE, {"step": step, "metric": metric})
        _prune(ckpt_dir, keep_last)
    dist.barrier()
    return final


def disk_full(err: BaseException, written: Path | None = None) -> bool:
    """Whether `err` came of a full disk: an ENOSPC, or what torch made of one (DCP wraps it
    in a CheckpointException; torch.save's zip writer raises a RuntimeError about the file
    position), in which case the disk of `written` is left (all but) full."""
    if isinstance(err, OSError) and err.errno in (errno.ENOSPC, errno.EDQUOT):
        return True
    if "No space left on device" in str(err):
        return True
    if written is None or isinstance(err, (KeyboardInterrupt, SystemExit)):
        return False
    try:
        return shutil.disk_usage(written).free < FULL_BELOW_BYTES
    except OSError:
        return False


def disk_full_message(run_path: Path, doing: str) -> str:
    """One line for a full disk: where, what was being written, which checkpoint is intact."""
    last = latest_checkpoint(run_path)
    kept = f"{last.name} is intact" if last is not None else "no checkpoint was written yet"
    return (
        f"no space left on the disk of {run_path} while {doing}; {kept}: free space (or "
        f"move the run), then ascent train --resume {run_path}"
    )


def rank_file(rank: int) -> str:
    return f"rank-{rank}.pt"


def load_rank_state(checkpoint: Path, dist: Dist) -> dict[str, Any] | None:
    """This rank's own state from `checkpoint`, or None when the checkpoint was written by
    another number of ranks (each rank's stream then restarts from a seed)."""
    meta = json.loads((checkpoint / META_FILE).read_text())
    if meta.get("world_size", 1) != dist.world_size:
        return None
    return _read_plain(checkpoint / rank_file(dist.rank))


def _prune(ckpt_dir: Path, keep_last: int) -> None:
    found = list_checkpoints(ckpt_dir)
    best = read_best(ckpt_dir)
    protected = {p.name for p in found[-keep_last:]}
    if best is not None:
        protected.add(checkpoint_name(int(best["step"])))
    for path in found:
        if path.name not in protected:
            shutil.rmtree(path, ignore_errors=True)


def check_plain(value: Any, where: str = "state") -> None:
    """Refuse (TypeError naming the key) anything but tensors and plain values: what
    `torch.load(weights_only=True)` reads back without running code."""
    if isinstance(value, PLAIN):
        return
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, (str, int)):
                raise TypeError(f"{where}: key {key!r} is a {type(key).__name__}, not str/int")
            check_plain(item, f"{where}[{key!r}]")
        return
    if type(value) in (list, tuple):
        for i, item in enumerate(value):
            check_plain(item, f"{where}[{i}]")
        return
    raise TypeError(
        f"{where} is a {type(value).__module__}.{type(value).__qualname__}; a checkpoint holds "
        "only tensors and plain values (convert it in the part's state_dict)"
    )


def load_checkpoint(
    path: Path, kind: str | None = None, required: Iterable[str] = ()
) -> dict[str, Any]:
    """Load a checkpoint's state; `path` is a run dir, its checkpoints dir, or one checkpoint.

    Only tensors and plain values are read (nothing in the file can run code). A file that
    is not such a checkpoint, is truncated, was written by another kind of run (`kind`), or
    lacks one of the `required` keys is refused with one line naming the file.
    """
    path = Path(path)
    if not (path / STATE_FILE).is_file():
        latest = latest_checkpoint(path)
        if latest is None:
            raise AscentError(
                f"{path}: no complete checkpoint found (looked for checkpoints/step-*/); "
                "check the path, or start a new run without --resume"
            )
        path = latest
    file = path / STATE_FILE
    state = _read_plain(file)
    if not isinstance(state, dict):
        raise AscentError(f"{file}: not an ascent checkpoint (it holds a {type(state).__name__})")
    if kind is not None and state.get(KIND_KEY) != kind:
        found = state.get(KIND_KEY)
        what = f"a checkpoint of a {found} run" if isinstance(found, str) else "no ascent kind"
        raise AscentError(
            f"{file}: {what}, but a {kind} run needs its own; point at a {kind} run directory"
        )
    missing = [key for key in required if key not in state]
    if missing:
        raise AscentError(
            f"{file}: incomplete checkpoint (no {', '.join(missing)}); it was not written by "
            "this version of ascent or was altered; resume from another checkpoint"
        )
    return state


def unfit_checkpoint(path: Path, err: Exception) -> AscentError:
    """One line for a checkpoint whose contents do not fit the run loading it (other model
    size, other recipe parts): the first line of the underlying error, cut short."""
    detail = (str(err).strip().splitlines() or [type(err).__name__])[0][:160]
    return AscentError(
        f"{path}: the checkpoint does not fit this run ({detail}); resume it with the config "
        "it was written with"
    )


def _read_plain(file: Path) -> Any:
    """torch.load with weights_only=True, every failure turned into one line."""
    try:
        return torch.load(file, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError:
        reason = "it holds objects other than tensors and plain values, which could run code"
    except (RuntimeError, EOFError, zipfile.BadZipFile, ValueError, IndexError, KeyError):
        reason = "the file is truncated or not a torch checkpoint"
    except OSError as err:
        reason = f"cannot read it ({err.strerror or err})"
    raise AscentError(f"{file}: refused: {reason}; nothing in it was run") from None


def capture_rng_state() -> dict[str, Any]:
    """The global RNG streams as plain values (tensors, ints, tuples)."""
    name, keys, pos, has_gauss, cached = np.random.get_state()
    state: dict[str, Any] = {
        "python": random.getstate(),
        "numpy": {
            "name": name,
            "keys": torch.from_numpy(keys.astype(np.int64)),
            "pos": int(pos),
            "has_gauss": int(has_gauss),
            "cached_gaussian": float(cached),
        },
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore_rng_state(state: dict[str, Any]) -> None:
    random.setstate(_as_tuples(state["python"]))
    n = state["numpy"]
    keys = n["keys"].numpy().astype(np.uint32)
    np.random.set_state((n["name"], keys, n["pos"], n["has_gauss"], n["cached_gaussian"]))
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def _as_tuples(value: Any) -> Any:
    """random.setstate wants tuples all the way down."""
    return tuple(_as_tuples(v) for v in value) if isinstance(value, (list, tuple)) else value

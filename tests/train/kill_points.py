"""Run `ascent ARGS...` and SIGKILL this very process at one chosen point of the run.

    python -m tests.train.kill_points POINT ascent-args...

POINT is where the process kills itself (a real SIGKILL: no handler, no cleanup runs):

    step:N              as step N starts (before any of its work); in the classic PPO loop,
                        as update N starts
    metrics-line:N      halfway through writing step N's line of metrics.jsonl
    checkpoint-write:N  halfway through writing a file of step N's checkpoint (its shards are
                        written; this rank's state file is cut in half)
    checkpoint-rename:N with step N's checkpoint complete in its temporary directory, before
                        it is renamed into place
    export              with final-model/ complete in its temporary directory, before the rename
    none                never

POINT@R kills only rank R of `ascent train --nproc N` (the ranks are processes the launcher
spawns: each arms its point as it starts); without @R, every rank is armed. The launcher
then takes the other ranks down.

The points are reached by wrapping the functions that do the work, so the library carries
no test hooks.
"""

from __future__ import annotations

import io
import os
import signal
import sys
from pathlib import Path
from typing import Any


def die() -> None:
    sys.stdout.flush()
    os.kill(os.getpid(), signal.SIGKILL)


def arm(point: str) -> None:
    import torch

    import ascent.observe.metrics as metrics
    import ascent.train.checkpoint as checkpoint

    point, _, rank = point.partition("@")
    if rank and rank != os.environ.get("RANK", "0"):
        return
    kind, _, arg = point.partition(":")
    n = int(arg) if arg else 0
    if kind == "step":
        import ascent.train.classic as classic
        from ascent.train.controller import Controller

        original_step = Controller.step

        def step(run, current):
            if current == n:
                die()
            return original_step(run, current)

        Controller.step = step
        original_anneal = classic.anneal  # the classic loop's first call of each update

        def anneal(optimizer, cfg, update):
            if update == n:
                die()
            return original_anneal(optimizer, cfg, update)

        classic.anneal = anneal
    elif kind == "metrics-line":
        original_log = metrics.MetricsLogger.log

        def log(self, step, values):
            if step == n and self._fh is not None:
                self._fh.write(f'{{"step": {step}, "reward": 0.')
                self._fh.flush()
                die()
            return original_log(self, step, values)

        metrics.MetricsLogger.log = log
    elif kind == "checkpoint-write":
        original_save = torch.save

        def save(obj, f, *args, **kwargs):
            named = isinstance(f, (str, Path))  # DCP also saves into in-memory buffers
            if named and Path(f).parent.name.startswith(f".tmp-step-{n:06d}"):
                buffer = io.BytesIO()
                original_save(obj, buffer, *args, **kwargs)
                Path(f).write_bytes(buffer.getvalue()[: len(buffer.getvalue()) // 2])
                die()
            return original_save(obj, f, *args, **kwargs)

        checkpoint.torch.save = save
    elif kind in ("checkpoint-rename", "export"):
        original_replace = checkpoint.replace_dir
        target = checkpoint.checkpoint_name(n) if kind == "checkpoint-rename" else "final-model"

        def replace_dir(tmp, final):
            if Path(final).name == target:
                die()
            return original_replace(tmp, final)

        checkpoint.replace_dir = replace_dir
    elif kind != "none":
        raise SystemExit(f"unknown kill point {point!r}")


def armed_rank(*args: Any) -> str:
    """One rank of `ascent train --nproc N`, with the point named by $KILL_POINT armed."""
    import ascent.train

    arm(os.environ["KILL_POINT"])
    return ascent.train.train_rank(*args)


def arm_ranks(point: str) -> None:
    """Arm `point` in each rank the launcher spawns: they inherit $KILL_POINT and run
    `armed_rank` (by this module's name, which they import; not `__main__`'s)."""
    import ascent.train
    from tests.train import kill_points

    os.environ["KILL_POINT"] = point
    ascent.train.train_rank = kill_points.armed_rank


if __name__ == "__main__":
    if "--nproc" in sys.argv[2:]:
        arm_ranks(sys.argv[1])
    else:
        arm(sys.argv[1])
    from ascent.cli import main

    main(sys.argv[2:])

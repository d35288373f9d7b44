"""One process against two ranks (torch.distributed, gloo, FSDP2) on the tiny GRPO task.

    .venv/bin/python benchmarks/distributed.py [--steps 20]

1. Equivalence: the same global batch of 16 completions updates the actor once on 1 rank and
   once split over 2 ranks (8 each); max_param_diff is the largest difference between the two
   resulting policies (float32, Adam eps 1e-6; see tests/train/test_distributed.py).
2. Speed: `steps` full RL steps (rollout, reward, update) of the embedded demo's settings on
   1 rank and on 2 ranks, after 2 warm-up steps; step_s_* is the mean wall time of a step,
   ratio = step_s_2 / step_s_1. On a 2-core machine two ranks share the cores that one rank
   would use one of, and every step pays for gathering shards and all-reduces: the figure
   shows the overhead of sharding, not a speed-up. On N GPUs the ranks do not share a device.

Last line: one JSON object {"max_param_diff", "step_s_1", "step_s_2", "ratio", ...}.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from ascent.configfile import load_config
from ascent.runtime import configure_cpu
from ascent.train.distributed import Dist, launch
from ascent.train.llm_setup import build_run
from ascent.train.train_batch import TrainBatch

UPDATE = [
    "train.batch_size=16",
    "train.micro_batch_size=4",
    "optim.eps=1e-6",
    "data.eval_size=24",
    "rollout.max_new_tokens=4",
]
SPEED = ["train.batch_size=128", "train.micro_batch_size=64", "data.eval_size=24"]


def update_rank(overrides: list[str], batch_path: str, out_path: str) -> None:
    dist = Dist.from_env("cpu")
    configure_cpu(0, dist.world_size)
    run = build_run(load_config(None, overrides), dist)
    batch = TrainBatch.from_tensors(load_file(batch_path))
    half = len(batch) // dist.world_size
    run.actor.update(batch.select(torch.arange(dist.rank * half, (dist.rank + 1) * half)), 1)
    weights = dict(run.actor.weights())
    if dist.main:
        save_file({k: v.contiguous() for k, v in weights.items()}, out_path)
    run.close()
    dist.close()


def timed_steps(overrides: list[str], steps: int) -> float:
    """Mean seconds per RL step after 2 warm-up steps (on this rank of the run)."""
    dist = Dist.from_env("cpu")
    configure_cpu(0, dist.world_size)
    run = build_run(load_config(None, overrides), dist)
    for step in (1, 2):
        run.step(step)
    dist.barrier()
    start = time.perf_counter()
    for step in range(3, 3 + steps):
        run.step(step)
    dist.barrier()
    elapsed = (time.perf_counter() - start) / steps
    run.close()
    dist.close()
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        overrides = [*UPDATE, f'run.output_dir="{root}"']
        configure_cpu()
        run = build_run(load_config(None, overrides), torch.device("cpu"))
        batch, _ = run.train_batch(run.rollouts.score(*run.rollouts.collect()))
        save_file(batch.to_tensors(), str(root / "batch.safetensors"))
        run.actor.update(batch, 1)
        single = run.actor.model.state_dict()
        run.close()
        launch(2, update_rank, overrides, str(root / "batch.safetensors"), str(root / "w.st"))
        sharded = load_file(str(root / "w.st"))
        diff = max(float((single[k] - v).abs().max()) for k, v in sharded.items())

        speed = [*SPEED, f'run.output_dir="{root}"']
        step_1 = timed_steps(speed, args.steps)
        step_2 = launch(2, timed_steps, speed, args.steps)
    result = {
        "max_param_diff": diff,
        "step_s_1": round(step_1, 4),
        "step_s_2": round(step_2, 4),
        "ratio": round(step_2 / step_1, 3),
        "steps": args.steps,
        "cpus": os.cpu_count(),
    }
    print(f"max parameter difference, 1 vs 2 ranks: {diff:.2e}")
    print(f"RL step: {step_1:.3f} s on 1 rank, {step_2:.3f} s on 2 ranks")
    print(json.dumps(result))


if __name__ == "__main__":
    main()

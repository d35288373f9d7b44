"""What Ray costs on one machine: code-reward throughput and synchronous vs asynchronous steps.

    .venv/bin/python benchmarks/ray_scale.py [--programs 192] [--steps 30]

1. Code rewards: the same batch of programs (a correct and a wrong solution of each of the
   bundled contest problems, several times over: `programs` in all, every test run in the
   sandbox) judged by the local pool (2 sandbox workers), by 1 Ray reward actor and by 2 (each
   with its own pool of 1 worker); programs judged per second, after a warm-up batch.
2. Steps: the embedded GRPO task (128 completions per step) with its engine in the trainer's
   process (synchronous), and with `[rollout] async = true` (generation of the next batch
   overlaps the update); mean seconds per step after 3 warm-up steps.

On a 2-core machine Ray cannot be faster than local: the figures show its overhead, which
should stay small (rewards within ~1.3x of local). On a cluster the same settings spread the
reward workers and rollout replicas over nodes. Last line: one JSON object.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import torch

from ascent.config.cluster import ClusterSection
from ascent.config.rewards import RewardSection, SandboxSection
from ascent.configfile import load_config
from ascent.data.bundled import bundled_path
from ascent.data.code_problems import load_code_problems
from ascent.rewards import build_reward
from ascent.runtime import configure_cpu
from ascent.train.llm_setup import build_run

SOLUTIONS = [
    "import sys\nprint(sys.stdin.read().strip())",  # echo: right for some, wrong for most
    "print(0)",
]


def batch(programs: int) -> tuple[list[str], list[str], dict[str, list]]:
    problems = load_code_problems(bundled_path("code_contests_sample"))
    rows = [(problems[i % len(problems)], SOLUTIONS[i % 2]) for i in range(programs)]
    columns_rows = [p.reward_columns() for p, _ in rows]
    columns = {k: [c.get(k) for c in columns_rows] for k in columns_rows[0]}
    return [p.statement for p, _ in rows], [f"```python\n{s}\n```" for _, s in rows], columns


def throughput(reward, prompts, completions, columns) -> float:
    reward(prompts[:8], completions[:8], **{k: v[:8] for k, v in columns.items()})  # warm-up
    start = time.perf_counter()
    reward(prompts, completions, **columns)
    return len(completions) / (time.perf_counter() - start)


def rewards(programs: int) -> dict[str, float]:
    from ascent.cluster.rewards import RayRewardPool

    prompts, completions, columns = batch(programs)
    section = RewardSection(functions=["code"])
    out = {}
    with build_reward(section, SandboxSection(workers=2)) as local:
        out["local"] = throughput(local, prompts, completions, columns)
    for actors in (1, 2):
        cluster = ClusterSection(backend="ray", reward_workers=actors, cpus_per_reward=1)
        workers = SandboxSection(workers=2 // actors)
        with RayRewardPool(cluster, section, workers) as pool:
            out[f"ray_{actors}"] = throughput(pool, prompts, completions, columns)
    return out


def step_time(root: Path, steps: int, *extra: str) -> float:
    overrides = [f'run.output_dir="{root}"', "data.eval_size=24", *extra]
    run = build_run(load_config(None, overrides), torch.device("cpu"))
    try:
        for step in range(1, 4):
            run.step(step)
        start = time.perf_counter()
        for step in range(4, 4 + steps):
            run.step(step)
        return (time.perf_counter() - start) / steps
    finally:
        run.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--programs", type=int, default=192)
    parser.add_argument("--steps", type=int, default=30)
    args = parser.parse_args()
    import ray

    configure_cpu()
    ray.init(num_cpus=2, include_dashboard=False)
    try:
        judged = rewards(args.programs)
    finally:
        ray.shutdown()
    with tempfile.TemporaryDirectory() as tmp:
        sync = step_time(Path(tmp), args.steps)
        overlapped = step_time(Path(tmp), args.steps, "rollout.async=true")
    result = {
        "programs_per_s": {k: round(v, 1) for k, v in judged.items()},
        "ray_overhead_1": round(judged["local"] / judged["ray_1"], 2),
        "ray_overhead_2": round(judged["local"] / judged["ray_2"], 2),
        "step_s_sync": round(sync, 4),
        "step_s_async": round(overlapped, 4),
        "async_ratio": round(overlapped / sync, 3),
    }
    for name, rate in judged.items():
        print(f"code rewards, {name}: {rate:.1f} programs/s")
    print(f"GRPO step: {sync:.3f} s synchronous, {overlapped:.3f} s asynchronous")
    print(json.dumps(result))


if __name__ == "__main__":
    main()

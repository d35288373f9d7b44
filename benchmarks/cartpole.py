"""ascent's fast CartPole recipe against stable-baselines3 PPO with the rl-zoo settings.

For each seed, back to back: stable-baselines3 PPO with the rl-baselines3-zoo CartPole-v1
hyperparameters (8 envs x 32 steps, batch 256, 20 epochs, gamma 0.98, lambda 0.8, no entropy
bonus, learning rate and clip range decaying linearly from 1e-3 and 0.2), and ascent's
`examples/ppo_cartpole_fast.toml`. Each run stops as soon as the mean return of its last 20
finished episodes reaches 475 (CartPole-v1's reward_threshold), or at --max-steps.

Both are timed from building the envs and the model to that moment (imports excluded), both
check the criterion after every vector step, both count env steps as num_envs per step
(ascent's count includes its autoreset steps, so it is never in ascent's favour), and both
run with one torch thread and denormals flushed. The order alternates between seeds so that
neither always runs on a warmer or quieter machine.

    .venv/bin/python benchmarks/cartpole.py [--seeds 0 1 2] [--max-steps 100000]

Needs `pip install 'ascent[bench]'` (stable-baselines3). The last line printed is one JSON
object: ratio (median ascent time / median SB3 time to 475; an unsolved seed counts as
infinitely slow, and the ratio is null when a median is), solved seeds, median env steps
and seconds, and the per-seed results.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections import deque
from pathlib import Path
from typing import Any

import torch

THRESHOLD = 475.0
WINDOW = 20
RECIPE = Path(__file__).resolve().parents[1] / "examples" / "ppo_cartpole_fast.toml"


def run_sb3(seed: int, max_steps: int) -> dict[str, Any]:
    """SB3 PPO, rl-baselines3-zoo hyperparams/ppo.yml CartPole-v1, until solved."""
    from stable_baselines3 import PPO
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.env_util import make_vec_env

    class StopWhenSolved(BaseCallback):
        def __init__(self, t0: float) -> None:
            super().__init__()
            self.t0, self.window = t0, deque(maxlen=WINDOW)
            self.steps: int | None = None
            self.seconds: float | None = None

        def _on_step(self) -> bool:
            for info in self.locals["infos"]:
                if "episode" in info:  # Monitor's record of a finished episode
                    self.window.append(info["episode"]["r"])
                    if len(self.window) == WINDOW and sum(self.window) / WINDOW >= THRESHOLD:
                        self.steps, self.seconds = self.num_timesteps, time.perf_counter() - self.t0
                        return False
            return True

    def linear(start: float):
        return lambda progress_remaining: progress_remaining * start

    t0 = time.perf_counter()
    env = make_vec_env("CartPole-v1", n_envs=8, seed=seed)
    model = PPO(
        "MlpPolicy",
        env,
        n_steps=32,
        batch_size=256,
        gae_lambda=0.8,
        gamma=0.98,
        n_epochs=20,
        ent_coef=0.0,
        learning_rate=linear(1e-3),
        clip_range=linear(0.2),
        seed=seed,
        device="cpu",
        verbose=0,
    )
    callback = StopWhenSolved(t0)
    model.learn(total_timesteps=max_steps, callback=callback)
    env.close()
    return {"steps": callback.steps, "seconds": callback.seconds}


def run_ascent(seed: int, max_steps: int, recipe: Path) -> dict[str, Any]:
    """`ascent train RECIPE` with stop_when_solved, in a throwaway run directory."""
    from ascent.configfile import load_config
    from ascent.train import run_training

    with tempfile.TemporaryDirectory() as out:
        overrides = [
            f"run.seed={seed}",
            f'run.output_dir="{out}"',
            "logging.progress=false",
            f"train.total_timesteps={max_steps}",
            "train.stop_when_solved=true",
            f"train.solved_return={THRESHOLD}",
        ]
        summary_path = run_training(load_config(recipe, overrides))
        summary = json.loads(summary_path.read_text())
    return {"steps": summary["solved_at_step"], "seconds": summary["solved_wall_s"]}


def _median(values: list[float | None]) -> float | None:
    finite = [float("inf") if v is None else v for v in values]
    middle = statistics.median(finite)
    return None if middle == float("inf") else middle


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--max-steps", type=int, default=100_000)
    parser.add_argument("--recipe", type=Path, default=RECIPE)
    args = parser.parse_args(argv)
    try:
        import stable_baselines3  # noqa: F401
    except ImportError:
        print("benchmarks/cartpole.py needs stable-baselines3: pip install 'ascent[bench]'")
        return 2
    torch.set_num_threads(1)
    torch.set_flush_denormal(True)
    runs: dict[str, list[dict[str, Any]]] = {"sb3": [], "ascent": []}
    for i, seed in enumerate(args.seeds):
        order = ["sb3", "ascent"] if i % 2 == 0 else ["ascent", "sb3"]
        for name in order:
            if name == "sb3":
                result = run_sb3(seed, args.max_steps)
            else:
                result = run_ascent(seed, args.max_steps, args.recipe)
            runs[name].append({"seed": seed, **result})
            shown = (
                f"solved at {result['steps']} steps in {result['seconds']:.2f} s"
                if result["steps"] is not None
                else f"not solved in {args.max_steps} steps"
            )
            print(f"seed {seed}  {name:6s} {shown}", flush=True)
    report = _report(runs)
    print(
        f"median time to {THRESHOLD:g}: ascent {report['ascent_median_s']} s, "
        f"sb3 {report['sb3_median_s']} s; ratio {report['ratio']} (<= 1.0: ascent is faster)"
    )
    print(json.dumps(report))
    return 0


def _report(runs: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, results in runs.items():
        out[f"{name}_solved_seeds"] = sum(r["steps"] is not None for r in results)
        out[f"{name}_median_steps"] = _median([r["steps"] for r in results])
        seconds = _median([r["seconds"] for r in results])
        out[f"{name}_median_s"] = None if seconds is None else round(seconds, 3)
    a, b = out["ascent_median_s"], out["sb3_median_s"]
    out["ratio"] = round(a / b, 3) if a is not None and b is not None else None
    out["runs"] = runs
    return {"ratio": out.pop("ratio"), **out}


if __name__ == "__main__":
    sys.exit(main())

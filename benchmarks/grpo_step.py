"""ascent's GRPO step against TRL's GRPOTrainer, and time-to-accuracy on the embedded task.

1. Step time. One tiny model (the seeded `ascent:tiny` initialisation, saved once and loaded
   by both), 8 prompts x 8 completions, at most 8 new tokens, one policy epoch, fp32, the
   same loss aggregation (TRL loss_type "grpo" = ascent's seq_mean_token_mean), beta 0 /
   kl_coef 0, lr 1e-5, no gradient checkpointing (TRL's default turns it on; ascent's
   leaves it off), and the same reward function (the fraction of digits in the
   completion: cheap, and never equal across a group, so neither side can skip work). Both
   run in this process, alternating blocks of steps; the first steps of each block are
   warm-up and not counted. The figure is the median seconds per step.
2. Peak memory: each side runs the same steps in a child process of its own (its peak RSS
   then belongs to it alone).
3. A busy core: ascent's step time with a CPU-bound process running beside it.
4. Time to accuracy (skip with --skip-tta): from the shipped warm start
   (`ascent:tiny-arithmetic`), training seconds (evaluations excluded, both evaluated every
   --eval-every steps by the same greedy evaluator on the same 400 held-out problems) until
   held-out accuracy first reaches warm-up + 25 points. ascent runs its embedded default
   recipe (`ascent train`); TRL runs the settings measured in SPEC.md (lr 1e-5, beta 0,
   8 generations, temperature 1.0, 64 completions per step) with the same reward.

    .venv/bin/python benchmarks/grpo_step.py [--steps 25] [--rounds 2] [--skip-tta]

Needs `pip install 'ascent[bench]'` (TRL). One torch thread, denormals flushed, for both.
The last line printed is one JSON object with the figures; `ratio` is ascent / TRL step time.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

WARMUP = 3  # steps of each block not counted
SHAPE = {"prompts": 8, "group": 8, "new_tokens": 8}
TTA_POINTS = 0.25


def digit_fraction(prompts: list[str], completions: list[str], **_: Any) -> list[float]:
    """The step benchmark's reward: fraction of characters that are digits."""
    return [sum(c.isdigit() for c in text) / max(1, len(text)) for text in completions]


def setup_process() -> None:
    import os

    from transformers.utils import logging as hf_logging

    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")  # no tokenizer thread pool
    torch.set_num_threads(1)
    torch.set_flush_denormal(True)
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()


# -- ascent -----------------------------------------------------------------------------------


def ascent_run(model: str, overrides: list[str]):
    """The `Controller` of the embedded default recipe with `model` and `overrides`."""
    from ascent.configfile import load_config
    from ascent.train.llm_setup import build_run

    cfg = load_config(None, [f'model.name_or_path="{model}"', "logging.progress=false", *overrides])
    return build_run(cfg, torch.device("cpu"))


STEP_OVERRIDES = [
    f"train.batch_size={SHAPE['prompts'] * SHAPE['group']}",
    f"train.micro_batch_size={SHAPE['prompts'] * SHAPE['group']}",
    f"rollout.group_size={SHAPE['group']}",
    f"rollout.max_new_tokens={SHAPE['new_tokens']}",
    'algorithm.loss_agg="seq_mean_token_mean"',
    "algorithm.kl_coef=0.0",
    "optim.lr=1e-5",
]


def ascent_steps(model: str, steps: int) -> list[float]:
    from ascent.rewards import CompositeReward

    run = ascent_run(model, STEP_OVERRIDES)
    run.rollouts.reward.close()  # replaced by the benchmark's reward
    run.rollouts.reward = CompositeReward({"digits": digit_fraction}, [1.0])
    times = []
    for step in range(1, steps + 1):
        start = time.perf_counter()
        run.step(step)
        times.append(time.perf_counter() - start)
    return times


# -- TRL --------------------------------------------------------------------------------------


def trl_trainer(
    model_dir: str, reward: Callable, overrides: dict[str, Any], callbacks: list
) -> Any:
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, PrinterCallback
    from trl import GRPOConfig, GRPOTrainer

    from ascent.config.data import DataSection
    from ascent.data import load_task

    train = load_task(DataSection(), seed=42).train
    data = Dataset.from_dict(
        {"prompt": [p.prompt for p in train], "answer": [p.answer for p in train]}
    )
    settings = dict(
        output_dir=tempfile.mkdtemp(prefix="trl-"),
        per_device_train_batch_size=SHAPE["prompts"] * SHAPE["group"],
        num_generations=SHAPE["group"],
        max_completion_length=SHAPE["new_tokens"],
        learning_rate=1e-5,
        beta=0.0,
        temperature=1.0,
        loss_type="grpo",
        num_iterations=1,
        gradient_accumulation_steps=1,
        gradient_checkpointing=False,  # TRL's default is True; ascent keeps its activations
        lr_scheduler_type="constant",
        warmup_steps=0,
        use_cpu=True,
        bf16=False,
        save_strategy="no",
        logging_steps=10**9,
        report_to="none",
        disable_tqdm=True,
        seed=0,
    )
    config = GRPOConfig(**{**settings, **overrides})
    trainer = GRPOTrainer(
        model=AutoModelForCausalLM.from_pretrained(model_dir),
        reward_funcs=reward,
        args=config,
        train_dataset=data,
        processing_class=AutoTokenizer.from_pretrained(model_dir),
        callbacks=callbacks,
    )
    trainer.remove_callback(PrinterCallback)  # no metrics dict printed at the end of train()
    return trainer


class StepClock:
    """A TRL callback: seconds per optimisation step, generation included."""

    def __init__(self) -> None:
        from transformers import TrainerCallback

        clock = self

        class Callback(TrainerCallback):
            def on_step_begin(self, args, state, control, **kw):
                clock.start = time.perf_counter()

            def on_step_end(self, args, state, control, **kw):
                clock.times.append(time.perf_counter() - clock.start)
                return clock.after_step(state, control)

        self.times: list[float] = []
        self.start = 0.0
        self.callback = Callback()

    def after_step(self, state: Any, control: Any) -> Any:
        return control


def trl_steps(model: str, steps: int) -> list[float]:
    clock = StepClock()
    trl_trainer(model, digit_fraction, {"max_steps": steps}, [clock.callback]).train()
    return clock.times


# -- measurements -----------------------------------------------------------------------------


def step_times(model_dir: str, steps: int, rounds: int) -> dict[str, float]:
    """Median step seconds of each side over `rounds` alternating blocks."""
    ascent, trl = [], []
    for r in range(rounds):
        blocks = [(trl, trl_steps), (ascent, ascent_steps)]
        for times, fn in blocks if r % 2 == 0 else blocks[::-1]:
            times += fn(model_dir, steps)[WARMUP:]
    return {"step_s_ascent": statistics.median(ascent), "step_s_trl": statistics.median(trl)}


def peak_rss_mb(side: str, model_dir: str, steps: int) -> float:
    out = subprocess.run(
        [sys.executable, __file__, "--child", side, "--model", model_dir, "--steps", str(steps)],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    return float(json.loads(out.stdout.strip().splitlines()[-1])["peak_rss_mb"])


def busy_core_slowdown(model_dir: str, steps: int, rounds: int) -> float:
    """Median ascent step with a CPU-bound process beside it / without, alternating blocks."""
    quiet, busy = [], []
    for _ in range(rounds):
        quiet += ascent_steps(model_dir, steps)[WARMUP:]
        spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
        try:
            busy += ascent_steps(model_dir, steps)[WARMUP:]
        finally:
            spinner.kill()
            spinner.wait()
    return statistics.median(busy) / statistics.median(quiet)


# -- time to accuracy -------------------------------------------------------------------------


def _accuracy(model: torch.nn.Module, tokenizer: Any, reward: Any, problems: list) -> float:
    from ascent.rollout import TransformersEngine
    from ascent.train.evaluate import evaluate

    engine = TransformersEngine(
        model, pad_id=tokenizer.pad_token_id, eos_ids=[tokenizer.eos_token_id]
    )
    return evaluate(engine, tokenizer, reward, problems, max_new_tokens=6).accuracy


def ascent_tta(budget_s: float, eval_every: int) -> dict[str, Any]:
    """The embedded default recipe from the warm start, until warm-up + 25 points."""
    from ascent.models import TINY_ARITHMETIC

    run = ascent_run(TINY_ARITHMETIC, [])
    problems = run.task.eval
    before = _accuracy(run.actor.model, run.tokenizer, run.rollouts.reward, problems)
    trained, step, curve = 0.0, 0, []
    while trained < budget_s:
        for _ in range(eval_every):
            step += 1
            start = time.perf_counter()
            run.step(step)
            trained += time.perf_counter() - start
        accuracy = _accuracy(run.actor.model, run.tokenizer, run.rollouts.reward, problems)
        curve.append((step, round(trained, 1), accuracy))
        if curve[-1][2] >= before + TTA_POINTS:
            break
    run.close()
    return _tta_result(before, curve)


def _tta_result(before: float, curve: list[tuple[int, float, float]]) -> dict[str, Any]:
    reached = [c for c in curve if c[2] >= before + TTA_POINTS]
    return {
        "before": before,
        "seconds": reached[0][1] if reached else None,
        "steps": reached[0][0] if reached else None,
        "best": max((c[2] for c in curve), default=before),
        "curve": curve,
    }


def trl_tta(budget_s: float, eval_every: int) -> dict[str, Any]:
    """TRL GRPO (SPEC.md's settings) from the same warm start, same reward and evaluator."""
    from ascent.configfile import load_config
    from ascent.data import load_task
    from ascent.models import TINY_ARITHMETIC, resolve_model_path
    from ascent.rewards import build_reward

    cfg = load_config(None)
    reward = build_reward(cfg.reward, cfg.sandbox)
    problems = load_task(cfg.data, cfg.run.seed).eval

    def scored(
        prompts: list[str], completions: list[str], answer: list[str], **_: Any
    ) -> list[float]:
        return reward(prompts, completions, answer=answer).total

    clock, curve = StepClock(), []
    warm = resolve_model_path(TINY_ARITHMETIC)
    trainer = trl_trainer(
        warm,
        scored,
        {"max_steps": 10**6, "max_completion_length": cfg.rollout.max_new_tokens},
        [clock.callback],
    )
    before = _accuracy(trainer.model, trainer.processing_class, reward, problems)

    def after_step(state: Any, control: Any) -> Any:
        if state.global_step % eval_every == 0:
            acc = _accuracy(trainer.model, trainer.processing_class, reward, problems)
            curve.append((state.global_step, round(sum(clock.times), 1), acc))
            if acc >= before + TTA_POINTS or sum(clock.times) >= budget_s:
                control.should_training_stop = True
        return control

    clock.after_step = after_step
    trainer.train()
    reward.close()
    return _tta_result(before, curve)


# -- main -------------------------------------------------------------------------------------


def child(side: str, model_dir: str, steps: int) -> None:
    (ascent_steps if side == "ascent" else trl_steps)(model_dir, steps)
    # VmHWM, not ru_maxrss: Linux carries ru_maxrss over exec from the parent process.
    status = Path("/proc/self/status").read_text().splitlines()
    kb = next(int(line.split()[1]) for line in status if line.startswith("VmHWM:"))
    print(json.dumps({"peak_rss_mb": kb / 1024}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=25, help="steps per timed block")
    parser.add_argument("--rounds", type=int, default=2, help="alternating blocks per side")
    parser.add_argument("--skip-tta", action="store_true", help="skip time-to-accuracy")
    parser.add_argument("--tta-budget", type=float, default=480.0, help="training seconds cap")
    parser.add_argument("--eval-every", type=int, default=50, help="steps between TTA evals")
    parser.add_argument("--child", choices=["ascent", "trl"], help=argparse.SUPPRESS)
    parser.add_argument("--model", help=argparse.SUPPRESS)
    args = parser.parse_args()
    setup_process()
    if args.child:
        return child(args.child, args.model, args.steps)

    from ascent.models import build_tiny_model

    model_dir = tempfile.mkdtemp(prefix="ascent-bench-")
    model, tokenizer = build_tiny_model()
    model.save_pretrained(model_dir)
    tokenizer.save_pretrained(model_dir)

    figures: dict[str, Any] = step_times(model_dir, args.steps, args.rounds)
    figures["ratio"] = figures["step_s_ascent"] / figures["step_s_trl"]
    print(f"step: ascent {figures['step_s_ascent']:.4f} s, TRL {figures['step_s_trl']:.4f} s, "
          f"ratio {figures['ratio']:.2f}")  # fmt: skip
    for side in ("ascent", "trl"):
        figures[f"peak_rss_mb_{side}"] = peak_rss_mb(side, model_dir, args.steps)
    print(f"peak RSS: ascent {figures['peak_rss_mb_ascent']:.0f} MB, "
          f"TRL {figures['peak_rss_mb_trl']:.0f} MB")  # fmt: skip
    figures["busy_core_slowdown"] = busy_core_slowdown(model_dir, args.steps, args.rounds)
    print(f"ascent step with a busy core beside it: x{figures['busy_core_slowdown']:.2f}")
    if not args.skip_tta:
        add_tta(figures, args.tta_budget, args.eval_every)
    figures["shape"] = SHAPE
    print(json.dumps(figures))


def add_tta(figures: dict[str, Any], budget: float, eval_every: int) -> None:
    ours, theirs = ascent_tta(budget, eval_every), trl_tta(budget, eval_every)
    figures["tta_warm_accuracy"] = ours["before"]
    figures["tta_s_ascent"], figures["tta_s_trl"] = ours["seconds"], theirs["seconds"]
    figures["tta_steps_ascent"], figures["tta_steps_trl"] = ours["steps"], theirs["steps"]
    figures["tta_best_ascent"], figures["tta_best_trl"] = ours["best"], theirs["best"]
    both = ours["seconds"] is not None and theirs["seconds"] is not None
    figures["tta_ratio"] = ours["seconds"] / theirs["seconds"] if both else None
    for name, r in (("ascent", ours), ("TRL", theirs)):
        reached = f"{r['seconds']} s ({r['steps']} steps)" if r["seconds"] else "not reached"
        print(f"time to warm-up + 25 points ({r['before']:.1%} -> {r['before'] + TTA_POINTS:.1%}), "
              f"{name}: {reached}; curve {r['curve']}")  # fmt: skip


if __name__ == "__main__":
    main()

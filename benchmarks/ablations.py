"""The two ablations of the recipe set, on the tiny model and built-in 2-digit addition (CPU).

1. History Resampling vs DAPO dynamic sampling vs neither (SRPO's comparison). The
   embedded GRPO recipe (`ascent train` with no file) on a finite set of 128 training
   problems, 16 per step, so 50 epochs in 400 steps: the policy comes to solve many of them
   every time, and those groups carry no gradient. Resampling drops solved prompts at each
   epoch's end; dynamic sampling generates extra rounds until every group in the step has
   mixed rewards, so it spends more rollouts per step. The arms are compared at the same
   rollout budget (400 steps x 128 completions): dynamic sampling's accuracy is read at its
   last evaluation (every 20 steps) within that budget, and after all 400 steps besides.
   Reported per arm: the fraction of zero-variance groups late in training (mean of
   frac_reward_zero_std over the last 20% of steps; after dynamic sampling's filter, the
   fraction among the groups it generated), the training reward there, the completions
   generated, and held-out accuracy before / at the budget / after.
2. Length-adaptive GAE vs a fixed lambda (VAPO). examples/vapo.toml with its policy lambda
   varied: length-adaptive with alpha = 1.0 (the recipe), length-adaptive with the paper's
   alpha = 0.05, and fixed lambda = 0.95; critic targets use lambda 1.0 in every arm.
   Reported: value loss and explained variance of the critic (means over the last 20% of
   steps), held-out accuracy.

Each arm runs with several seeds; the tables show the mean and every seed's value. Figures
(SVG, the plotting helper of benchmarks/agentic_credit.py) go to benchmarks/figures/
ablation_*.svg: per-step curves averaged over the seeds, then a 25-step moving average, and
held-out accuracy at every evaluation.

    .venv/bin/python benchmarks/ablations.py                 # both, 2 seeds: 20 min on 2 cores
    .venv/bin/python benchmarks/ablations.py --only history --seeds 42
    .venv/bin/python benchmarks/ablations.py --quick --figures /tmp/figs   # smoke test

The last line printed is one JSON object with every number of the tables.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import tomli_w  # noqa: E402

from ascent.configfile import load_config  # noqa: E402
from ascent.train import run_training  # noqa: E402
from benchmarks.agentic_credit import smoothed, svg_chart  # noqa: E402

FIGURES = ROOT / "benchmarks" / "figures"

HISTORY_ARMS = {
    "history_resampling": ["sampling.history_resampling=true"],
    "dynamic_sampling": ["sampling.dynamic=true", "train.eval_steps=20"],
    "none": [],
}
HISTORY_BASE = ["data.train_size=128", "train.total_steps=400", "train.eval_steps=100"]
GAE_ARMS = {
    "length_adaptive alpha=1.0": [],
    "length_adaptive alpha=0.05 (paper)": ["algorithm.length_alpha=0.05"],
    # gae reads no length_alpha, so the recipe's key is dropped (a setting the estimator
    # does not read is refused at load time)
    "fixed lambda=0.95": [
        'algorithm.advantage="gae"',
        "algorithm.lam=0.95",
        "-algorithm.length_alpha",
    ],
}
GAE_BASE = ["train.total_steps=250", "train.eval_steps=50"]
# Legend labels short enough for svg_chart's legend, and each label's colour
LABELS = {
    "history_resampling": "resampling",
    "dynamic_sampling": "dynamic",
    "none": "none",
    "length_adaptive alpha=1.0": "alpha=1.0",
    "length_adaptive alpha=0.05 (paper)": "alpha=0.05",
    "fixed lambda=0.95": "lam=0.95",
}
COLOURS = {
    "resampling": "#2ca02c",
    "dynamic": "#1f77b4",
    "none": "#d62728",
    "alpha=1.0": "#2ca02c",
    "alpha=0.05": "#ff7f0e",
    "lam=0.95": "#1f77b4",
}
ACCURACY = [("before", "held-out before"), ("after", "held-out after")]
HISTORY_COLUMNS = [
    ("zero_std_late", "zero-variance groups, last 20%"),
    ("reward_late", "train reward, last 20%"),
    ("rollouts", "completions generated"),
    ("before", "held-out before"),
    ("at_budget", "held-out at the budget (51,200 completions)"),
    ("after", "held-out after 400 steps"),
]
GAE_COLUMNS = [
    ("value_loss_late", "value loss, last 20%"),
    ("explained_variance_late", "explained variance, last 20%"),
    *ACCURACY,
]


def late_mean(rows: list[dict[str, Any]], key: str) -> float | None:
    """Mean of `key` over the last 20% of logged steps."""
    late = rows[-max(1, len(rows) // 5) :]
    values = [r[key] for r in late if r.get(key) is not None]
    return sum(values) / len(values) if values else None


def generated(rows: list[dict[str, Any]], batch_size: int) -> list[int]:
    """Completions generated up to each logged step (dynamic sampling's extra rounds too)."""
    total, out = 0, []
    for r in rows:
        total += batch_size * (1 + int(r.get("dynamic/rounds", 0)))
        out.append(total)
    return out


def at_budget(rows: list[dict[str, Any]], batch_size: int, steps: int) -> float | None:
    """Held-out accuracy at the last evaluation within `steps` x `batch_size` completions
    (what an arm that generates one batch per step spends in `steps` steps)."""
    budget = steps * batch_size
    within = [
        r["eval/accuracy"]
        for r, spent in zip(rows, generated(rows, batch_size), strict=True)
        if spent <= budget and r.get("eval/accuracy") is not None
    ]
    return within[-1] if within else None


def without(config: Path, dropped: list[str], out: Path) -> Path:
    """A copy of the TOML file `config` without the `section.key`s in `dropped`."""
    raw = tomllib.loads(config.read_text())
    for dotted in dropped:
        section, key = dotted.split(".")
        raw[section].pop(key)
    path = out / f"{config.stem}-without-{'-'.join(dropped)}.toml"
    path.write_text(tomli_w.dumps(raw))
    return path


def run(config: Path | None, overrides: list[str], out: Path, name: str) -> dict[str, Any]:
    """One training run; `overrides` are --set values, or `-section.key` to drop a key.

    Returns the table's numbers and, under "rows", every logged step (for the figures)."""
    dropped = [o[1:] for o in overrides if o.startswith("-")]
    sets = [o for o in overrides if not o.startswith("-")]
    if dropped:
        config = without(config, dropped, out)
    common = [f'run.output_dir="{out}"', f"run.name={name}", "logging.progress=false"]
    common += ["logging.sample_every=0", "train.save_steps=0"]
    cfg = load_config(config, [*sets, *common])
    started = time.perf_counter()
    summary_path = run_training(cfg, overwrite=True)
    summary = json.loads(summary_path.read_text())
    rows = [json.loads(line) for line in (summary_path.parent / "metrics.jsonl").open()]
    return {
        "before": summary["eval_accuracy_before"],
        "after": summary["eval_accuracy_after"],
        "rollouts": generated(rows, cfg.train.batch_size)[-1],
        "at_budget": at_budget(rows, cfg.train.batch_size, cfg.train.total_steps),
        "wall_s": round(time.perf_counter() - started, 1),
        "zero_std_late": late_mean(rows, "frac_reward_zero_std"),
        "reward_late": late_mean(rows, "reward"),
        "value_loss_late": late_mean(rows, "value_loss"),
        "explained_variance_late": late_mean(rows, "explained_variance"),
        "rows": rows,
    }


def summarise(per_seed: dict[int, dict[str, Any]]) -> dict[str, Any]:
    """Each number's mean over the seeds; "seeds" keeps every seed's numbers, "rows" its steps."""
    rows = {seed: r.pop("rows") for seed, r in per_seed.items()}
    out: dict[str, Any] = {"seeds": per_seed, "rows": rows}
    for key in next(iter(per_seed.values())):
        values = [r[key] for r in per_seed.values() if r[key] is not None]
        out[key] = round(statistics.mean(values), 4) if values else None
    return out


def table(title: str, arms: dict[str, dict[str, Any]], columns: list[tuple[str, str]]) -> str:
    def cell(arm: dict[str, Any], key: str) -> str:
        pct = key in ("before", "after", "at_budget", "zero_std_late")
        fmt = (lambda v: f"{100 * v:.1f}%") if pct else (lambda v: f"{v:.3f}")
        if key == "rollouts":
            fmt = lambda v: f"{v:,.0f}"  # noqa: E731
        seeds = [fmt(r[key]) for r in arm["seeds"].values() if r[key] is not None]
        return f"{fmt(arm[key])} ({', '.join(seeds)})" if arm[key] is not None else "-"

    lines = [f"### {title}", "", "| arm | " + " | ".join(c for _, c in columns) + " |"]
    lines.append("|---" * (len(columns) + 1) + "|")
    for name, arm in arms.items():
        lines.append(f"| {name} | " + " | ".join(cell(arm, k) for k, _ in columns) + " |")
    return "\n".join(lines)


def ablation(
    config: Path | None, base: list[str], arms: dict[str, list[str]], seeds: list[int], out: Path
) -> dict[str, dict[str, Any]]:
    results = {}
    for arm, overrides in arms.items():
        per_seed = {}
        for seed in seeds:
            name = f"{arm.split()[0]}-{len(results)}-s{seed}"
            per_seed[seed] = run(config, [*base, *overrides, f"run.seed={seed}"], out, name)
            numbers = {k: v for k, v in per_seed[seed].items() if k != "rows"}
            print(f"{arm} seed {seed}: {numbers}", flush=True)
        results[arm] = summarise(per_seed)
    return results


def seed_mean(rows: dict[int, list[dict[str, Any]]], key: str) -> list[dict[str, Any]]:
    """Per logged step, the mean of `key` over the seeds that logged it."""
    by_step: dict[int, list[float]] = {}
    for seed_rows in rows.values():
        for r in seed_rows:
            if r.get(key) is not None:
                by_step.setdefault(r["step"], []).append(r[key])
    return [{"step": s, key: statistics.mean(v)} for s, v in sorted(by_step.items())]


def figures(name: str, arms: dict[str, dict[str, Any]], curves: dict[str, str], out: Path) -> list:
    """One SVG per training metric in `curves` and one of held-out accuracy; their paths."""
    paths = []
    for key, title in curves.items():
        series = {LABELS[arm]: smoothed(seed_mean(a["rows"], key), key) for arm, a in arms.items()}
        paths.append(out / f"ablation_{name}_{key.replace('/', '_')}.svg")
        svg_chart(f"{title}, moving average", series, paths[-1], COLOURS)
    accuracy = {
        LABELS[arm]: [(0, a["before"])]
        + [(s["step"], s["eval/accuracy"]) for s in seed_mean(a["rows"], "eval/accuracy")]
        for arm, a in arms.items()
    }
    paths.append(out / f"ablation_{name}_accuracy.svg")
    svg_chart("held-out accuracy", accuracy, paths[-1], COLOURS)
    return [str(p.relative_to(ROOT) if p.is_relative_to(ROOT) else p) for p in paths]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", choices=["history", "gae"], help="run one ablation")
    parser.add_argument("--seeds", type=int, nargs="+", default=[42, 43])
    parser.add_argument("--out", type=Path, help="run directories (default: a temp dir)")
    parser.add_argument("--quick", action="store_true", help="a few steps per arm (smoke test)")
    parser.add_argument("--figures", type=Path, default=FIGURES, help="where the SVGs go")
    args = parser.parse_args()
    out = args.out or Path(tempfile.mkdtemp(prefix="ascent-ablations-"))
    quick = ["train.total_steps=4", "train.eval_steps=2", "data.eval_size=20"] if args.quick else []
    quick_gae = [*quick, "critic.value_warmup_steps=1"] if args.quick else []
    args.figures.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    report: dict[str, Any] = {"seeds": args.seeds}
    if args.only in (None, "history"):
        arms = ablation(None, [*HISTORY_BASE, *quick], HISTORY_ARMS, args.seeds, out)
        curves = {"frac_reward_zero_std": "zero-variance groups", "reward": "train reward"}
        report["history_figures"] = figures("history", arms, curves, args.figures)
        report["history_resampling"] = drop_rows(arms)
        title = "History Resampling vs dynamic sampling vs none (GRPO, 128 problems, 400 steps)"
        print(table(title, arms, HISTORY_COLUMNS))
    if args.only in (None, "gae"):
        vapo = ROOT / "examples" / "vapo.toml"
        arms = ablation(vapo, [*GAE_BASE, *quick_gae], GAE_ARMS, args.seeds, out)
        curves = {"value_loss": "value loss", "explained_variance": "explained variance"}
        report["gae_figures"] = figures("gae", arms, curves, args.figures)
        report["length_adaptive_gae"] = drop_rows(arms)
        title = "Length-adaptive GAE vs fixed lambda (examples/vapo.toml, 250 steps)"
        print(table(title, arms, GAE_COLUMNS))
    report["wall_s"] = round(time.perf_counter() - started, 1)
    print(json.dumps(report))


def drop_rows(arms: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The arms without their per-step rows (the JSON line keeps the numbers only)."""
    return {arm: {k: v for k, v in a.items() if k != "rows"} for arm, a in arms.items()}


if __name__ == "__main__":
    main()

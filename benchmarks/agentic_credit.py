"""Ablation of agentic credit: immediate-only, delayed-only and mixed (0.3 / 0.7) advantages.

Runs examples/agentic_tiny.toml three times, identical except for
[agentic] immediate_reward_weight / delayed_reward_weight:

    immediate   1.0 / 0.0   each turn credited by its own reward only (compiles 0.1, -0.5 when
                            a confirmed generated test breaks it, which the scripted column
                            tests do to every wrong answer); the outcome is never seen
    delayed     0.0 / 1.0   every turn credited by the episode's hidden-test reward only
    mixed       0.3 / 0.7   the write-up's mix

and compares the delayed reward (does the submitted program pass the hidden tests), the
immediate reward, and held-out first-attempt accuracy. Figures (SVG, no plotting library
needed) go to benchmarks/figures/agentic_credit_*.svg; the runs to --out.

    .venv/bin/python benchmarks/agentic_credit.py                 # 3 x 400 steps, ~35 min
    .venv/bin/python benchmarks/agentic_credit.py --steps 12 --figures /tmp/figs  # smoke

The last line printed is one JSON object with the figures.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from statistics import mean
from typing import Any

import torch
from transformers.utils import logging as hf_logging

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from ascent.configfile import load_config  # noqa: E402
from ascent.rundir import RunDir  # noqa: E402
from ascent.train.llm import train_llm  # noqa: E402

RECIPE = ROOT / "examples" / "agentic_tiny.toml"
FIGURES = ROOT / "benchmarks" / "figures"
VARIANTS = {"immediate": (1.0, 0.0), "delayed": (0.0, 1.0), "mixed": (0.3, 0.7)}
COLOURS = {"immediate": "#d62728", "delayed": "#1f77b4", "mixed": "#2ca02c"}
SMOOTH = 25  # steps in the moving average of the curves


def run_variant(name: str, steps: int, seed: int, out: Path) -> dict[str, Any]:
    imm, delay = VARIANTS[name]
    eval_every = max(1, steps // 3)
    cfg = load_config(
        RECIPE,
        [
            f'run.output_dir="{out}"',
            f'run.name="{name}"',
            f"run.seed={seed}",
            f"agentic.immediate_reward_weight={imm}",
            f"agentic.delayed_reward_weight={delay}",
            f"train.total_steps={steps}",
            f"train.eval_steps={eval_every}",
            f"train.save_steps={eval_every * 3}",
            "logging.progress=false",
        ],
    )
    started = time.perf_counter()
    summary = train_llm(cfg, RunDir.create(cfg))
    wall = time.perf_counter() - started
    rows = [json.loads(line) for line in (out / name / "metrics.jsonl").open()]
    return {"summary": summary, "rows": rows, "wall_s": wall}


def smoothed(rows: list[dict[str, Any]], key: str) -> list[tuple[int, float]]:
    points = [(r["step"], r[key]) for r in rows if r.get(key) is not None]
    out = []
    for i in range(len(points)):
        window = [v for _, v in points[max(0, i - SMOOTH + 1) : i + 1]]
        out.append((points[i][0], mean(window)))
    return out


def svg_chart(
    title: str,
    series: dict[str, list[tuple[int, float]]],
    path: Path,
    colours: dict[str, str] | None = None,
) -> None:
    """A line chart as a standalone SVG file; `colours` by series name (default: COLOURS)."""
    colours = COLOURS if colours is None else colours
    w, h, pad = 640, 360, 50
    xs = [x for pts in series.values() for x, _ in pts]
    ys = [y for pts in series.values() for _, y in pts]
    x0, x1 = min(xs), max(xs) or 1
    y0, y1 = min(ys), max(ys)
    y0, y1 = (y0 - 0.05, y1 + 0.05) if y1 - y0 < 1e-9 else (y0, y1)

    def px(x: float, y: float) -> str:
        sx = pad + (x - x0) / max(x1 - x0, 1) * (w - 2 * pad)
        sy = h - pad - (y - y0) / (y1 - y0) * (h - 2 * pad)
        return f"{sx:.1f},{sy:.1f}"

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" '
        'font-family="sans-serif" font-size="12">',
        f'<rect width="{w}" height="{h}" fill="white"/>',
        f'<text x="{w / 2}" y="20" text-anchor="middle" font-size="14">{title}</text>',
        f'<line x1="{pad}" y1="{h - pad}" x2="{w - pad}" y2="{h - pad}" stroke="black"/>',
        f'<line x1="{pad}" y1="{pad}" x2="{pad}" y2="{h - pad}" stroke="black"/>',
        f'<text x="{pad}" y="{h - pad + 18}">{x0}</text>',
        f'<text x="{w - pad}" y="{h - pad + 18}" text-anchor="end">{x1} steps</text>',
        f'<text x="{pad - 5}" y="{h - pad}" text-anchor="end">{y0:.2f}</text>',
        f'<text x="{pad - 5}" y="{pad + 4}" text-anchor="end">{y1:.2f}</text>',
    ]
    for i, (name, pts) in enumerate(series.items()):
        line = " ".join(px(x, y) for x, y in pts)
        colour = colours.get(name, "black")
        dots = [px(x, y).split(",") for x, y in pts] if len(pts) < 10 else []
        marker = "".join(f'<circle cx="{cx}" cy="{cy}" r="3" fill="{colour}"/>' for cx, cy in dots)
        parts.append(f'<polyline points="{line}" fill="none" stroke="{colour}" stroke-width="2"/>')
        parts.append(marker)
        ly = pad + 16 * i
        parts.append(f'<text x="{w - pad - 90}" y="{ly}" fill="{colour}">{name}</text>')
    parts.append("</svg>")
    path.write_text("\n".join(parts) + "\n", encoding="utf-8")


def window_mean(rows: list[dict[str, Any]], key: str, first: bool, n: int) -> float:
    values = [r[key] for r in rows if r.get(key) is not None]
    part = values[:n] if first else values[-n:]
    return round(mean(part), 4) if part else float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=400, help="training steps per variant")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--out", type=Path, default=Path("runs/agentic_credit"))
    parser.add_argument("--figures", type=Path, default=FIGURES, help="where the SVGs go")
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.set_flush_denormal(True)
    hf_logging.disable_progress_bar()
    results = {name: run_variant(name, args.steps, args.seed, args.out) for name in VARIANTS}
    args.figures.mkdir(parents=True, exist_ok=True)
    for key, title in (
        ("reward/delayed", "delayed reward (hidden tests), moving average"),
        ("reward/immediate", "immediate reward per policy turn, moving average"),
        ("eval/accuracy", "held-out first-attempt accuracy"),
    ):
        series = {
            name: smoothed(r["rows"], key) if key != "eval/accuracy" else eval_curve(r)
            for name, r in results.items()
        }
        svg_chart(title, series, args.figures / f"agentic_credit_{key.split('/')[-1]}.svg")
    n = max(1, min(50, args.steps // 5))
    figures = {"steps": args.steps, "seed": args.seed}
    for name, r in results.items():
        s = r["summary"]
        figures[name] = {
            "eval_accuracy_before": s["eval_accuracy_before"],
            "eval_accuracy_after": s["eval_accuracy_after"],
            "delayed_first": window_mean(r["rows"], "reward/delayed", True, n),
            "delayed_last": window_mean(r["rows"], "reward/delayed", False, n),
            "immediate_first": window_mean(r["rows"], "reward/immediate", True, n),
            "immediate_last": window_mean(r["rows"], "reward/immediate", False, n),
            "wall_s": round(r["wall_s"], 1),
        }
        f = figures[name]
        print(
            f"{name:>9}: held-out {s['eval_accuracy_before']:.3f} -> "
            f"{s['eval_accuracy_after']:.3f}; delayed {f['delayed_first']:.3f} -> "
            f"{f['delayed_last']:.3f}; immediate {f['immediate_first']:.3f} -> "
            f"{f['immediate_last']:.3f}"
        )
    print(json.dumps(figures))


def eval_curve(result: dict[str, Any]) -> list[tuple[int, float]]:
    before = result["summary"]["eval_accuracy_before"]
    points = [(r["step"], r["eval/accuracy"]) for r in result["rows"] if "eval/accuracy" in r]
    return [(0, before), *points]


if __name__ == "__main__":
    main()

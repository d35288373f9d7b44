"""`ascent report RUN_DIR --html`: the plots a run of each kind gets, the eval and diagnosis
marks, --compare, the refusals, and the page rendered in a real headless browser."""

from __future__ import annotations

import base64
import json
import math
import random
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ascent.observe import plots
from ascent.observe.html_report import load_run, run_names, write_html_report

CHROMIUM = Path("/usr/bin/chromium")
LLM_PANELS = {"reward", "eval-accuracy", "kl", "length", "adv-std", "zero-std", "entropy"}


# Runs written as the trainers write them: one {"step", "time", ...} line per step
# (MetricsLogger), non-finite values as null, summary.json at the end.


def write_run(path: Path, rows, summary=None, events=None) -> Path:
    path.mkdir(parents=True)
    lines = [{"step": i + 1, "time": round(0.4 * (i + 1), 3), **row} for i, row in enumerate(rows)]
    (path / "metrics.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    if summary is not None:
        (path / "summary.json").write_text(json.dumps(summary, indent=2))
    if events is not None:
        (path / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    return path


def llm_rows(n=60, eval_every=20, seed=0, kl=lambda i: 0.002 * i, reflection=True):
    """GRPO on the tiny task: keys of llm_rollout.reward_metrics and controller.py."""
    rng = random.Random(seed)
    rows = []
    for i in range(1, n + 1):
        reward = -0.6 + 0.5 * i / n + rng.uniform(-0.15, 0.15)
        row = {
            "completions/mean_length": 3.5 + rng.uniform(-0.2, 0.2),
            "completions/min_length": 3.0,
            "completions/max_length": 5.0,
            "completions/clipped_ratio": 0.0,
            "frac_unscored": 0.0,
            "reward": reward,
            "reward_std": 0.65,
            "frac_reward_zero_std": rng.choice([0.125, 0.1875, 0.25, 0.3125]),
            "reward/math": reward,
            "policy_version": float(i - 1),
            "adv_std": 0.8 + rng.uniform(-0.05, 0.05),
            "kl": kl(i),
            "clip_ratio": 0.0,
            "entropy": 0.55 - 0.002 * i,
            "grad_norm": 2.0,
            "loss": 1e-8,
            "lr": 4e-5,
            "tokens_per_s": 3000.0,
        }
        if reflection:
            row["reflection/rate"] = 0.01 * (i % 5)
        if i % eval_every == 0 or i == n:
            row |= {"eval/reward": -0.4 + 0.3 * i / n, "eval/accuracy": 0.2 + 0.15 * i / n}
        rows.append(row)
    return rows


def llm_summary(steps=60, before=0.215, after=0.35):
    return {
        "eval_accuracy_before": before,
        "eval_accuracy_after": after,
        "eval_problems": 400,
        "steps": steps,
        "total_steps": steps,
        "wall_s": 11.8,
        "interrupted": False,
        "final_metrics": {"reward": -0.1},
        "paths": {"run_dir": "runs/tiny-grpo"},
    }


def classic_rows(n=40):
    """Classic PPO on CartPole: keys of classic.py's docstring (return null when no episode
    finished during the update)."""
    rows = []
    for i in range(1, n + 1):
        ret = None if i % 7 == 0 else 20.0 + 4.5 * i
        rows.append(
            {
                "env_steps": 512 * i,
                "episode/count": 0 if ret is None else 6,
                "episode/return_mean": ret,
                "episode/return_max": None if ret is None else ret + 10,
                "episode/length_mean": ret,
                "episode/return_last20": 18.0 + 4.0 * i,
                "loss/policy": -0.01,
                "loss/value": 20.0 / i,
                "policy/entropy": 0.69 - 0.005 * i,
                "policy/approx_kl": 0.004,
                "policy/clip_frac": 0.08,
                "value/explained_variance": 0.5,
                "optim/grad_norm": 0.4,
                "perf/sps": 4000.0,
            }
        )
    return rows


def agentic_rows(n=30):
    """Agentic GRPO (agentic_metrics.py): delayed = outcome, immediate = per-turn shaping."""
    return [
        {
            "reward": 0.2 + 0.01 * i,
            "reward/delayed": 0.2 + 0.01 * i,
            "reward/immediate": 0.1 + 0.02 * i,
            "reward_std": 0.3,
            "frac_reward_zero_std": 0.4,
            "agentic/solved": 0.2 + 0.01 * i,
            "agentic/turns": 2.5,
            "adv_std": 0.7,
            "entropy": 0.9,
            "clip_ratio": 0.01,
            "is_weight_mean": 1.0,
            "loss": 0.01,
        }
        for i in range(1, n + 1)
    ]


def figure_ids(page: str) -> set[str]:
    return set(re.findall(r'<figure id="plot-([\w-]+)"', page))


def render(tmp_path, rows, **kw) -> str:
    run = write_run(tmp_path / "run", rows, **kw)
    return write_html_report([run]).read_text()


def test_an_llm_run_gets_its_curves_and_no_classic_or_agentic_ones(tmp_path):
    ids = figure_ids(render(tmp_path, llm_rows(), summary=llm_summary()))
    assert ids >= LLM_PANELS | {"clip-ratio", "reflection"}
    assert not ids & {"episode-return", "agentic-reward"}


def test_reflection_rate_is_plotted_only_when_the_run_logged_it(tmp_path):
    assert "reflection" not in figure_ids(render(tmp_path, llm_rows(reflection=False)))


def test_a_classic_run_gets_episode_return_entropy_and_clip_fraction(tmp_path):
    ids = figure_ids(render(tmp_path, classic_rows()))
    assert ids == {"episode-return", "entropy", "clip-ratio"}
    run = load_run(tmp_path / "run", "cartpole")
    (panel,) = [p for p in plots.PANELS if p.name == "episode-return"]
    fig = plots.draw(panel, [run.curves])
    legend = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert legend == ["episode/return_mean", "episode/return_last20"]
    # the null returns (no episode finished in that update) are left out, not drawn as 0
    raw = fig.axes[0].lines[0]
    assert len(raw.get_xdata()) == 40 - 5 and 7 not in raw.get_xdata()


def test_an_agentic_run_plots_immediate_against_delayed_reward(tmp_path):
    ids = figure_ids(render(tmp_path, agentic_rows()))
    assert {"agentic-reward", "reward", "zero-std", "adv-std", "entropy"} <= ids
    run = load_run(tmp_path / "run", "agent")
    (panel,) = [p for p in plots.PANELS if p.name == "agentic-reward"]
    legend = plots.draw(panel, [run.curves]).axes[0].get_legend().get_texts()
    assert [t.get_text() for t in legend] == ["reward/immediate", "reward/delayed"]


def test_eval_accuracy_carries_the_before_and_after_marks_of_summary_json(tmp_path):
    page = render(tmp_path, llm_rows(), summary=llm_summary(before=0.215, after=0.598))
    run = load_run(tmp_path / "run", "tiny")
    (panel,) = [p for p in plots.PANELS if p.name == "eval-accuracy"]
    ax = plots.draw(panel, [run.curves]).axes[0]
    assert [(t.get_text(), t.xy) for t in ax.texts] == [
        ("before RL 21.5%", (0, 0.215)),
        ("after RL 59.8%", (60, 0.598)),
    ]
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert legend == ["eval/accuracy", "before RL", "after RL"]
    assert "before RL 21.5%; after RL 59.8%" in page  # the caption says it too


def test_eval_marks_alone_still_get_the_accuracy_panel(tmp_path):
    rows = [{k: v for k, v in r.items() if not k.startswith("eval/")} for r in llm_rows()]
    assert "eval-accuracy" in figure_ids(render(tmp_path, rows, summary=llm_summary()))


def test_live_events_and_later_findings_are_marked_on_their_curves(tmp_path):
    rows = llm_rows(kl=lambda i: 1.5 if 26 <= i <= 40 else 0.01)
    for row in rows[-12:]:
        row["frac_reward_zero_std"] = 0.95  # saturation, found by diagnose() afterwards
    events = [
        {"step": 30, "pattern": "kl_high", "event": "fired", "message": "KL above 1.0",
         "fix": "raise algorithm.kl_coef"},
        {"step": 41, "pattern": "kl_high", "event": "cleared"},
        {"step": 50, "pattern": "nan_loss", "event": "fired", "message": "the loss is NaN"},
        {"step": "soon", "pattern": "kl_zero", "event": "fired"},
        "not an event",
    ]  # fmt: skip
    run = write_run(tmp_path / "run", rows, summary=llm_summary(), events=events)
    page = write_html_report([run]).read_text()
    curves = [load_run(run, "tiny").curves]
    placed = plots.place_markers(plots.panels_with_data(curves), curves)
    on = {name: [(m.step, m.pattern, m.live) for _, m in ms] for name, ms in placed.items() if ms}
    # kl_high fired live at 30 (diagnose() finds it too: marked once, where it fired);
    # saturation only afterwards; nan_loss has no curve of its own: on the first panel
    assert on == {
        "kl": [(30, "kl_high", True)],
        "zero-std": [(60, "saturation", False)],
        "reward": [(50, "nan_loss", True)],
    }
    kl_panel = next(p for p in plots.PANELS if p.name == "kl")
    ax = plots.draw(kl_panel, curves, placed["kl"]).axes[0]
    assert [t.get_text() for t in ax.texts] == [" kl_high"]
    assert any(list(line.get_xdata()) == [30, 30] for line in ax.lines)  # the vertical line
    assert "kl_high at step 30 (live)" in page and "saturation at step 60 (after the run)" in page
    assert "KL above 1.0" in page and "raise algorithm.kl_coef" in page and "live (cleared)" in page


def test_compare_overlays_runs_with_a_legend_by_run_name(tmp_path, run_cli):
    a = write_run(tmp_path / "grpo", llm_rows(seed=1), summary=llm_summary(after=0.44))
    b = write_run(tmp_path / "dapo", llm_rows(seed=2), summary=llm_summary(after=0.50))
    code, out, err = run_cli("report", "--compare", str(a), str(b), "--html")
    assert code == 0, err
    assert out.splitlines()[-1] == str(a / "compare.html")
    page = (a / "compare.html").read_text()
    assert "grpo vs dapo" in page
    assert "grpo: after RL 44.0%" in page and "dapo: after RL 50.0%" in page
    curves = [load_run(a, "grpo").curves, load_run(b, "dapo").curves]
    for panel in plots.panels_with_data(curves):
        ax = plots.draw(panel, curves).axes[0]
        legend = [t.get_text() for t in ax.get_legend().get_texts()]
        if panel.name != "eval-accuracy":
            assert legend == ["grpo", "dapo"], panel.name
            continue
        assert legend == ["grpo", "dapo", "before RL", "after RL"]
        # the shared starting point is written once, each run's end in its colour
        assert [t.get_text() for t in ax.texts] == [
            "before RL 21.5%",
            "after RL 44.0%",
            "after RL 50.0%",
        ]


def test_runs_with_the_same_directory_name_are_told_apart(tmp_path):
    assert run_names([tmp_path / "seed1/tiny-grpo", tmp_path / "seed2/tiny-grpo"]) == [
        "seed1/tiny-grpo",
        "seed2/tiny-grpo",
    ]


def test_the_page_is_self_contained_and_written_where_asked(tmp_path, run_cli):
    run = write_run(tmp_path / "run", llm_rows(), summary=llm_summary())
    code, out, _ = run_cli("report", str(run), "--html")
    assert code == 0 and out.splitlines()[-1] == str(run / "report.html")
    target = tmp_path / "pages" / "mine.html"
    code, out, _ = run_cli("report", str(run), "--html", str(target))
    assert code == 0 and out.splitlines()[-1] == str(target)
    page = target.read_text()
    assert not re.search(r"(src|href)=\"(?!data:)", page)  # nothing fetched from elsewhere
    images = re.findall(r'<img src="data:image/png;base64,([^"]+)"', page)
    assert len(images) == len(figure_ids(page)) >= len(LLM_PANELS)
    assert all(base64.b64decode(i).startswith(b"\x89PNG\r\n\x1a\n") for i in images)


def test_without_html_the_text_report_is_unchanged(tmp_path, run_cli):
    run = write_run(tmp_path / "run", llm_rows(), summary=llm_summary())
    code, out, _ = run_cli("report", str(run))
    assert code == 0 and "eval_accuracy_after: 0.35" in out and "diagnosis" in out
    assert not (run / "report.html").exists()
    code, _, err = run_cli("report", "--compare", str(run), str(run))
    assert code == 2 and "add --html" in err


def test_several_runs_need_compare_and_compare_needs_several(tmp_path, run_cli):
    a = write_run(tmp_path / "a", llm_rows())
    b = write_run(tmp_path / "b", llm_rows())
    code, _, err = run_cli("report", str(a), str(b), "--html")
    assert code == 2 and "add --compare" in err
    code, _, err = run_cli("report", str(a), "--html", "--compare")
    assert code == 2 and "two or more" in err


def test_html_without_matplotlib_fails_in_one_line_naming_the_extra(tmp_path, run_cli, monkeypatch):
    run = write_run(tmp_path / "run", llm_rows())
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # `import matplotlib` now fails
    code, out, err = run_cli("report", str(run), "--html")
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and "pip install 'ascent[report]'" in err
    assert not (run / "report.html").exists()


def test_a_directory_without_metrics_is_refused_in_one_line(tmp_path, run_cli):
    (tmp_path / "empty").mkdir()
    code, _, err = run_cli("report", str(tmp_path / "empty"), "--html")
    assert code == 2 and err.count("\n") == 1 and "no metrics.jsonl" in err
    (tmp_path / "empty" / "metrics.jsonl").write_text("")
    code, _, err = run_cli("report", str(tmp_path / "empty"), "--html")
    assert code == 2 and err.count("\n") == 1 and "no logged step" in err


def test_non_finite_values_are_left_out_of_the_curves():
    rows = [{"step": 1, "kl": 0.1}, {"step": 2, "kl": None}, {"step": 3, "kl": math.inf}]
    assert plots.series(rows, "kl") == ([1], [0.1])


@pytest.mark.skipif(
    not CHROMIUM.is_file(),
    reason="needs Debian's chromium at /usr/bin/chromium (as root: apt-get install -y chromium)",
)
def test_the_page_renders_in_a_headless_browser_with_every_image_loaded(tmp_path):
    run = write_run(tmp_path / "run", agentic_rows(), summary=llm_summary(steps=30))
    page = write_html_report([run]).read_text()
    n_figures = len(figure_ids(page))
    # Each image records whether it loaded, and its decoded width, where --dump-dom shows it.
    probe = (
        "onload=\"this.setAttribute('data-state','loaded:'+this.naturalWidth)\" "
        "onerror=\"this.setAttribute('data-state','error')\" "
    )
    probed = tmp_path / "probed.html"
    probed.write_text(page.replace("<img ", "<img " + probe))
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             f"--user-data-dir={tmp_path / 'profile'}"]  # fmt: skip
    done = subprocess.run(
        [str(CHROMIUM), *flags, "--dump-dom", probed.as_uri()],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    states = re.findall(r'<img [^>]*data-state="([^"]*)"', done.stdout)
    assert len(re.findall(r"<img ", done.stdout)) == n_figures >= 5
    assert states == [f"loaded:{plots.DPI * plots.WIDTH:.0f}"] * n_figures
    shutil.rmtree(tmp_path / "profile", ignore_errors=True)

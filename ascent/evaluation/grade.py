"""`ascent data grade`: how often a policy solves each problem, and the bucket that puts it in.

    cfg, run_dir = grading_config(Path("runs/tiny-grpo"), sets=[], k=8)
    report = grade_rows(rows, path, cfg, run_dir=run_dir)   # rows: (row number, row) pairs
    report.rows        # the input rows with pass_rate and difficulty added
    print_grade_report(report, out)

Each problem is put to the policy the way a training run with that config would put it: the
[data] prompt_template filled in from the row (a math row's question, a code row's statement,
and the [data.columns] extra columns), sent as the user message (the tokenizer's chat template
applies as in training), sampled at the [grade] / [rollout] temperature and length. Its k
samples are judged with the run's reward settings: a math sample passes when [reward.math]
extracts an answer equivalent to the gold, a code sample when its program passes every test
in the [sandbox]. pass_rate = passes / k; [grade] thresholds make it easy, medium or hard.

This lives in `evaluation/`, not `data/`, because it samples and judges with the evaluation
machinery (`open_endpoint`, the scorers), which itself imports `ascent.data`.

The policy is `[eval] policy` of the config, as for `ascent eval`: `[model]` (or a run
directory's final model) loaded in this process, or an API role with `[rollout] async_workers`
requests in flight. A request that fails after its retries, or a sandbox that fails, stops the
grading: a pass rate counted over fewer than k samples would not be comparable.
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from ascent.config.data import ColumnsSection
from ascent.config.grade import DIFFICULTIES, Difficulty, GradeSection
from ascent.data.code_problems import MATH_PROMPTS, check_row_kind, code_row
from ascent.data.files import DIFFICULTY_COLUMN, row_to_problem
from ascent.data.problems import Problem as DataProblem
from ascent.data.problems import render_prompt
from ascent.errors import AscentError, ConfigError
from ascent.evaluation.policy import Endpoint, open_endpoint
from ascent.evaluation.problem_set import MathProblem, Problem
from ascent.evaluation.scoring import Scorer, make_scorer
from ascent.evaluation.tasks import all_or_first_error
from ascent.observe.progress import TrainProgress
from ascent.rules import LLMConfig

ORIGINAL_LABEL = "source_difficulty"  # where a row's own, non-grade difficulty label is kept


def bucket(grade: GradeSection, pass_rate: float) -> Difficulty:
    """easy, medium or hard for a pass rate in [0, 1], by the [grade] thresholds."""
    if pass_rate >= grade.easy_at_least:
        return "easy"
    return "hard" if pass_rate < grade.hard_below else "medium"


@dataclass(frozen=True)
class GradeItem:
    """One input row, ready to sample: the training prompt and what its samples are judged by."""

    where: str  # file:row, for messages
    row: dict[str, Any]
    kind: str  # math or code
    problem: Problem
    prompt: str


@dataclass
class GradeReport:
    """A finished grading: the graded rows and how they spread over the buckets."""

    source: Path
    k: int
    easy_at_least: float
    hard_below: float
    policy: dict[str, Any]
    rows: list[dict[str, Any]] = field(repr=False)  # the input rows, graded, in input order
    elapsed_sec: float = 0.0

    @property
    def counts(self) -> Counter[str]:
        return Counter(row["difficulty"] for row in self.rows)

    def to_json(self) -> dict[str, Any]:
        counts = self.counts
        return {"graded": len(self.rows), **{d: counts[d] for d in DIFFICULTIES}, "k": self.k}


def grading_config(
    target: Path, sets: Sequence[str] = (), k: int | None = None
) -> tuple[LLMConfig, Path | None]:
    """The config `--policy` names, as `ascent eval` reads it: a TOML file, or a run directory
    (its config.toml; the model is its final-model). `k` overrides `[grade] k`."""
    from ascent.configfile import load_config, load_run_config

    if target.is_dir() and not (target / "config.toml").is_file():
        raise AscentError(
            f"--policy {target}: a directory without config.toml; pass a run directory or a "
            "TOML config"
        )
    run_dir = target if target.is_dir() else None
    overrides = [*sets, *([f"grade.k={k}"] if k is not None else [])]
    if run_dir is not None:
        cfg, notes = load_run_config(run_dir, overrides)
        for note in notes:
            print(f"warning: {note}", file=sys.stderr)
    else:
        cfg = load_config(target, overrides)
    if not isinstance(cfg, LLMConfig):
        raise AscentError(
            f"--policy {target}: a classic PPO config has no LLM policy to grade with"
        )
    return cfg, run_dir


def grade_rows(
    rows: Iterable[tuple[int, dict[str, Any]]],
    path: Path,
    cfg: LLMConfig,
    *,
    kind: str = "auto",
    run_dir: Path | None = None,
    console: Console | None = None,
) -> GradeReport:
    """Sample `[grade] k` completions of every row's problem and grade it."""
    check_row_kind(kind)
    if cfg.data.chat_template == "off":
        raise ConfigError(
            '[data] chat_template: "off" cannot be honoured here: each prompt goes to the policy '
            "as one chat message, as in ascent eval (a tokenizer without a chat template sees the "
            'bare prompt); set it to "auto"'
        )
    columns = cfg.data.columns if cfg.data.explicitly_set("columns") else None
    items = [make_item(n, row, cfg, kind, columns, f"{path}:{n}") for n, row in rows]
    if not items:
        raise AscentError(f"{path}: no rows to grade")
    kinds = Counter(item.kind for item in items)
    for used in kinds:  # a math row is scored by the math reward, a code row by the code one
        if used not in cfg.reward.functions:
            raise ConfigError(
                f"[reward] functions: {cfg.reward.functions} has no {used} reward, so a training "
                f'run with this config could not score the {used} rows; add "{used}" to functions'
            )
    console = console or Console(stderr=True, soft_wrap=True)
    cfg = sampling_config(cfg)
    if cfg.rollout.top_k:
        console.print(
            "note: [rollout] top_k is not applied when grading (requests have no top_k)",
            markup=False,
        )
    start = time.monotonic()
    scorers: dict[str, Scorer] = {}
    try:
        for used in kinds:
            scorers[used] = make_scorer(cfg, used)  # refuses early when there is no sandbox
        with open_endpoint(cfg, run_dir, length_settings="[grade] max_new_tokens") as endpoint:
            console.print(escape(_opening_line(path, items, endpoint, cfg)), highlight=False)
            passes = asyncio.run(_grade_all(endpoint, scorers, items, cfg, console))
    finally:
        for scorer in scorers.values():
            scorer.close()
    g = cfg.grade
    rates = [n / g.k for n in passes]
    graded = [_graded_row(i.row, r, bucket(g, r)) for i, r in zip(items, rates, strict=True)]
    elapsed = time.monotonic() - start
    return GradeReport(path, g.k, g.easy_at_least, g.hard_below, endpoint.info, graded, elapsed)


def sampling_config(cfg: LLMConfig) -> LLMConfig:
    """`cfg` with the [eval] sampling settings the endpoint reads set to the grading ones:
    [grade] temperature and max_new_tokens, else [rollout]'s, and [rollout] top_p."""
    g, r = cfg.grade, cfg.rollout
    settings = {
        "num_samples": g.k,
        "temperature": r.temperature if g.temperature is None else g.temperature,
        "top_p": r.top_p,
        "max_new_tokens": r.max_new_tokens if g.max_new_tokens is None else g.max_new_tokens,
        "language": cfg.reward.code.default_language,  # code without a fence tag, as in training
    }
    return cfg.model_copy(update={"eval": cfg.eval.model_copy(update=settings)})


def make_item(
    number: int,
    row: dict[str, Any],
    cfg: LLMConfig,
    kind: str,
    columns: ColumnsSection | None,
    where: str,
) -> GradeItem:
    """A row as a problem to sample: code when `kind` is code or (auto) its fields are a code
    format's, else math (`columns`: [data.columns]; None: question / problem / prompt, answer)."""
    found = code_row(row, kind, where)
    if found is not None:
        problem: Problem = found[1]
        extra = {name: row[name] for name in (columns.extra if columns else ()) if name in row}
        text = DataProblem(key=problem.id, prompt=problem.statement, answer="", columns=extra)
        return GradeItem(where, row, "code", problem, _prompt(cfg, text))
    if columns is None:
        found = next((name for name in MATH_PROMPTS if name in row), None)
        if found is None:
            have = ", ".join(sorted(row)[:10]) or "none"
            raise AscentError(
                f"{where}: no column {'/'.join(MATH_PROMPTS)} in this math row (the row has: "
                f"{have}); name the columns in [data.columns] prompt and answer of the --policy "
                "config, or pass --kind"
            )
        columns = ColumnsSection(prompt=found)
    text = row_to_problem(row, columns, where)
    problem = MathProblem(id=where, question=text.prompt, answer=text.answer)
    return GradeItem(where, row, "math", problem, _prompt(cfg, text))


def _prompt(cfg: LLMConfig, problem: DataProblem) -> str:
    try:
        return render_prompt(cfg.data.prompt_template, problem)
    except ValueError as err:
        raise ConfigError(f"[data] {err}") from None


async def _grade_all(
    endpoint: Endpoint,
    scorers: dict[str, Scorer],
    items: list[GradeItem],
    cfg: LLMConfig,
    console: Console,
) -> list[int]:
    """Correct samples per item. A few workers take items in turn, each sampling one item's
    k completions at once: enough to keep the endpoint's requests in flight, without a task
    per row of a large file."""
    k = cfg.grade.k
    passes = [0] * len(items)
    tally = Counter[str]()
    fields = {name: name for name in DIFFICULTIES}
    progress = TrainProgress(
        len(items), fields, enabled=cfg.logging.progress, description="grade", console=console
    )
    queue = iter(enumerate(items))  # shared: each item is taken by one worker

    async def worker() -> None:
        for i, item in queue:
            verdicts = await asyncio.gather(
                *(_sample(endpoint, scorers[item.kind], item) for _ in range(k))
            )
            passes[i] = sum(verdicts)
            tally[bucket(cfg.grade, passes[i] / k)] += 1
            tally["done"] += 1
            progress.update(tally["done"], tally)

    workers = max(1, -(-2 * endpoint.client.concurrency // k))  # ceil: 2x the requests in flight
    async with endpoint.client:
        with progress:
            await all_or_first_error(
                [asyncio.create_task(worker()) for _ in range(min(workers, len(items)))]
            )
    return passes


async def _sample(endpoint: Endpoint, scorer: Scorer, item: GradeItem) -> bool:
    sample = await endpoint.sample(item.prompt)
    if sample.error is not None:
        raise AscentError(f"{item.where}: a request failed, so grading stops: {sample.error}")
    judged = await scorer.judge(item.problem, sample)
    if judged.status == "sandbox_error":
        raise AscentError(
            f"{item.where}: the sandbox failed, so grading stops: {judged.detail.get('detail')}"
        )
    return judged.passed


def _graded_row(row: dict[str, Any], pass_rate: float, difficulty: str) -> dict[str, Any]:
    """The row with its grade; a difficulty label of its own (e.g. a contest letter) is kept
    as source_difficulty rather than overwritten."""
    out = dict(row)
    label = row.get(DIFFICULTY_COLUMN)
    if label not in (None, "", *DIFFICULTIES) and ORIGINAL_LABEL not in row:
        out[ORIGINAL_LABEL] = label
    return out | {"pass_rate": pass_rate, DIFFICULTY_COLUMN: difficulty}


def _opening_line(path: Path, items: list[GradeItem], endpoint: Endpoint, cfg: LLMConfig) -> str:
    info, ev = endpoint.info, cfg.eval
    who = f"{info['model']}" + (f" (role {info['role']})" if "role" in info else " (local)")
    kinds = ", ".join(f"{n} {kind}" for kind, n in sorted(Counter(i.kind for i in items).items()))
    return (
        f"grade: {len(items)} problems ({kinds}) from {path} x {cfg.grade.k} samples at "
        f"temperature {ev.temperature}, up to {ev.max_new_tokens} tokens, policy {who}"
    )


def print_grade_report(report: GradeReport, out: Path, console: Console | None = None) -> None:
    """The buckets table and where the graded rows went (the JSON summary is the caller's)."""
    if console is None:
        console = Console()
        if not console.is_terminal:  # logs and pipes: wide enough that rows do not wrap
            console = Console(width=120)
    counts, total = report.counts, len(report.rows)
    rates: dict[str, list[float]] = {d: [] for d in DIFFICULTIES}
    for row in report.rows:
        rates[row["difficulty"]].append(row["pass_rate"])
    ranges = {
        "easy": f">= {report.easy_at_least:g}",
        "medium": f"[{report.hard_below:g}, {report.easy_at_least:g})",
        "hard": f"< {report.hard_below:g}",
    }
    table = Table(title=f"data grade (k = {report.k})", title_justify="left")
    table.add_column("difficulty")
    table.add_column("pass rate")
    table.add_column("rows", justify="right")
    table.add_column("share", justify="right")
    table.add_column("mean pass rate", justify="right")
    for d in DIFFICULTIES:
        mean = f"{sum(rates[d]) / len(rates[d]):.3f}" if rates[d] else "-"
        table.add_row(d, ranges[d], str(counts[d]), f"{100 * counts[d] / total:.1f}%", mean)
    console.print(table)
    histogram = Counter(round(row["pass_rate"] * report.k) for row in report.rows)
    spread = "  ".join(f"{c}/{report.k}: {n}" for c, n in sorted(histogram.items()))
    console.print(f"correct samples per problem: {spread}", highlight=False, soft_wrap=True)
    console.print(f"graded: {out} ({report.elapsed_sec:.1f}s)", highlight=False, soft_wrap=True)

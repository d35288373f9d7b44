"""`ascent eval` for LLM policies: sample, judge, count, save.

    run = run_eval(cfg, run_dir=None)          # what `ascent eval CONFIG` does
    print_summary(run)                         # the band table (ascent.evaluation.table)

`[eval] mode = "agentic"` runs one multi-role episode per problem instead
(`ascent.evaluation.agentic`), and `[eval.test_time_rl] enabled = true` adapts the policy to
each problem before it answers (`ascent.evaluation.test_time_run`); what follows is the
single-completion mode.

Every problem is a task on one event loop. Its `num_samples` requests go out at once; the
`ApiClient` keeps `[rollout] async_workers` of all requests in flight (a local policy batches
as many into one generate call), and each completion is judged the moment it arrives, in the
sandbox pool's threads, while later requests are still being answered.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.markup import escape

from ascent.evaluation.bands import band_of
from ascent.evaluation.policy import Endpoint, open_endpoint
from ascent.evaluation.problem_set import (
    Problem,
    ProblemSet,
    Prompt,
    check_language,
    render_prompt,
    resolve_problems_path,
    select_problems,
)
from ascent.evaluation.results import ProblemResult, band_rows, notes, output_dir, write_results
from ascent.evaluation.scoring import Judged, Scorer, make_scorer
from ascent.evaluation.tasks import REPORTED_FAILURES, all_or_first_error
from ascent.observe.progress import TrainProgress
from ascent.rules import LLMConfig

if TYPE_CHECKING:
    from ascent.evaluation.agentic_results import AgenticRun
    from ascent.evaluation.test_time_results import AdaptedRun


@dataclass
class EvalRun:
    """A finished evaluation: what the table shows and where the files are."""

    results_path: Path
    header: dict[str, Any]
    rows: list[dict[str, Any]]  # one per band, then "all"
    notes: list[str]
    results: list[ProblemResult] = field(repr=False)
    usage_lines: list[str] = field(default_factory=list)

    @property
    def all_failed(self) -> bool:
        """Every request failed: nothing was evaluated."""
        return all(s.error is not None for r in self.results for s in r.samples)

    @property
    def first_error(self) -> str:
        return next((r.errors[0] for r in self.results if r.errors), "no answers")


def run_eval(
    cfg: LLMConfig,
    *,
    run_dir: Path | None = None,
    checkpoint: Path | None = None,
    console: Console | None = None,
) -> EvalRun | AgenticRun | AdaptedRun:
    """Evaluate `[eval] policy` on `[eval] problems`; write results and transcripts."""
    if cfg.eval.test_time_rl.enabled:
        from ascent.evaluation.test_time_run import run_test_time_rl

        return run_test_time_rl(cfg, run_dir=run_dir, checkpoint=checkpoint, console=console)
    if cfg.eval.mode == "agentic":
        from ascent.evaluation.agentic import run_agentic_eval

        return run_agentic_eval(cfg, run_dir=run_dir, checkpoint=checkpoint, console=console)
    ev = cfg.eval
    problem_set, skipped = select_problems(resolve_problems_path(ev.problems, cfg.source), ev)
    check_language(problem_set, ev)
    out_dir = output_dir(cfg, run_dir, problem_set.path)
    console = console or Console(stderr=True, soft_wrap=True)
    start = time.monotonic()
    scorer = make_scorer(cfg, problem_set.kind)  # refuses early when there is no sandbox
    try:
        with open_endpoint(cfg, run_dir, checkpoint) as endpoint:
            console.print(escape(_opening_line(problem_set, endpoint, ev.num_samples)))
            results = asyncio.run(_evaluate(cfg, endpoint, scorer, problem_set, console))
            usage = endpoint.client.usage
    finally:
        scorer.close()
    header = _header(cfg, problem_set, endpoint.info, time.monotonic() - start)
    if ev.only_bands:
        header["skipped"] = skipped.to_json()
    header["usage"] = usage.to_dict()
    extra = [n for n in [skipped.note()] if n]
    path = write_results(out_dir, header, results, ev.pass_k, extra)
    return EvalRun(
        path,
        header,
        band_rows(results, ev.pass_k),
        notes(results) + extra,
        results,
        usage.summary_lines(),
    )


async def _evaluate(
    cfg: LLMConfig, endpoint: Endpoint, scorer: Scorer, problem_set: ProblemSet, console: Console
) -> list[ProblemResult]:
    ev = cfg.eval
    fields = {"solved": "solved", "failed": "failed requests"}
    progress = TrainProgress(
        len(problem_set.problems),
        fields,
        enabled=cfg.logging.progress,
        description="eval",
        console=console,
    )
    tally = {"done": 0, "solved": 0, "failed": 0, "reported": 0}

    def finished(result: ProblemResult) -> None:
        tally["done"] += 1
        tally["solved"] += result.correct > 0
        tally["failed"] += result.failed_requests
        if result.errors and tally["reported"] < REPORTED_FAILURES:
            tally["reported"] += 1
            for error in result.errors:
                progress.print(f"problem {result.problem.id}: {error}")
            if tally["reported"] == REPORTED_FAILURES:
                progress.print("further failed requests are recorded in eval_results.json only")
        progress.update(tally["done"], tally)

    async with endpoint.client:
        with progress:
            tasks = [
                asyncio.create_task(
                    _problem(endpoint, scorer, problem, render_prompt(problem, ev), cfg, finished)
                )
                for problem in problem_set.problems
            ]
            await all_or_first_error(tasks)
    return [task.result() for task in tasks]


async def _problem(
    endpoint: Endpoint,
    scorer: Scorer,
    problem: Problem,
    prompt: Prompt,
    cfg: LLMConfig,
    finished: Any,
) -> ProblemResult:
    async def one() -> tuple[Any, Judged]:
        sample = await endpoint.sample(prompt.text)
        return sample, await scorer.judge(problem, sample)

    pairs = await asyncio.gather(*(one() for _ in range(cfg.eval.num_samples)))
    band = band_of(problem.rating, problem.difficulty, cfg.eval.rating_bands)
    result = ProblemResult(problem, prompt, band, [s for s, _ in pairs], [j for _, j in pairs])
    finished(result)
    return result


def _opening_line(problem_set: ProblemSet, endpoint: Endpoint, n: int) -> str:
    info = endpoint.info
    who = f"{info['model']}" + (f" (role {info['role']})" if "role" in info else " (local)")
    return (
        f"eval: {len(problem_set.problems)} {problem_set.format} problems from "
        f"{problem_set.path} x {n} sample{'s' if n > 1 else ''}, policy {who}"
    )


def _header(
    cfg: LLMConfig, problem_set: ProblemSet, policy: dict[str, Any], elapsed: float
) -> dict[str, Any]:
    ev = cfg.eval
    header: dict[str, Any] = {
        "problems_file": str(problem_set.path),
        "format": problem_set.format,
        "kind": problem_set.kind,
        "policy": policy,
        "num_samples": ev.num_samples,
        "pass_k": list(ev.pass_k),
        "temperature": ev.temperature,
        "top_p": ev.top_p,
        "max_new_tokens": ev.max_new_tokens,
        "max_problem_chars": ev.max_problem_chars,
        "elapsed_sec": round(elapsed, 2),
    }
    if problem_set.kind == "code":
        header["language"] = ev.language
    return header

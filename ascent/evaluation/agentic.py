"""`ascent eval` with `[eval] mode = "agentic"`: the evaluation round of agentic GRPO.

    run = run_agentic_eval(cfg)        # what `ascent eval CONFIG` does in agentic mode
    print_summary(run)                 # the band table and the role table

Per problem, one episode of the training machinery (`ascent.rollout.agentic.EpisodeRunner`):
hypothesis -> solver -> test generator -> verify -> summarize, up to `[agentic] max_turns`,
each role played as `[agentic.roles]` says:

    policy     the local policy (`[eval] policy = "local"`: --checkpoint, the run directory's
               model, or [model]) on a TransformersEngine, turns of concurrent episodes batched
    api        the [models] role (<role>_model) through ApiClient (retries, usage per role)
    scripted   the format's deterministic stand-in (ascent.rollout.agentic.formats)
    off        not played (the solver cannot be off)

A model is loaded only when some role is "policy": with every role served by an API, [model]
is never read. Every role answers with `[eval] temperature`, `top_p` and `max_new_tokens`;
`[rollout] async_workers` episodes are in flight. The submitted program and the first solver
turn's program are judged on the hidden tests by the episode's verifier (the sandbox);
`agentic_results` counts them per band, and what each role produced.

Without a local policy there is no tokenizer: the transcript is measured against
`summarize_threshold` at 4 characters per token. A request that fails after its retries is an
empty turn (recorded with its diagnosis) and the episode goes on; a failure every request
would hit (no key, a wrong base_url, nothing listening) stops the evaluation.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape

from ascent.api import ApiClient, UsageLedger
from ascent.config.agentic import ROLES
from ascent.data import Problem
from ascent.evaluation.agentic_parts import (
    EPISODE_ERRORS,
    EvalApiRoles,
    EvalFormat,
    LocalRoles,
    check_agentic_eval,
    episode_problems,
    local_roles,
    make_runner,
)
from ascent.evaluation.agentic_results import (
    AgenticRun,
    EpisodeResult,
    FirstAttempt,
    band_rows,
    notes,
    role_rows,
    write_agentic_results,
)
from ascent.evaluation.bands import band_of
from ascent.evaluation.policy import EVAL_LENGTH_SETTINGS
from ascent.evaluation.problem_set import ProblemSet, resolve_problems_path, select_problems
from ascent.evaluation.results import output_dir
from ascent.evaluation.tasks import REPORTED_FAILURES, all_or_first_error
from ascent.observe.progress import TrainProgress
from ascent.rewards.sandbox import SandboxPool
from ascent.rollout.agentic.episode import EpisodeRunner
from ascent.rollout.agentic.transcript import Episode
from ascent.rules import LLMConfig


def run_agentic_eval(
    cfg: LLMConfig,
    *,
    run_dir: Path | None = None,
    checkpoint: Path | None = None,
    console: Console | None = None,
) -> AgenticRun:
    """One episode per `[eval] problems` problem; write results and transcripts."""
    ev = cfg.eval
    roles = {role: getattr(cfg.agentic.roles, role) for role in ROLES}
    check_agentic_eval(cfg, roles, checkpoint)
    problem_set, skipped = select_problems(resolve_problems_path(ev.problems, cfg.source), ev)
    problems = episode_problems(problem_set, roles)
    out_dir = output_dir(cfg, run_dir, problem_set.path)
    console = console or Console(stderr=True, soft_wrap=True)
    usage = UsageLedger()
    client = (
        ApiClient.from_config(cfg, usage=usage).with_length_settings(EVAL_LENGTH_SETTINGS)
        if "api" in roles.values()
        else None
    )
    start = time.monotonic()
    pool = SandboxPool(cfg.sandbox)  # refuses here when programs cannot be isolated
    try:
        with contextlib.ExitStack() as stack:
            local = None
            if "policy" in roles.values():
                local = stack.enter_context(local_roles(cfg, run_dir, checkpoint))
            played = _role_info(roles, client, local)
            console.print(escape(_opening_line(problem_set, played, cfg)), highlight=False)
            parts = (roles, pool, local, client)
            results = asyncio.run(_evaluate(cfg, parts, problems, console))
    finally:
        pool.close()
    header = _header(cfg, problem_set, time.monotonic() - start)
    if ev.only_bands:
        header["skipped"] = skipped.to_json()
    header["usage"] = usage.to_dict()
    roles_summary = role_rows(results, played)
    all_notes = notes(results, played, [n for n in [skipped.note()] if n])
    path = write_agentic_results(out_dir, header, results, roles_summary, all_notes)
    return AgenticRun(
        path, header, band_rows(results), roles_summary, all_notes, results, usage.summary_lines()
    )


async def _evaluate(
    cfg: LLMConfig,
    parts: tuple[dict[str, str], SandboxPool, LocalRoles | None, ApiClient | None],
    problems: list[Problem],
    console: Console,
) -> list[EpisodeResult]:
    roles, pool, local, client = parts
    fields = {"solved": "solved", "first": "first attempt", "failed": "failed requests"}
    progress = TrainProgress(
        len(problems), fields, enabled=cfg.logging.progress, description="eval", console=console
    )
    tally = {"done": 0, "solved": 0, "first": 0, "failed": 0, "reported": 0}

    def report(error: str) -> None:
        tally["reported"] += 1
        if tally["reported"] <= REPORTED_FAILURES:
            progress.print(f"failed request: {error}")
        if tally["reported"] == REPORTED_FAILURES:
            progress.print("further failed requests are recorded in eval_results.json only")

    api = None
    if client is not None:
        params = {
            "max_tokens": cfg.eval.max_new_tokens,
            "temperature": cfg.eval.temperature,
            "top_p": cfg.eval.top_p,
        }
        api = EvalApiRoles(client, params, report)
    runner = make_runner(cfg, roles, pool, local, api)
    fmt = runner.fmt
    assert isinstance(fmt, EvalFormat)
    gate = asyncio.Semaphore(cfg.rollout.async_workers)

    async def one(uid: int, problem: Problem) -> EpisodeResult:
        errors: list[tuple[str, str]] = []
        EPISODE_ERRORS.set(errors)  # this task's own context: its episode's failures
        async with gate:
            episode = await runner.run(problem, uid)
            first = await first_attempt(runner, episode)
        code = episode.code
        band = band_of(code.rating, code.difficulty, cfg.eval.rating_bands)
        result = EpisodeResult(code, band, episode, first, fmt.cut(code), errors)
        tally["done"] += 1
        tally["solved"] += result.passed
        tally["first"] += first.passed
        tally["failed"] += len(errors)
        progress.update(tally["done"], tally)
        return result

    try:
        with progress:
            tasks = [asyncio.create_task(one(i, p)) for i, p in enumerate(problems)]
            await all_or_first_error(tasks)
    finally:
        if client is not None:
            await client.aclose()
    return [task.result() for task in tasks]


async def first_attempt(runner: EpisodeRunner, episode: Episode) -> FirstAttempt:
    """The first solver turn's program on the hidden tests (the submitted program's judge)."""
    solve = next((t for t in episode.turns if t.role == "solver" and t.attempt == 0), None)
    if solve is None:
        return FirstAttempt(False, "no solver turn")
    parsed = runner.fmt.parse_solution(solve.text)
    if parsed is None:
        return FirstAttempt(False, "no program")
    language = parsed[1] or runner.s.default_language
    verdict = await runner.verifier.final(episode.code, parsed[0], language)
    detail = {"tests_passed": verdict.passed, "total": verdict.total}
    return FirstAttempt(runner.verifier.solved(verdict), verdict.status, detail)


def _role_info(
    roles: dict[str, str], client: ApiClient | None, local: LocalRoles | None
) -> dict[str, dict[str, Any]]:
    """Who plays each role, as the results record it."""
    out: dict[str, dict[str, Any]] = {}
    for role, source in roles.items():
        out[role] = {"source": source}
        if source == "api":
            assert client is not None
            spec = client.spec(role)
            out[role] |= {"model": spec.model, "base_url": spec.base_url}
        elif source == "policy":
            assert local is not None
            out[role] |= local.info
    return out


def _opening_line(problem_set: ProblemSet, played: dict[str, dict[str, Any]], cfg) -> str:
    who = ", ".join(
        f"{role} {info['source']}" + (f" ({info['model']})" if "model" in info else "")
        for role, info in played.items()
    )
    return (
        f"eval (agentic): {len(problem_set.problems)} {problem_set.format} problems from "
        f"{problem_set.path}, up to {cfg.agentic.max_turns} attempt(s) each; {who}"
    )


def _header(cfg: LLMConfig, problem_set: ProblemSet, elapsed: float) -> dict[str, Any]:
    """The settings eval_results.json records (who played each role is in its "roles")."""
    ev, a = cfg.eval, cfg.agentic
    return {
        "mode": "agentic",
        "problems_file": str(problem_set.path),
        "format": problem_set.format,
        "kind": problem_set.kind,
        "max_turns": a.max_turns,
        "summarize_threshold": a.summarize_threshold,
        "max_generated_tests": a.max_generated_tests,
        "temperature": ev.temperature,
        "top_p": ev.top_p,
        "max_new_tokens": ev.max_new_tokens,
        "max_problem_chars": ev.max_problem_chars,
        "role_instructions": ev.role_instructions,
        "language": ev.language,
        "rating_bands": [list(b) for b in ev.rating_bands],
        "only_bands": ev.only_bands,
        "elapsed_sec": round(elapsed, 2),
    }


__all__ = ["AgenticRun", "first_attempt", "run_agentic_eval"]

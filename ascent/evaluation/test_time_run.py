"""`ascent eval` with `[eval.test_time_rl] enabled = true`: pass@1 without and with test-time RL.

    run = run_test_time_rl(cfg)        # what `ascent eval CONFIG` does then
    print_summary(run)                 # the band table

The order of work, and why:

1. refuse what cannot work, before a model is loaded (`check_test_time_rl`);
2. the problems: an `[eval] problems` file (its code problems, as agentic mode reads them), or
   `"data:held_out"`, the held-out split of `[data]` (e.g. the built-in arithmetic task) seen
   through its agentic format;
3. per problem, concurrently in the sandbox pool: the test generator's tests and the ones the
   reference solution confirms, or with labels = "vote" the inputs attempts are compared on
   (`AttemptScorer.prepare`, on the problem's visible view);
4. pass@1 without: one greedy answer per problem from the weights under evaluation, judged on
   the hidden tests;
5. per problem (scope = "problem") or per band (scope = "band"), from the restored original
   weights: `steps` GRPO updates on each problem's attempts, then its greedy answer, judged on
   the hidden tests (`PolicyAdapter`);
6. eval_results.json, transcripts.jsonl and the table (`test_time_results`).

Sampling is seeded per problem (per band with scope = "band") from `[run] seed` and the
problem's id (the band's label), so a problem's updates do not depend on which problems ran
before it. A problem whose weights never moved (no visible test, or no update with signal)
keeps its answer without test-time RL: the weights are the same, bit for bit.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from rich.console import Console
from rich.markup import escape

from ascent.api import ApiClient, UsageLedger
from ascent.data import Problem
from ascent.data.code_problems import CodeProblem
from ascent.evaluation.bands import Band, band_of
from ascent.evaluation.policy import EVAL_LENGTH_SETTINGS
from ascent.evaluation.results import output_dir
from ascent.evaluation.test_time_results import (
    AdaptedResult,
    AdaptedRun,
    Answer,
    band_rows,
    notes,
    write_test_time_results,
)
from ascent.evaluation.test_time_rl import Adaptation, PolicyAdapter
from ascent.evaluation.test_time_scoring import AttemptScorer, VisibleProblem, visible_view
from ascent.evaluation.test_time_setup import (
    ProblemSource,
    check_context,
    check_eval_keys,
    check_test_time_rl,
    load_source,
)
from ascent.observe.progress import TrainProgress
from ascent.rewards.sandbox import SandboxPool
from ascent.rollout.agentic.formats import CodeFormat
from ascent.rollout.agentic.roles import ApiRoles
from ascent.rollout.agentic.verify import Verifier
from ascent.rules import LLMConfig


def run_test_time_rl(
    cfg: LLMConfig,
    *,
    run_dir: Path | None = None,
    checkpoint: Path | None = None,
    console: Console | None = None,
) -> AdaptedRun:
    """Answer every problem without and with test-time RL; write results and transcripts."""
    check_test_time_rl(cfg, checkpoint)
    source = load_source(cfg)
    check_eval_keys(cfg, source)
    out_dir = output_dir(cfg, run_dir, source.path)
    console = console or Console(stderr=True, soft_wrap=True)
    usage = UsageLedger()
    start = time.monotonic()
    pool = SandboxPool(cfg.sandbox)  # refuses here when programs cannot be isolated
    try:
        with _adapter(cfg, run_dir, checkpoint) as (adapter, info):
            console.print(escape(_opening_line(cfg, source, info)), highlight=False)
            results = asyncio.run(_evaluate(cfg, adapter, pool, usage, source, console))
    finally:
        pool.close()
    header = _header(cfg, source, info, time.monotonic() - start)
    if cfg.eval.only_bands:
        header["skipped"] = source.skipped.to_json()
    header["usage"] = usage.to_dict()
    extra = [n for n in [source.skipped.note()] if n]
    all_notes = notes(results, cfg.eval.test_time_rl.scope, extra, cfg.eval.test_time_rl.labels)
    path = write_test_time_results(out_dir, header, results, all_notes)
    return AdaptedRun(path, header, band_rows(results), all_notes, results, usage.summary_lines())


# -- the model ---------------------------------------------------------------------------------


@contextlib.contextmanager
def _adapter(
    cfg: LLMConfig, run_dir: Path | None, checkpoint: Path | None
) -> Iterator[tuple[PolicyAdapter, dict[str, Any]]]:
    """The local policy with trainable float32 weights, as the trainer loads it."""
    from ascent.data import uses_chat_template
    from ascent.evaluation.policy import local_model_section
    from ascent.models import load_policy, load_tokenizer, resolve_dtype
    from ascent.rollout.agentic.chat import ChatTemplate
    from ascent.runtime import setup_runtime

    section, name = local_model_section(cfg, run_dir, checkpoint)
    device = setup_runtime(cfg.run)
    tokenizer = load_tokenizer(section)
    model = load_policy(section, device)
    chat = (
        ChatTemplate(tokenizer) if uses_chat_template(cfg.data.chat_template, tokenizer) else None
    )
    adapter = PolicyAdapter(cfg, model, tokenizer, chat, resolve_dtype(section.dtype, device))
    info = {"policy": "local", "model": section.name_or_path, "name": name, "device": str(device)}
    try:
        yield adapter, info
    finally:
        adapter.restore()  # leave the model as it was loaded
        adapter.close()


# -- the evaluation ----------------------------------------------------------------------------


async def _evaluate(
    cfg: LLMConfig,
    adapter: PolicyAdapter,
    pool: SandboxPool,
    usage: UsageLedger,
    source: ProblemSource,
    console: Console,
) -> list[AdaptedResult]:
    a, ev = cfg.agentic, cfg.eval
    verifier = Verifier(pool, cfg.reward.code, cfg.sandbox)
    api = None
    if a.roles.testgen == "api":
        params = {"max_tokens": ev.max_new_tokens, "temperature": ev.temperature, "top_p": ev.top_p}
        client = ApiClient.from_config(cfg, usage=usage)
        api = ApiRoles(client.with_length_settings(EVAL_LENGTH_SETTINGS), params)
    scorer = AttemptScorer(
        source.fmt,
        verifier,
        testgen=a.roles.testgen,
        api=api,
        max_generated_tests=a.max_generated_tests,
        adversarial_penalty=a.adversarial_penalty,
        unparsable_reward=a.unparsable_reward,
        default_language=ev.language,
        labels=ev.test_time_rl.labels,
        vote_min_share=ev.test_time_rl.vote_min_share,
    )
    # the prompt is the statement and samples, which the view keeps: check it fits before the
    # test generator's requests and the sandbox work
    views = [visible_view(p, c, None).columns["code_problem"] for p, c in source.problems]
    prompts = [adapter.prompt(source.fmt, code) for code in views]
    check_context(cfg, adapter.model.config, source, prompts)
    try:
        visible = await _prepare_all(cfg, scorer, source)
    finally:
        if api is not None:
            await api.aclose()
    answers = [adapter.answer(p) for p in prompts]  # from the weights under evaluation
    without = await asyncio.gather(
        *(_judge(verifier, source.fmt, code, text, ev.language)
          for (_, code), text in zip(source.problems, answers, strict=True))
    )  # fmt: skip
    bands = [band_of(code.rating, code.difficulty, ev.rating_bands) for _, code in source.problems]
    loop = _Loop(cfg, adapter, scorer, verifier, source, visible, prompts, bands)
    return await loop.run(list(without), console)


async def _prepare_all(
    cfg: LLMConfig, scorer: AttemptScorer, source: ProblemSource
) -> list[VisibleProblem]:
    gate = asyncio.Semaphore(cfg.rollout.async_workers)

    async def one(problem: Problem, code: CodeProblem) -> VisibleProblem:
        async with gate:
            return await scorer.prepare(problem, code)

    return list(await asyncio.gather(*(one(p, c) for p, c in source.problems)))


async def _judge(
    verifier: Verifier, fmt: CodeFormat, code: CodeProblem, text: str, default_language: str
) -> Answer:
    """An answer's verdict on the hidden tests (the real problem, never the view)."""
    parsed = fmt.parse_solution(text)
    if parsed is None:
        return Answer(text, False, "no program")
    verdict = await verifier.final(code, parsed[0], parsed[1] or default_language)
    detail = {"tests_passed": verdict.passed, "total": verdict.total}
    return Answer(text, verifier.solved(verdict), verdict.status, detail,
                  unjudged=verdict.reward is None)  # fmt: skip


@dataclass
class _Loop:
    """Steps 5 and 6 of the module docstring: adapt, answer, judge; restore between units."""

    cfg: LLMConfig
    adapter: PolicyAdapter
    scorer: AttemptScorer
    verifier: Verifier
    source: ProblemSource
    visible: list[VisibleProblem]
    prompts: list[list[int]]
    bands: list[Band]

    def units(self) -> list[tuple[str, list[int]]]:
        """(seed key, problem indices) of each stretch of updates between two restores."""
        if self.cfg.eval.test_time_rl.scope == "problem":
            return [(code.id, [i]) for i, (_, code) in enumerate(self.source.problems)]
        by_band: dict[Band, list[int]] = {}
        for i, band in enumerate(self.bands):
            by_band.setdefault(band, []).append(i)
        return [(b.label, by_band[b]) for b in sorted(by_band, key=Band.sort_key)]

    async def run(self, without: list[Answer], console: Console) -> list[AdaptedResult]:
        fields = {"without": "pass@1 without", "with": "with", "updates": "updates"}
        enabled, n = self.cfg.logging.progress, len(without)
        progress = TrainProgress(
            n, fields, enabled=enabled, description="test-time RL", console=console
        )
        tally = {"done": 0, "without": 0, "with": 0, "updates": 0}
        results: dict[int, AdaptedResult] = {}
        with progress:
            for key, indices in self.units():
                self.adapter.restore()
                generator = unit_generator(self.cfg.run.seed, key, self.adapter.device)
                for i in indices:
                    results[i] = result = await self._problem(i, without[i], generator)
                    tally["done"] += 1
                    tally["without"] += result.without.passed
                    tally["with"] += result.with_rl.passed
                    tally["updates"] += result.adaptation.steps_taken
                    progress.update(tally["done"], tally)
        self.adapter.restore()
        return [results[i] for i in range(n)]

    async def _problem(self, i: int, without: Answer, generator: torch.Generator) -> AdaptedResult:
        code, visible = self.source.problems[i][1], self.visible[i]
        adaptation = Adaptation()
        if visible.scorable:
            adaptation = await self.adapter.adapt(self.prompts[i], visible, self.scorer, generator)
        if self.adapter.version == 0:  # the weights under evaluation: the same answer
            with_rl = without
        else:
            text = self.adapter.answer(self.prompts[i])
            language = self.cfg.eval.language
            with_rl = await _judge(self.verifier, self.source.fmt, code, text, language)
        return AdaptedResult(code, self.bands[i], without, with_rl, adaptation, visible)


def unit_generator(seed: int, key: str, device: torch.device) -> torch.Generator:
    """The sampling stream of one problem (or band): from the run's seed and its id, so it
    does not depend on the problems before it."""
    return torch.Generator(device=device).manual_seed(zlib.crc32(f"{seed}:{key}".encode()))


def _opening_line(cfg: LLMConfig, source: ProblemSource, info: dict[str, Any]) -> str:
    t = cfg.eval.test_time_rl
    return (
        f"eval (test-time RL): {len(source.problems)} {source.format} problems from "
        f"{source.label}; per {t.scope}: {t.steps} GRPO update(s) x {t.group_size} attempts "
        f"(lr {t.lr:g}, temperature {t.temperature:g}), policy {info['model']} (local), "
        f"testgen {cfg.agentic.roles.testgen}, labels {t.labels}"
    )


def _header(
    cfg: LLMConfig, source: ProblemSource, policy: dict[str, Any], elapsed: float
) -> dict[str, Any]:
    """The settings eval_results.json records."""
    ev, a, alg = cfg.eval, cfg.agentic, cfg.algorithm
    return {
        "mode": "agentic",
        "test_time_rl": ev.test_time_rl.model_dump(),
        "problems_file": source.label,
        "format": source.format,
        "kind": "code",
        "policy": policy,
        "testgen": a.roles.testgen,
        "algorithm": {
            "advantage": alg.advantage,
            "policy_loss": alg.policy_loss,
            "loss_agg": alg.loss_agg,
            "entropy_coef": alg.entropy_coef,
        },
        "max_new_tokens": ev.max_new_tokens,
        "max_generated_tests": a.max_generated_tests,
        "adversarial_penalty": a.adversarial_penalty,
        "unparsable_reward": a.unparsable_reward,
        "language": ev.language,
        "rating_bands": [list(b) for b in ev.rating_bands],
        "only_bands": ev.only_bands,
        "seed": cfg.run.seed,
        "elapsed_sec": round(elapsed, 2),
    }


__all__ = ["check_test_time_rl", "load_source", "run_test_time_rl", "unit_generator"]

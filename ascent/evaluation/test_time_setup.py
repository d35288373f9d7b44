"""What test-time RL refuses, and the problems it runs on (`ascent.evaluation.test_time_run`).

- `check_test_time_rl`: roles, `[agentic]` and `[algorithm]` settings it cannot honour;
- `load_source`: the `[eval] problems` file, or `"data:held_out"`, the held-out split of
  `[data]` seen through its agentic format;
- `check_eval_keys`, `check_context`: `[eval]` keys that do nothing for these problems, a
  problem set with nothing to score attempts on, a prompt that does not fit the model.

Everything here runs before the model is loaded (`check_context` after the tokenizer is), so a
mistake costs one line and exit code 2, not a model load.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ascent.config.agentic import ROLES
from ascent.config.evaluation import HELD_OUT
from ascent.data import Problem
from ascent.data.code_problems import CodeProblem
from ascent.errors import ConfigError
from ascent.evaluation.agentic_parts import EvalFormat, check_agentic_eval, episode_problems
from ascent.evaluation.bands import Skipped, in_bands, no_problem_in_bands
from ascent.evaluation.problem_set import resolve_problems_path, select_problems
from ascent.names import format_name
from ascent.rollout.agentic.format_registry import FORMATS
from ascent.rollout.agentic.formats import CodeFormat
from ascent.rules import LLMConfig
from ascent.rules.agentic import GROUP_ADVANTAGES


@dataclass(frozen=True)
class ProblemSource:
    """The problems of one test-time RL evaluation and the format their roles read."""

    label: str  # results' problems_file: a path, or data:held_out (task)
    path: Path  # what output_dir names the results directory after
    format: str  # the file's format, or the task's
    fmt: CodeFormat
    problems: list[tuple[Problem, CodeProblem]]
    skipped: Skipped


# -- what is refused ---------------------------------------------------------------------------


def check_test_time_rl(cfg: LLMConfig, checkpoint: Path | None) -> None:
    """Refuse roles and algorithm settings test-time RL cannot honour (one line each)."""
    roles = {role: getattr(cfg.agentic.roles, role) for role in ROLES}
    why_not = {
        "solver": (roles["solver"] != "policy", 'set solver = "policy": the policy being '
                   "updated writes the attempts"),
        "hypothesis": (roles["hypothesis"] != "off", 'set hypothesis = "off": the attempts '
                       "are the solver's first turn, written from the problem alone"),
        "summarizer": (roles["summarizer"] != "off", 'set summarizer = "off": a single turn '
                       "leaves no transcript to summarize"),
        "testgen": (roles["testgen"] == "policy", 'set testgen = "scripted", "api" or "off": '
                    "the policy being updated would write the tests it is scored on"),
    }  # fmt: skip
    for role, (refused, fix) in why_not.items():
        if refused:
            raise ConfigError(f'[agentic.roles] {role} = "{roles[role]}": test-time RL: {fix}')
    check_agentic_eval(cfg, roles, checkpoint)
    for key in ("max_turns", "summarize_threshold"):
        if cfg.agentic.explicitly_set(key):
            raise ConfigError(
                f"[agentic] {key}: test-time RL scores single attempts (the solver's first "
                "turn), so it does nothing; remove the key"
            )
    alg = cfg.algorithm
    if alg.advantage not in GROUP_ADVANTAGES:
        raise ConfigError(
            f"[algorithm] advantage: test-time RL compares the attempts at one problem, so it "
            f"must be grpo or dr_grpo (not '{alg.advantage}')"
        )
    refused = {
        "kl_coef": (alg.kl_coef > 0, "it loads no reference model; set kl_coef = 0"),
        "nll_coef": (alg.nll_coef > 0, "its attempts are not judged correct by the hidden "
                     "tests; set nll_coef = 0"),
        "is_cap": (alg.is_cap is not None, "its attempts are on-policy (sampled by the "
                   "weights being updated); remove is_cap"),
        "overlong": (alg.overlong != "off", 'it shapes long single completions; set overlong '
                     '= "off"'),
    }  # fmt: skip
    for key, (bad, fix) in refused.items():
        if bad:
            raise ConfigError(f"[algorithm] {key}: test-time RL does not use it: {fix}")


def check_eval_keys(cfg: LLMConfig, source: ProblemSource) -> None:
    """`[eval]` keys that act only for some roles or formats."""
    ev = cfg.eval
    if cfg.agentic.roles.testgen != "api":
        for key in ("temperature", "top_p"):
            if ev.explicitly_set(key):
                raise ConfigError(
                    f"[eval] {key}: with test-time RL the answers are greedy and the attempts "
                    "sample at [eval.test_time_rl] temperature; it acts only for an API test "
                    'generator (testgen = "api"); remove the key'
                )
    if (
        ev.problems == HELD_OUT
        and isinstance(source.fmt, EvalFormat)
        and ev.explicitly_set("format")
    ):
        raise ConfigError(
            f'[eval] format: with problems = "{HELD_OUT}" the rows are read as [data] reads '
            "them, so it does nothing; remove the key"
        )
    if not isinstance(source.fmt, EvalFormat):
        for key in ("max_problem_chars", "role_instructions", "language", "format"):
            if ev.explicitly_set(key):
                raise ConfigError(
                    f"[eval] {key}: the {source.format} task writes its own prompts and "
                    "programs, so it does nothing; remove the key"
                )
    vote = cfg.eval.test_time_rl.labels == "vote"
    if vote and not any(not code.is_function for _, code in source.problems):
        raise ConfigError(
            f"test-time RL: every problem of {source.label} calls a function, so there is no "
            'output to vote on; use labels = "oracle" with sample tests (an upper bound)'
        )
    if not vote and not any(_scorable_source(code, cfg) for _, code in source.problems):
        fix = (
            'set [agentic.roles] testgen = "scripted" or "api"'
            if cfg.agentic.roles.testgen == "off"
            else "give the problems sample_tests, or reference_solution and reference_language"
        )
        fix += ', or set [eval.test_time_rl] labels = "vote" (majority vote, no checker)'
        raise ConfigError(
            f"test-time RL: no problem of {source.label} has a sample test or a reference "
            f"solution to confirm generated tests, so no attempt could be scored; {fix}"
        )


def _scorable_source(code: CodeProblem, cfg: LLMConfig) -> bool:
    """A problem whose attempts can be scored: stdin tests shown, or generated tests that its
    reference solution can confirm."""
    if code.is_function:
        return False
    confirmable = cfg.agentic.roles.testgen != "off" and code.reference_solution is not None
    return bool(code.sample_tests) or confirmable


# -- the problems ------------------------------------------------------------------------------


def load_source(cfg: LLMConfig) -> ProblemSource:
    """The `[eval] problems` file, or the held-out split of `[data]`."""
    ev = cfg.eval
    roles = {role: getattr(cfg.agentic.roles, role) for role in ROLES}
    if ev.problems != HELD_OUT:
        problem_set, skipped = select_problems(resolve_problems_path(ev.problems, cfg.source), ev)
        problems = episode_problems(problem_set, roles)
        fmt = EvalFormat(ev.role_instructions, ev.max_problem_chars)
        pairs = [(p, p.columns["code_problem"]) for p in problems]
        return ProblemSource(
            str(problem_set.path), problem_set.path, problem_set.format, fmt, pairs, skipped
        )
    from ascent.data import load_task

    if cfg.data.sources:
        raise ConfigError(
            f'[eval] problems = "{HELD_OUT}" reads one problem set, and [data] has several '
            "([[data.sources]]); name the problem file in [eval] problems"
        )
    name = format_name(cfg.data)
    if name not in FORMATS:
        raise ConfigError(
            f'[eval] problems = "{HELD_OUT}": [data] task "{name}" has no code view for '
            'attempts to be judged in; use task = "arithmetic", or code problems from [data] '
            "path"
        )
    fmt = FORMATS.get(name)
    if name == "code":
        fmt = EvalFormat(ev.role_instructions, ev.max_problem_chars)
    pairs = [(p, fmt.code_problem(p)) for p in load_task(cfg.data, cfg.run.seed).eval]
    skipped = Skipped()
    if ev.only_bands:
        pairs, skipped = in_bands(pairs, ev.rating_bands, lambda pair: pair[1].rating)
        if not pairs:
            raise no_problem_in_bands(f"[eval] problems = {HELD_OUT!r}", skipped)
    pairs = pairs[: ev.limit or None]
    label = f"{HELD_OUT} ({cfg.data.path or name})"
    return ProblemSource(label, Path("held_out"), name, fmt, pairs, skipped)


def check_context(
    cfg: LLMConfig, model_config: object, source: ProblemSource, prompts: list[list[int]]
) -> None:
    """Every solver prompt plus max_new_tokens fits [agentic] context_window and the model."""
    limit = cfg.agentic.context_window
    model_limit = getattr(model_config, "max_position_embeddings", None)
    if model_limit:
        limit = min(limit, int(model_limit))
    room = cfg.eval.max_new_tokens
    for (_, code), prompt in zip(source.problems, prompts, strict=True):
        if len(prompt) + room > limit:
            raise ConfigError(
                f"problem {code.id}: the solver's prompt ({len(prompt)} tokens) plus [eval] "
                f"max_new_tokens ({room}) is over the context ({limit} tokens); set [eval] "
                "max_problem_chars or lower max_new_tokens"
            )

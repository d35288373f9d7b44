"""`ascent reward math|code` and `ascent sandbox run`: the rewards and the sandbox from a shell.

JSONL in (a file or stdin), JSONL out, one output line per input line, in input order, each
with the input's `line` number. A malformed line gets {"line": n, "error": "..."} and the rest
still runs; blank lines are skipped. Settings are the [reward] and [sandbox] defaults with any
`--set` overrides on top, or those sections of a `--config` file (with its overrides).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Annotated, Any, TextIO

import typer
from pydantic import ValidationError

from ascent.config.base import Section
from ascent.config.rewards import RewardSection, SandboxSection
from ascent.errors import AscentError

reward_app = typer.Typer(
    help="Score completions (math) or programs (code) with the built-in rewards: JSONL in, "
    "JSONL out.",
    no_args_is_help=True,
)
sandbox_app = typer.Typer(help="Run programs in the isolated code sandbox.", no_args_is_help=True)

CHUNK = 256  # input lines scored together (code rows run in parallel within a chunk)
SUFFIXES = {".py": "python", ".cpp": "cpp", ".cc": "cpp", ".cxx": "cpp", ".c++": "cpp"}

InputOption = Annotated[
    Path | None, typer.Option("--input", "-i", help="JSONL file to read; default: stdin.")
]
ConfigOption = Annotated[
    Path | None,
    typer.Option("--config", help="TOML config whose [reward] and [sandbox] sections apply."),
]
SetOption = Annotated[
    list[str] | None,
    typer.Option("--set", help="Override a config value, e.g. --set reward.math.wrong_reward=0."),
]


class _Sections(Section):
    """What the reward and sandbox commands read of a config."""

    reward: RewardSection = RewardSection()
    sandbox: SandboxSection = SandboxSection()


def load_sections(
    config: Path | None, sets: list[str] | None
) -> tuple[RewardSection, SandboxSection]:
    """The [reward] and [sandbox] sections: the defaults with `--set` overrides, or a config
    file's (not the built-in training recipe's, which has its own answer pattern)."""
    if config is not None:
        from ascent.configfile import load_config

        cfg = load_config(config, sets or [])
        if not hasattr(cfg, "reward") or not hasattr(cfg, "sandbox"):
            raise AscentError(
                f"{config}: a classic PPO config has no [reward] or [sandbox] section"
            )
        return cfg.reward, cfg.sandbox
    from ascent.configfile.loader import sections_from_sets

    sections = sections_from_sets(_Sections, sets or [], "only [reward] and [sandbox] apply here")
    return sections.reward, sections.sandbox


# -- reward math / reward code ---------------------------------------------------------------


@reward_app.command("math")
def reward_math(input: InputOption = None, config: ConfigOption = None, set_: SetOption = None):
    """Score math answers. In: {"completion", "answer"}; out: reward, extracted, correct, gold."""
    from ascent.rewards.math import MathReward

    reward_cfg, _ = load_sections(config, set_)
    reward = MathReward(reward_cfg.math)
    try:
        _process(input, _math_row, lambda rows: _score_math(reward, rows))
    finally:
        reward.close()


def _math_row(obj: dict[str, Any]) -> tuple[str, str]:
    completion, answer = obj.get("completion"), obj.get("answer")
    if not isinstance(completion, str):
        raise AscentError("'completion' must be a string")
    if isinstance(answer, bool) or not isinstance(answer, (str, int, float)):
        raise AscentError("'answer' must be a string or a number")
    return completion, str(answer)


def _score_math(reward: Any, rows: list[tuple[str, str]]) -> list[dict[str, Any]]:
    completions = [c for c, _ in rows]
    scored = reward.score([""] * len(rows), completions, answer=[a for _, a in rows])
    return [{"reward": v, **d} for v, d in zip(scored.values, scored.details, strict=True)]


@reward_app.command("code")
def reward_code(input: InputOption = None, config: ConfigOption = None, set_: SetOption = None):
    """Judge programs in the sandbox. In: {"code", "language"?, "tests", "sample_tests"?,
    "time_limit_ms"?, "entry_point"?, "test_setup"?, "checker"?}; out: reward, status, passed,
    total, tests."""
    from ascent.rewards.code import CodeReward
    from ascent.rewards.sandbox import check_isolation

    reward_cfg, sandbox_cfg = load_sections(config, set_)
    check_isolation(sandbox_cfg)
    reward = CodeReward(reward_cfg.code, sandbox_cfg)
    default_language = reward_cfg.code.default_language
    try:
        _process(
            input,
            lambda obj: _code_row(obj, default_language),
            lambda tasks: [v.to_json() for v in reward.judge(tasks)],
        )
    finally:
        reward.close()


def _code_row(obj: dict[str, Any], default_language: str) -> Any:
    from ascent.rewards.code import language_name, make_task

    code = obj.get("code")
    if not isinstance(code, str):
        raise AscentError("'code' must be a string")
    if "tests" not in obj:
        raise AscentError("'tests' is missing")
    language = language_name(obj.get("language")) or default_language
    return make_task(
        code,
        language,
        obj["tests"],
        entry_point=obj.get("entry_point"),
        test_setup=obj.get("test_setup"),
        sample_tests=obj.get("sample_tests"),
        time_limit_ms=obj.get("time_limit_ms"),
        checker=obj.get("checker"),
        checker_language=obj.get("checker_language"),
    )


def _process(
    path: Path | None,
    parse: Callable[[dict[str, Any]], Any],
    score: Callable[[list[Any]], list[dict[str, Any]]],
) -> None:
    """Read JSONL, score valid rows in chunks, print one JSON line per input line, in order."""
    stream = _open_input(path)
    try:
        pending: list[tuple[int, Any, str | None]] = []
        for number, text in _lines(stream):
            try:
                obj = json.loads(text)
                if not isinstance(obj, dict):
                    raise AscentError("expected a JSON object")
                pending.append((number, parse(obj), None))
            except (json.JSONDecodeError, AscentError) as err:
                pending.append((number, None, _error_text(err)))
            if len(pending) >= CHUNK:
                _flush(pending, score)
                pending = []
        _flush(pending, score)
    finally:
        if stream is not sys.stdin:
            stream.close()


def _flush(pending: list[tuple[int, Any, str | None]], score: Callable[..., Any]) -> None:
    valid = [item for _, item, error in pending if error is None]
    results = iter(score(valid) if valid else [])
    for number, _, error in pending:
        out = {"line": number, "error": error} if error is not None else {"line": number}
        if error is None:
            out.update(next(results))
        sys.stdout.write(json.dumps(out) + "\n")
    sys.stdout.flush()


def _error_text(err: Exception) -> str:
    if isinstance(err, json.JSONDecodeError):
        return f"not valid JSON: {err.msg} (column {err.colno})"
    return str(err)


def _open_input(path: Path | None) -> TextIO:
    if path is None:
        return sys.stdin
    if not path.is_file():
        raise AscentError(f"{path}: input file not found")
    return path.open(encoding="utf-8", errors="replace")


def _lines(stream: TextIO) -> Iterator[tuple[int, str]]:
    for number, line in enumerate(stream, start=1):
        if line.strip():
            yield number, line


# -- sandbox run -----------------------------------------------------------------------------


@sandbox_app.command("run")
def sandbox_run(
    file: Annotated[Path, typer.Argument(help="Program source: .py (Python) or .cpp (C++).")],
    stdin: Annotated[
        Path | None, typer.Option("--stdin", help="File whose contents go to the program's stdin.")
    ] = None,
    time_limit_ms: Annotated[
        int | None, typer.Option("--time-limit-ms", help="CPU time limit (default: config).")
    ] = None,
    memory_mb: Annotated[
        int | None, typer.Option("--memory-mb", help="Memory limit (default: config).")
    ] = None,
    language: Annotated[
        str | None, typer.Option("--language", help="python or cpp (default: from the suffix).")
    ] = None,
    config: ConfigOption = None,
    set_: SetOption = None,
) -> None:
    """Run one program; prints one JSON object: status, exit_code, stdout, stderr, time_ms, ..."""
    from ascent.rewards.code import language_name
    from ascent.rewards.sandbox import Limits, run_program

    _, sandbox_cfg = load_sections(config, set_)
    if not file.is_file():
        raise AscentError(f"{file}: program file not found")
    lang = language_name(language) if language else SUFFIXES.get(file.suffix.lower())
    if lang is None:
        raise AscentError(f"{file}: cannot tell the language from the suffix; pass --language")
    for name, value in (("--time-limit-ms", time_limit_ms), ("--memory-mb", memory_mb)):
        if value is not None and value < 1:
            raise AscentError(f"{name} must be a positive integer (got {value})")
    if stdin is not None and not stdin.is_file():
        raise AscentError(f"{stdin}: stdin file not found")
    if memory_mb is not None:
        try:
            sandbox_cfg = SandboxSection.model_validate(
                {**sandbox_cfg.model_dump(), "memory_mb": memory_mb}
            )
        except ValidationError as err:
            raise AscentError(f"--memory-mb: {err.errors()[0]['msg']}") from None
    limits = Limits.for_run(sandbox_cfg, time_limit_ms)
    code = file.read_text(encoding="utf-8", errors="replace")
    data = stdin.read_text(encoding="utf-8", errors="replace") if stdin else ""
    result = run_program(code, lang, data, limits, sandbox_cfg)
    typer.echo(json.dumps(result.to_json()))

"""The problem set of an evaluation: where the file is, what format it is in, and the prompts.

Code formats are read by `ascent.data.code_problems`; math rows (`question`, `answer`, e.g.
GSM8K with its `#### 42` solutions) are read here. The format is detected from the first
row's fields unless `[eval] format` names it; every row must then be in that format.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

from ascent.config.evaluation import EvalSection
from ascent.data.bundled import PREFIX as BUNDLED_PREFIX
from ascent.data.bundled import bundled_path
from ascent.data.code_problems import (
    CODE_FORMATS,
    CodeProblem,
    detect_code_format,
    load_code_problems,
    read_jsonl,
)
from ascent.errors import AscentError, ConfigError
from ascent.evaluation.bands import Skipped, in_bands, no_problem_in_bands

LANGUAGE_LABELS = {"python": "Python 3", "cpp": "C++17"}
STDIO_PROMPT = (
    "Solve the following competitive programming problem in {language}. The program reads "
    "standard input and writes standard output. Give the complete program in one ```{fence} "
    "code block.\n\n{problem}"
)
FUNCTION_PROMPT = (
    "Complete the following Python function. Give the whole function, with the imports it "
    "needs, in one ```python code block.\n\n```python\n{problem}```"
)
MATH_PROMPT = "{problem}\n\nPlease reason step by step, and put your final answer within \\boxed{}."


@dataclass(frozen=True)
class MathProblem:
    """A question whose final answer is checked for mathematical equivalence with `answer`."""

    id: str
    question: str
    answer: str  # gold: plain, LaTeX, or a GSM8K solution ending in "#### 42"
    rating: int | None = None
    difficulty: str | None = None


Problem = CodeProblem | MathProblem


@dataclass(frozen=True)
class ProblemSet:
    path: Path
    format: str  # code, humaneval, code_contests or math
    problems: list[Problem]

    @property
    def kind(self) -> Literal["code", "math"]:
        return "math" if self.format == "math" else "code"


def resolve_problems_path(problems: str, config_source: str | None) -> Path:
    """`[eval] problems` as a path: a bundled set (`ascent:NAME`), else as written (from the
    current directory), else beside the config file; refused with the places tried named."""
    if problems.startswith(BUNDLED_PREFIX):
        try:
            return bundled_path(problems)
        except AscentError as err:
            raise ConfigError(f"[eval] problems: {err}") from None
    if not problems:
        raise ConfigError(
            "[eval] problems is not set; name a JSONL problem file, e.g. problems = "
            '"ascent:code_contests_sample" (bundled) or a path'
        )
    try:
        path = Path(problems).expanduser()
    except RuntimeError:  # ~name of a user this machine does not have
        raise ConfigError(
            f"[eval] problems: {problems}: no home directory for '{problems.split('/')[0]}'; "
            "write the path out"
        ) from None
    tried = [path]
    if not path.is_absolute() and config_source and _is_file(Path(config_source)):
        tried.append(Path(config_source).parent / path)
    for candidate in tried:
        if _is_file(candidate):
            return candidate
    where = " or ".join(str(p) for p in tried)
    raise ConfigError(f"[eval] problems: no file at {where}; check the path")


def _is_file(path: Path) -> bool:
    try:
        return path.is_file()
    except OSError:  # e.g. a file name too long: no such file either
        return False


def load_problem_set(path: Path, fmt: str = "auto", limit: int = 0) -> ProblemSet:
    """The first `limit` problems (0: all) of the file, in the given or detected format."""
    if fmt == "auto":
        fmt = _detect(path)
    if fmt == "math":
        return ProblemSet(path, fmt, list(_load_math(path, limit)))
    return ProblemSet(path, fmt, list(load_code_problems(path, fmt, limit)))


def select_problems(path: Path, cfg: EvalSection) -> tuple[ProblemSet, Skipped]:
    """The problems `[eval]` evaluates: the first `limit` (0: all) of the file; with
    only_bands, the first `limit` of those rated inside a rating band (the others counted)."""
    if not cfg.only_bands:
        return load_problem_set(path, cfg.format, cfg.limit), Skipped()
    everything = load_problem_set(path, cfg.format)
    kept, skipped = in_bands(everything.problems, cfg.rating_bands)
    if not kept:
        raise no_problem_in_bands(str(path), skipped)
    return replace(everything, problems=kept[: cfg.limit or None]), skipped


def _detect(path: Path) -> str:
    for _, row in read_jsonl(path):
        if {"question", "answer"} <= row.keys():
            return "math"
        return detect_code_format(row) or "code"  # "code" reports the missing fields
    raise AscentError(f"{path}: no problems in the file")


def _load_math(path: Path, limit: int) -> list[MathProblem]:
    problems: list[MathProblem] = []
    for number, row in read_jsonl(path):
        if limit and len(problems) >= limit:
            break
        question, answer = row.get("question"), row.get("answer")
        if not isinstance(question, str) or not question.strip():
            raise AscentError(f"{path}:{number}: 'question' must be a non-empty string (math)")
        if answer is None or isinstance(answer, (dict, list)) or str(answer).strip() == "":
            raise AscentError(f"{path}:{number}: 'answer' must be a number or a string (math)")
        rating = row.get("rating")
        problems.append(
            MathProblem(
                id=str(row.get("id") or f"{path.name.split('.')[0]}:{number}"),
                question=question,
                answer=str(answer),
                rating=int(rating) if _finite(rating) else None,
                difficulty=str(row["difficulty"]) if row.get("difficulty") else None,
            )
        )
    if not problems:
        raise AscentError(f"{path}: no problems in the file")
    return problems


def _finite(value: Any) -> bool:
    """A number that can be a rating: an int or a finite float (JSON allows NaN, Infinity)."""
    return isinstance(value, int) or (isinstance(value, float) and math.isfinite(value))


def check_language(problem_set: ProblemSet, cfg: EvalSection) -> None:
    """Refuse settings the problem set cannot honour."""
    has_function = any(isinstance(p, CodeProblem) and p.is_function for p in problem_set.problems)
    if has_function and cfg.language != "python":
        raise ConfigError(
            f"[eval] language: {problem_set.path.name} has call-a-function problems, which are "
            f'judged in Python; set language = "python"'
        )
    if problem_set.kind == "math" and cfg.explicitly_set("language"):
        raise ConfigError("[eval] language: math problems are not programs; remove the key")


@dataclass(frozen=True)
class Prompt:
    text: str
    truncated: bool  # the statement was cut to max_problem_chars


def render_prompt(problem: Problem, cfg: EvalSection) -> Prompt:
    """The prompt for one problem: `[eval] prompt_template`, else the built-in one."""
    statement = problem.question if isinstance(problem, MathProblem) else problem.statement
    cut = cfg.max_problem_chars
    truncated = bool(cut) and len(statement) > cut
    if truncated:
        statement = statement[:cut]
    template = cfg.prompt_template or _builtin_template(problem, cfg.language)
    text = template.replace("{language}", LANGUAGE_LABELS[cfg.language])
    return Prompt(text.replace("{problem}", statement), truncated)


def _builtin_template(problem: Problem, language: str) -> str:
    if isinstance(problem, MathProblem):
        return MATH_PROMPT
    if problem.is_function:
        return FUNCTION_PROMPT
    return STDIO_PROMPT.replace("{fence}", language)


def describe(problem: Problem) -> dict[str, Any]:
    """The fields of a problem that results and transcripts name it by."""
    out: dict[str, Any] = {"id": problem.id}
    if isinstance(problem, CodeProblem) and problem.name and problem.name != problem.id:
        out["name"] = problem.name
    out["rating"] = problem.rating
    out["difficulty"] = problem.difficulty
    return out


__all__ = [
    "CODE_FORMATS",
    "MathProblem",
    "Problem",
    "ProblemSet",
    "Prompt",
    "check_language",
    "describe",
    "load_problem_set",
    "render_prompt",
    "resolve_problems_path",
    "select_problems",
]

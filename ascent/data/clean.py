"""SRPO's data cleaning: strip links from problem text, drop problems RL cannot learn from.

A row becomes an `Item`: its kind (math, or code in one of `code_problems.CODE_FORMATS`), the
column holding its text, and that text with links removed and whitespace normalised. The
answer, tests and reference solution are never rewritten. Each drop reason is a filter in
`FILTERS`, all with one signature, `filter(items, ctx) -> [detail or None]`: a detail says
why that item is dropped. `[clean] reasons` chooses the filters; they run in `DROP_REASONS`
order, each on the items no earlier filter dropped and only on the kinds it is registered for
(SRPO drops figure, table, proof and multi-part problems from math, and file, network and
environment needs from code). Links and patterns live in `ascent.data.clean_rules`.
"""

from __future__ import annotations

import ast
import math
import re
import sys
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from ascent.config.clean import CleanSection
from ascent.config.data import ColumnsSection
from ascent.config.rewards import CodeRewardSection, SandboxSection
from ascent.data import clean_rules as rules
from ascent.data.clean_rules import clean_text
from ascent.data.code_problems import MATH_PROMPTS, NORMALISERS, CodeProblem, code_row
from ascent.errors import AscentError
from ascent.names import DROP_REASONS
from ascent.registry import Registry

TEXT_COLUMNS = {"code": "statement", "humaneval": "prompt", "code_contests": "content"}


@dataclass
class Item:
    """One row of the input: what the filters read, and the row to write back."""

    number: int  # row number (JSONL: line number)
    row: dict[str, Any]
    kind: str  # "math" or "code"
    column: str  # the column holding the problem's text
    raw: str  # that text as read
    text: str  # that text cleaned
    answer: Any = None  # math: the answer column's value, never rewritten
    problem: CodeProblem | None = None  # code: the row in ascent's code schema
    language: str | None = None  # code: the reference solution's language

    def cleaned_row(self) -> dict[str, Any]:
        return {**self.row, self.column: self.text}

    @cached_property
    def sources(self) -> list[str]:
        """The Python code of a code item: imports in its statement, and its reference
        solution (parsed once, read by several filters)."""
        assert self.problem is not None
        code = [self.text] if self.problem.is_function else [rules.statement_code(self.text)]
        reference = self.problem.reference_solution
        return code + ([reference] if reference and self.language == "python" else [])

    @cached_property
    def imports(self) -> set[str]:
        return set().union(*(python_imports(code) for code in self.sources))


def make_item(
    number: int,
    row: dict[str, Any],
    *,
    kind: str,
    columns: ColumnsSection | None,
    where: str,
    default_language: str,
) -> Item:
    """`row` as an Item; `kind` auto, math or code; `columns`: [data.columns] (None: look for
    question / problem / prompt and answer). A row that is not the kind asked for is an error."""
    found = code_row(row, kind, where, f"row {number}")
    if found is not None:
        return _code_item(number, row, *found, where, default_language)
    names = MATH_PROMPTS if columns is None else (columns.prompt,)
    column = next((name for name in names if name in row), None)
    answer_column = "answer" if columns is None else columns.answer
    if column is None or answer_column not in row:
        missing = "/".join(names) if column is None else answer_column
        have = ", ".join(sorted(row)[:10]) or "none"
        raise AscentError(
            f"{where}: no column {missing} in this math row (the row has: {have}); name the "
            "columns in [data.columns] prompt and answer of a --config file, or pass --kind"
        )
    raw = row[column]
    raw = "" if raw is None else raw if isinstance(raw, str) else str(raw)
    return Item(number, row, "math", column, raw, clean_text(raw), answer=row[answer_column])


def _code_item(
    number: int,
    row: dict[str, Any],
    fmt: str,
    problem: CodeProblem,
    where: str,
    default_language: str,
) -> Item:
    from ascent.rewards.code import language_name

    language = language_name(row.get("language"), f"{where}: language") or default_language
    column = TEXT_COLUMNS[fmt]
    raw = row[column]
    text = clean_text(raw, "code" if problem.is_function else "statement")
    if problem.is_function and text != raw and not _compiles(text) and _compiles(raw):
        text = raw  # the statement is code: never clean it into a syntax error
    if fmt == "code_contests" and text != raw:
        cleaned = NORMALISERS[fmt]({**row, column: text}, f"row {number}")
        if cleaned.sample_tests != problem.sample_tests:  # samples are found in the statement
            text = clean_text(raw, "code")
    return Item(number, row, "code", column, raw, text, problem=problem, language=language)


def _compiles(code: str) -> bool:
    try:
        compile(code, "<statement>", "exec")
    except (SyntaxError, ValueError):
        return False
    return True


# -- filters ---------------------------------------------------------------------------------


class ReferenceJudge:
    """Judges reference solutions in the code reward's sandbox pool, started on first use."""

    def __init__(self, code_cfg: CodeRewardSection, sandbox_cfg: SandboxSection) -> None:
        self.code_cfg, self.sandbox_cfg = code_cfg, sandbox_cfg
        self._reward: Any = None

    def __call__(self, tasks: list[Any]) -> list[Any]:
        if self._reward is None:
            from ascent.rewards.code import CodeReward
            from ascent.rewards.sandbox import check_isolation

            try:
                check_isolation(self.sandbox_cfg)
            except AscentError as err:
                raise AscentError(
                    f"{err}; or leave reference_fails out of [clean] reasons to keep reference "
                    "solutions unjudged"
                ) from None
            self._reward = CodeReward(self.code_cfg, self.sandbox_cfg)
        return self._reward.judge(tasks)

    def close(self) -> None:
        if self._reward is not None:
            self._reward.close()


@dataclass
class FilterContext:
    """What the filters read besides the items: the settings, and the tools they share."""

    settings: CleanSection
    math_timeout_s: float  # [reward.math] timeout_s
    judge: Callable[[list[Any]], list[Any]] | None = None  # CodeTasks -> CodeVerdicts

    def __post_init__(self) -> None:
        extra = self.settings.extra_patterns
        self.patterns = {
            reason: [
                *rules.PATTERNS.get(reason, ()),
                *(re.compile(p, re.I | re.M) for p in extra.get(reason, ())),
            ]
            for reason in DROP_REASONS
        }


Filter = Callable[[Sequence[Item], FilterContext], list[str | None]]
FILTERS: Registry[Filter] = Registry("drop reason")


def _matched(text: str, patterns: Sequence[re.Pattern[str]]) -> str | None:
    for pattern in patterns:
        found = pattern.search(text)
        if found:
            return f"matches {' '.join(found.group(0).split())[:60]!r}"
    return None


@FILTERS.register("empty", kinds=("math", "code"))
def empty(items: Sequence[Item], ctx: FilterContext) -> list[str | None]:
    """No text left once the links are gone (or none to begin with)."""
    return [None if re.search(r"\w", item.text) else "no problem text" for item in items]


@FILTERS.register("needs_figure", kinds=("math",))
def needs_figure(items: Sequence[Item], ctx: FilterContext) -> list[str | None]:
    """Refers to a figure, diagram or image it cannot show ([asy], <image>, ![...](...))."""
    patterns = ctx.patterns["needs_figure"]
    return [_matched(it.text, patterns) or _matched(it.raw, rules.RAW_FIGURE) for it in items]


@FILTERS.register("needs_table", kinds=("math",))
def needs_table(items: Sequence[Item], ctx: FilterContext) -> list[str | None]:
    """Refers to a table ("the table below"), or holds a markdown or LaTeX table."""
    return [_matched(item.text, ctx.patterns["needs_table"]) for item in items]


@FILTERS.register("proof", kinds=("math",))
def proof(items: Sequence[Item], ctx: FilterContext) -> list[str | None]:
    """Asks for a proof ("prove that", "show that") and its answer holds no number."""
    out = []
    for item in items:
        hit = _matched(item.text, ctx.patterns["proof"])
        if hit and not ctx.settings.proof_with_number and has_number(item.answer):
            hit = None
        out.append(hit)
    return out


@FILTERS.register("multi_question", kinds=("math",))
def multi_question(items: Sequence[Item], ctx: FilterContext) -> list[str | None]:
    """Sub-questions ((a) ... (b) ..., 1. ... 2. ...) or several different question sentences."""
    least = ctx.settings.question_sentences
    patterns = ctx.patterns["multi_question"]
    return [rules.several_questions(it.text, least) or _matched(it.text, patterns) for it in items]


def _code_check(reason: str, check: Callable[[Item, CleanSection], str | None]) -> Filter:
    def run(items: Sequence[Item], ctx: FilterContext) -> list[str | None]:
        patterns = ctx.patterns[reason]
        return [_matched(it.text, patterns) or check(it, ctx.settings) for it in items]

    run.__doc__ = f"{reason}: the statement's words, or the code of the statement and reference."
    return run


def _file_io(item: Item, settings: CleanSection) -> str | None:
    for code in item.sources:
        if rules.OPENS_FILE.search(code):
            return "its code opens a file"
    return None


def _network(item: Item, settings: CleanSection) -> str | None:
    used = sorted(item.imports & rules.NETWORK_MODULES)
    return f"its code imports {', '.join(used)}" if used else None


def _environment(item: Item, settings: CleanSection) -> str | None:
    imported = item.imports - set(settings.allowed_modules)
    needs = sorted(m for m in imported if m in rules.ENVIRONMENT_MODULES or not _stdlib(m))
    if needs:
        return f"its code imports {', '.join(needs)} (not in Python's standard library)"
    if any(rules.READS_ENVIRONMENT.search(code) for code in item.sources):
        return "its code reads environment variables"
    return None


def _stdlib(module: str) -> bool:
    return module in sys.stdlib_module_names or module == "__future__"


FILTERS.register("file_io", kinds=("code",))(_code_check("file_io", _file_io))
FILTERS.register("network", kinds=("code",))(_code_check("network", _network))
FILTERS.register("environment", kinds=("code",))(_code_check("environment", _environment))


@FILTERS.register("bad_answer", kinds=("math",))
def bad_answer(items: Sequence[Item], ctx: FilterContext) -> list[str | None]:
    """An answer the math reward cannot verify against: empty, a placeholder, unparsable."""
    return [answer_problem(item.answer, ctx.math_timeout_s) for item in items]


@FILTERS.register("reference_fails", kinds=("code",))
def reference_fails(items: Sequence[Item], ctx: FilterContext) -> list[str | None]:
    """The reference solution fails its own tests in the sandbox (rows without one are kept)."""
    from ascent.rewards.code import make_task

    out: list[str | None] = [None] * len(items)
    todo: list[tuple[int, Any]] = []
    for i, item in enumerate(items):
        problem = item.problem
        if problem is None or not (problem.reference_solution or "").strip():
            continue
        try:
            task = make_task(problem.reference_solution, item.language, **problem.reward_columns())
        except AscentError as err:
            out[i] = f"its tests cannot run the reference solution: {err}"
            continue
        todo.append((i, task))
    if todo:
        if ctx.judge is None:
            raise AscentError("reference_fails needs the sandbox, and none was given")
        for (i, _), verdict in zip(todo, ctx.judge([t for _, t in todo]), strict=True):
            out[i] = _failure(verdict)
    return out


def _failure(verdict: Any) -> str | None:
    if verdict.status == "ok" and verdict.passed == verdict.total:
        return None
    first = next((t for t in verdict.tests if t.status != "ok"), None)
    where = f" ({first.kind} test: {first.detail[:120]})" if first and first.detail else ""
    detail = f"; {verdict.detail[:200]}" if verdict.detail else ""
    return f"{verdict.status}, passed {verdict.passed} of {verdict.total} tests{where}{detail}"


def apply_filters(items: Sequence[Item], ctx: FilterContext) -> dict[int, tuple[str, str]]:
    """{index in items: (reason, detail)} of the dropped items; the first reason wins."""
    dropped: dict[int, tuple[str, str]] = {}
    for reason in (r for r in DROP_REASONS if r in ctx.settings.reasons):
        kinds = FILTERS.meta(reason)["kinds"]
        todo = [i for i, item in enumerate(items) if i not in dropped and item.kind in kinds]
        if not todo:
            continue
        details = FILTERS.get(reason)([items[i] for i in todo], ctx)
        dropped |= {i: (reason, d) for i, d in zip(todo, details, strict=True) if d is not None}
    return dropped


# -- answers and code ----------------------------------------------------------------------------


def has_number(answer: Any) -> bool:
    """The gold answer names a value: a digit, or a constant such as \\pi or \\sqrt{.}."""
    from ascent.rewards.math import parse_gold

    if isinstance(answer, bool) or not isinstance(answer, (str, int, float)):
        return False
    return bool(rules.NUMBER.search(parse_gold(answer)))


def answer_problem(answer: Any, timeout_s: float) -> str | None:
    """Why the math reward could not check completions against this gold answer, or None.

    The gold is read as the reward reads it (`parse_gold`: GSM8K's `#### 42`, a boxed answer,
    or as written), then parsed by math-verify as its worker does; a parse that finds no value
    (only the raw string back) is unparsable. Words without a number ("no solution", "x is
    even") are refused first: math-verify would read them as a product of letters. math-verify
    runs in this process; its own time limit works on the main thread only (elsewhere the
    parse runs without one).
    """
    from ascent.rewards.math import compare_numbers, parse_gold

    if answer is None or (isinstance(answer, str) and not answer.strip()):
        return "empty answer"
    if isinstance(answer, bool) or not isinstance(answer, (str, int, float)):
        return f"the answer is a {type(answer).__name__}, not text or a number"
    gold = parse_gold(answer)
    if not gold:
        return "empty answer"
    if compare_numbers(gold, gold) == "equal":  # a plain number: nothing more to parse
        return None
    if rules.PLACEHOLDER.fullmatch(gold):
        return f"placeholder answer {gold[:60]!r}"
    if not re.search(r"\d", gold) and len(rules.PROSE_WORD.findall(gold)) >= 2:
        return f"prose, not a value: {gold[:60]!r}"  # math-verify reads it as a product
    return _math_verify_problem(gold, timeout_s)


def _math_verify_problem(gold: str, timeout_s: float) -> str | None:
    from math_verify import parse
    from math_verify.errors import TimeoutException

    from ascent.rewards.math_worker import wrap_latex

    main = threading.current_thread() is threading.main_thread()
    seconds = max(1, math.ceil(timeout_s)) if main else None
    try:
        parsed = parse(wrap_latex(gold), parsing_timeout=seconds, raise_on_error=True)
    except TimeoutException:
        return f"math-verify did not parse it within {seconds} s"
    except Exception as err:  # a sympy failure on one odd answer: that answer is unusable
        return f"math-verify cannot parse it ({type(err).__name__})"
    if not any(not isinstance(value, str) for value in parsed):
        return f"math-verify finds no value in {gold[:60]!r}"
    return None


def python_imports(code: str) -> set[str]:
    """Top-level modules a piece of Python imports (by its syntax tree, else line by line)."""
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError):
        return {m.split(".")[0] for m in rules.import_lines(code)}
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module.split(".")[0])
    return found


__all__ = [
    "FILTERS",
    "TEXT_COLUMNS",
    "FilterContext",
    "Item",
    "ReferenceJudge",
    "answer_problem",
    "apply_filters",
    "clean_text",
    "has_number",
    "make_item",
    "python_imports",
]

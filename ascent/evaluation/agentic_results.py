"""What an agentic evaluation found: per problem, per band, per role; and the files it is in.

    OUTPUT_DIR/eval_results.json   settings; per band: solved at the first attempt and after
                                   feedback; per role: what it produced; per problem: the
                                   outcome and each turn's output (text cut to TEXT_CHARS)
    OUTPUT_DIR/transcripts.jsonl   per problem: the whole episode (every turn's full text, the
                                   transcript the roles read, the final verdict)

"First attempt" is the program of the episode's first solver turn, judged on the hidden tests
by the same judge as the submitted program (a first solver turn with no program fails).
"After feedback" is the program the episode submitted after up to max_turns attempts
(`ascent.rollout.agentic.episode`). A problem solved after feedback but not at the first
attempt was fixed by the feedback; one solved at the first attempt but not by the submitted
program was lost (the episode submitted a later program that passed more visible tests).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ascent.config.agentic import ROLES
from ascent.data.code_problems import CodeProblem
from ascent.evaluation.bands import Band, label_note, rows_by_band
from ascent.evaluation.problem_set import describe
from ascent.evaluation.results import write_files
from ascent.rollout.agentic.transcript import Episode, Turn

TEXT_CHARS = 300  # of each turn's text in eval_results.json (transcripts.jsonl has it whole)
PRODUCT = {  # what a role's readable turns are called in the role table
    "hypothesis": "hypotheses",
    "solver": "programs",
    "testgen": "test_sets",
    "summarizer": "summaries",
}


@dataclass(frozen=True)
class FirstAttempt:
    """The verdict on the program of the episode's first solver turn."""

    passed: bool
    status: str  # the judge's status, or "no program" / "no solver turn"
    detail: dict[str, Any] = field(default_factory=dict)  # tests passed and total

    def to_json(self) -> dict[str, Any]:
        return {"passed": self.passed, "status": self.status, **self.detail}


@dataclass(frozen=True)
class EpisodeResult:
    """One problem's episode and its two verdicts."""

    problem: CodeProblem
    band: Band
    episode: Episode
    first: FirstAttempt
    truncated: bool  # the problem text roles read was cut to max_problem_chars
    api_errors: list[tuple[str, str]]  # (role, diagnosis) of each failed API request

    @property
    def passed(self) -> bool:
        """The submitted program passed every hidden test."""
        return self.episode.solved

    @property
    def fixed(self) -> bool:
        return self.passed and not self.first.passed

    @property
    def lost(self) -> bool:
        return self.first.passed and not self.passed

    @property
    def unjudged(self) -> bool:
        """A sandbox failure left the submitted program without a verdict."""
        return self.episode.delayed is None

    def to_json(self) -> dict[str, Any]:
        ep = self.episode
        out = describe(self.problem) | {"band": self.band.label}
        out |= {
            "passed": self.passed,
            "passed_first_attempt": self.first.passed,
            "fixed_by_feedback": self.fixed,
            "attempts": ep.attempts,
            "summaries": ep.summaries,
            "stop": ep.stop,
            "final": ep.detail,
            "first_attempt": self.first.to_json(),
        }
        if self.truncated:
            out["truncated_problem"] = True
        if self.api_errors:
            out["api_errors"] = [f"{role}: {error}" for role, error in self.api_errors]
        return out | {"turns": [_clipped(t) for t in ep.turns]}

    def transcript(self) -> dict[str, Any]:
        out = describe(self.problem) | {"band": self.band.label, "passed": self.passed}
        out |= {"first_attempt": self.first.to_json(), "truncated_problem": self.truncated}
        return out | {"episode": self.episode.to_json()}


def _clipped(turn: Turn) -> dict[str, Any]:
    out = turn.to_json()
    if len(turn.text) > TEXT_CHARS:
        out |= {"text": turn.text[:TEXT_CHARS] + "...", "text_chars": len(turn.text)}
    return out


@dataclass
class AgenticRun:
    """A finished agentic evaluation: what the tables show and where the files are."""

    results_path: Path
    header: dict[str, Any]
    rows: list[dict[str, Any]]  # one per band, then "all"
    roles: list[dict[str, Any]]  # one per role
    notes: list[str]
    results: list[EpisodeResult] = field(repr=False)
    usage_lines: list[str] = field(default_factory=list)

    @property
    def all_failed(self) -> bool:
        """Every API turn of every episode was a failed request: nothing was evaluated of an
        API-served model (scripted or local turns beside them do not count)."""
        turns = sum(t.source == "api" for r in self.results for t in r.episode.turns)
        return turns > 0 and turns == sum(len(r.api_errors) for r in self.results)

    @property
    def first_error(self) -> str:
        return next((f"{e[0]}: {e[1]}" for r in self.results for e in r.api_errors), "no answers")


def band_rows(results: Sequence[EpisodeResult]) -> list[dict[str, Any]]:
    """One row per band in table order, then the row for all problems."""
    return rows_by_band(results, lambda r: r.band, _row)


def _row(label: str, kind: str, results: list[EpisodeResult]) -> dict[str, Any]:
    n = len(results)
    first, final = sum(r.first.passed for r in results), sum(r.passed for r in results)
    return {
        "band": label,
        "kind": kind,
        "problems": n,
        "solved_first_attempt": first,
        "solved": final,
        "pass_first_attempt": first / n if n else None,
        "pass": final / n if n else None,
        "fixed_by_feedback": sum(r.fixed for r in results),
        "lost_after_feedback": sum(r.lost for r in results),
        "mean_attempts": sum(r.episode.attempts for r in results) / n if n else None,
        "failed_requests": sum(len(r.api_errors) for r in results),
        "unjudged": sum(r.unjudged for r in results),
    }


def role_rows(results: Sequence[EpisodeResult], roles: dict[str, dict[str, Any]]) -> list[dict]:
    """Per role: who played it, its turns at the first attempt and after feedback, the turns
    that failed (API) or could not be read, and what it produced."""
    failed = Counter(role for r in results for role, _ in r.api_errors)
    rows = []
    for role in ROLES:
        turns = [t for r in results for t in r.episode.turns if t.role == role]
        readable = [t for t in turns if t.parsed]
        row: dict[str, Any] = {"role": role, **roles[role]}
        row |= {
            "turns_first_attempt": sum(t.attempt == 0 for t in turns),
            "turns_after_feedback": sum(t.attempt > 0 for t in turns),
            "failed_requests": failed[role],
            "unreadable": max(0, len(turns) - len(readable) - failed[role]),
            PRODUCT[role]: len(readable),
        }
        if role == "solver":
            row["programs_first_attempt"] = sum(t.attempt == 0 for t in readable)
            row["programs_after_feedback"] = sum(t.attempt > 0 for t in readable)
        if role == "testgen":
            row["tests_proposed"] = sum(t.tests_proposed for t in turns)
            row["tests_confirmed"] = sum(t.tests_confirmed for t in turns)
        rows.append(row)
    return rows


def produced(row: dict[str, Any]) -> str:
    """A role's output in words, for the role table."""
    role = row["role"]
    if row["source"] == "off":
        return "-"
    if role == "solver":
        first, later = row["programs_first_attempt"], row["programs_after_feedback"]
        return f"{row['programs']} programs ({first} 1st, {later} later)"
    if role == "testgen":
        return f"{row['tests_proposed']} tests ({row['tests_confirmed']} confirmed)"
    return f"{row[PRODUCT[role]]} {PRODUCT[role]}"


def notes(
    results: Sequence[EpisodeResult], roles: dict[str, dict[str, Any]], extra: Sequence[str]
) -> list[str]:
    """Footnotes the tables and results carry, so nobody misreads them."""
    out = [n for n in [label_note([r.band for r in results])] if n]
    truncated = sum(r.truncated for r in results)
    if truncated:
        out.append(f"{truncated} problem text(s) were cut to [eval] max_problem_chars")
    failed = sum(len(r.api_errors) for r in results)
    if failed:
        turns = sum(len(r.episode.turns) for r in results)
        out.append(
            f"{failed} of {turns} turns were API requests that failed after retries; those "
            "turns are empty and the episode went on without them"
        )
    unjudged = sum(r.unjudged for r in results)
    if unjudged:
        out.append(f"{unjudged} episode(s) unjudged after a sandbox failure, counted as unsolved")
    lost = sum(r.lost for r in results)
    if lost:
        out.append(
            f"{lost} problem(s) solved at the first attempt were not solved by the submitted "
            "program (a later attempt passed more of the visible tests)"
        )
    if roles["testgen"]["source"] != "off" and not any(
        r.problem.reference_solution for r in results
    ):
        out.append(
            "no problem has a reference solution, so no generated test could be confirmed; "
            "the test generator's tests do not reach the solver's verdicts"
        )
    return [*out, *extra]


def write_agentic_results(
    out_dir: Path,
    header: dict[str, Any],
    results: Sequence[EpisodeResult],
    roles: list[dict[str, Any]],
    all_notes: list[str],
) -> Path:
    """Write eval_results.json and transcripts.jsonl; return the results file's path."""
    rows = band_rows(results)
    data = header | {
        "overall": rows[-1],
        "bands": rows[:-1],
        "roles": roles,
        "notes": all_notes,
        "problems": [r.to_json() for r in results],
    }
    return write_files(out_dir, data, [r.transcript() for r in results])

"""What a test-time RL evaluation found: pass@1 without and with the updates, per problem,
per band and overall; and the files it is in.

    OUTPUT_DIR/eval_results.json   settings; per band and overall: pass@1 without and with
                                   test-time RL on the same problems, problems gained and
                                   lost, updates taken, problems without signal; per problem:
                                   both answers, their verdicts, each update's rewards
    OUTPUT_DIR/transcripts.jsonl   per problem: the same, with every attempt's text

"Without" is the greedy answer (the solver's first turn) of the weights under evaluation;
"with" is the greedy answer of the same prompt after the problem's updates (scope = "band":
after every update of its band so far). Both are judged on the hidden tests, which the updates
never read (`ascent.evaluation.test_time_scoring`). A problem "without signal" had every update
score its attempts alike (all right, all wrong the same way), so its weights never moved.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ascent.data.code_problems import CodeProblem
from ascent.evaluation.bands import Band, label_note, rows_by_band
from ascent.evaluation.problem_set import describe
from ascent.evaluation.results import write_files

if TYPE_CHECKING:
    from ascent.evaluation.test_time_rl import Adaptation  # imports torch and the trainer
    from ascent.evaluation.test_time_scoring import VisibleProblem


@dataclass(frozen=True)
class Answer:
    """A greedy answer and its verdict on the hidden tests."""

    text: str
    passed: bool
    status: str  # the judge's status, or "no program"
    detail: dict[str, Any] = field(default_factory=dict)  # tests passed and total
    unjudged: bool = False  # a sandbox failure left it without a verdict

    def to_json(self) -> dict[str, Any]:
        return {"text": self.text, "passed": self.passed, "status": self.status, **self.detail}


@dataclass(frozen=True)
class AdaptedResult:
    """One problem: its answers without and with test-time RL, and the updates between."""

    problem: CodeProblem  # the real problem (the answers were judged on its hidden tests)
    band: Band
    without: Answer
    with_rl: Answer
    adaptation: Adaptation
    visible: VisibleProblem  # what the updates could see

    @property
    def gained(self) -> bool:
        return self.with_rl.passed and not self.without.passed

    @property
    def lost(self) -> bool:
        return self.without.passed and not self.with_rl.passed

    @property
    def no_signal(self) -> bool:
        """Updates were tried and none was taken."""
        return self.visible.scorable and self.adaptation.no_signal

    def to_json(self, whole: bool = False) -> dict[str, Any]:
        """The problem's record; `whole`: every attempt and reward too (transcripts.jsonl)."""
        v = self.visible
        out = describe(self.problem) | {"band": self.band.label}
        out |= {
            "passed_without": self.without.passed,
            "passed_with": self.with_rl.passed,
            "answer_without": self.without.to_json(),
            "answer_with": self.with_rl.to_json(),
            "updates": self.adaptation.steps_taken,
            "no_signal": self.no_signal,
            "attempt_passed_visible": self.adaptation.found,
            "visible_tests": {
                "sample": len(v.code.sample_tests),
                "generated_proposed": v.proposed,
                "generated_confirmed": len(v.tests),
            },
        }
        if not v.scorable:
            out["no_visible_tests"] = True
        if v.note:
            out["testgen_note"] = v.note
        return out | {"update_log": [u.to_json(whole) for u in self.adaptation.updates]}


@dataclass
class AdaptedRun:
    """A finished test-time RL evaluation: what the table shows and where the files are."""

    results_path: Path
    header: dict[str, Any]
    rows: list[dict[str, Any]]  # one per band, then "all"
    notes: list[str]
    results: list[AdaptedResult] = field(repr=False)
    usage_lines: list[str] = field(default_factory=list)

    @property
    def all_failed(self) -> bool:
        """Never: the answers come from the local policy, so every problem is evaluated."""
        return False

    @property
    def first_error(self) -> str:
        return "no answers"


def band_rows(results: Sequence[AdaptedResult]) -> list[dict[str, Any]]:
    """One row per band in table order, then the row for all problems."""
    return rows_by_band(results, lambda r: r.band, _row)


def _row(label: str, kind: str, results: list[AdaptedResult]) -> dict[str, Any]:
    n = len(results)
    without = sum(r.without.passed for r in results)
    with_rl = sum(r.with_rl.passed for r in results)
    return {
        "band": label,
        "kind": kind,
        "problems": n,
        "solved_without": without,
        "solved_with": with_rl,
        "pass@1_without": without / n if n else None,
        "pass@1_with": with_rl / n if n else None,
        "gained": sum(r.gained for r in results),
        "lost": sum(r.lost for r in results),
        "updates": sum(r.adaptation.steps_taken for r in results),
        "updates_tried": sum(len(r.adaptation.updates) for r in results),
        "no_signal": sum(r.no_signal for r in results),
        "attempt_passed_visible": sum(r.adaptation.found for r in results),
        "no_visible_tests": sum(not r.visible.scorable for r in results),
        "unjudged": sum(r.without.unjudged or r.with_rl.unjudged for r in results),
    }


def notes(
    results: Sequence[AdaptedResult], scope: str, extra: Sequence[str], labels: str = "vote"
) -> list[str]:
    """Footnotes the table and the results carry, so nobody misreads them."""
    out = [n for n in [label_note([r.band for r in results])] if n]
    saw = (
        "sample tests and generated tests the reference solution confirmed (labels = oracle: a "
        "correct checker, which a contestant does not have; an upper bound, not a contest "
        "result)"
        if labels == "oracle"
        else "sample tests and the majority output of their own attempts (no reference "
        "solution, no expected output of a generated test)"
    )
    out.append(
        "pass@1 without / with: one greedy answer (the solver's first turn) from the weights "
        "under evaluation / after the test-time updates, both judged on the hidden tests; the "
        f"updates saw only {saw}"
    )
    if scope == "band":
        out.append(
            "scope = band: updates carried over from problem to problem within each band, in "
            "file order; the weights were restored between bands"
        )
    found = sum(r.adaptation.found for r in results)
    out.append(
        f"{found} of {len(results)} problem(s) had an attempt pass every visible test during "
        "the updates (attempt_passed_visible)"
    )
    blind = sum(not r.visible.scorable for r in results)
    if blind:
        out.append(
            f"{blind} problem(s) had nothing to score attempts on (no sample test and no "
            "confirmed generated test, or a call-a-function problem), so no attempt could be "
            "scored: no update, the answer with test-time RL is the one "
            "without"
        )
    testgen = sum(bool(r.visible.note) for r in results)
    if testgen:
        first = next(r.visible.note for r in results if r.visible.note)
        out.append(f"{testgen} problem(s) got no confirmed generated tests ({first})")
    errors = sum(u.why_not == "sandbox error" for r in results for u in r.adaptation.updates)
    if errors:
        out.append(f"{errors} update(s) skipped after a sandbox failure while scoring attempts")
    unjudged = sum(r.without.unjudged or r.with_rl.unjudged for r in results)
    if unjudged:
        out.append(f"{unjudged} problem(s) with an answer unjudged after a sandbox failure")
    return [*out, *extra]


def write_test_time_results(
    out_dir: Path, header: dict[str, Any], results: Sequence[AdaptedResult], all_notes: list[str]
) -> Path:
    """Write eval_results.json and transcripts.jsonl; return the results file's path."""
    rows = band_rows(results)
    data = header | {
        "overall": rows[-1],
        "bands": rows[:-1],
        "notes": all_notes,
        "problems": [r.to_json() for r in results],
    }
    return write_files(out_dir, data, [r.to_json(whole=True) for r in results])

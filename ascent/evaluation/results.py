"""What an evaluation found, per problem and per band, and the files it is saved in.

    OUTPUT_DIR/eval_results.json   settings, overall and per-band pass@k, one entry per problem
    OUTPUT_DIR/transcripts.jsonl   per problem: the prompt, every completion, the program that
                                   ran and each test's status (or the math checker's verdict)

A sample whose request failed (after its retries) counts as a wrong sample: the problem stays
in the denominator, and the results say how many requests failed and why.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ascent.evaluation.bands import Band, label_note, rows_by_band
from ascent.evaluation.passk import mean_pass_at_k, pass_at_k
from ascent.evaluation.policy import Sample
from ascent.evaluation.problem_set import Problem, Prompt, describe
from ascent.evaluation.scoring import Judged
from ascent.rules import LLMConfig

RESULTS_FILE = "eval_results.json"
TRANSCRIPTS_FILE = "transcripts.jsonl"


@dataclass(frozen=True)
class ProblemResult:
    """One problem's samples and their verdicts."""

    problem: Problem
    prompt: Prompt
    band: Band
    samples: list[Sample]
    judged: list[Judged]

    @property
    def n(self) -> int:
        return len(self.samples)

    @property
    def correct(self) -> int:
        return sum(j.passed for j in self.judged)

    @property
    def errors(self) -> list[str]:
        """The distinct diagnoses of this problem's failed requests."""
        return list(dict.fromkeys(s.error for s in self.samples if s.error is not None))

    @property
    def failed_requests(self) -> int:
        return sum(s.error is not None for s in self.samples)

    def to_json(self, pass_k: Sequence[int]) -> dict[str, Any]:
        out = describe(self.problem) | {"band": self.band.label, "n": self.n}
        out["correct"] = self.correct
        out |= {f"pass@{k}": pass_at_k(self.n, self.correct, k) for k in pass_k}
        out["statuses"] = dict(Counter(j.status for j in self.judged))
        if self.prompt.truncated:
            out["truncated_prompt"] = True
        if self.errors:
            out["failed_requests"] = self.failed_requests
            out["errors"] = self.errors
        return out

    def transcript(self) -> dict[str, Any]:
        samples = [
            s.to_json() | j.to_json() for s, j in zip(self.samples, self.judged, strict=True)
        ]
        out = describe(self.problem) | {"prompt": self.prompt.text}
        if self.prompt.truncated:
            out["truncated_prompt"] = True
        return out | {"samples": samples}


def band_rows(results: Sequence[ProblemResult], pass_k: Sequence[int]) -> list[dict[str, Any]]:
    """One row per band in table order, then the row for all problems."""
    return rows_by_band(
        results, lambda r: r.band, lambda label, kind, rs: _row(label, kind, rs, pass_k)
    )


def _row(label: str, kind: str, results: list[ProblemResult], pass_k: Sequence[int]):
    counts = [(r.n, r.correct) for r in results]
    row: dict[str, Any] = {"band": label, "kind": kind, "problems": len(results)}
    row["solved"] = sum(c > 0 for _, c in counts)
    row |= {f"pass@{k}": mean_pass_at_k(counts, k) for k in pass_k}
    row["failed_requests"] = sum(r.failed_requests for r in results)
    return row


def notes(results: Sequence[ProblemResult]) -> list[str]:
    """Footnotes the table and results carry, so nobody misreads them."""
    out = []
    label = label_note([r.band for r in results])
    if label:
        out.append(label)
    truncated = sum(r.prompt.truncated for r in results)
    if truncated:
        out.append(f"{truncated} problem statement(s) were cut to [eval] max_problem_chars")
    failed = sum(r.failed_requests for r in results)
    if failed:
        total = sum(r.n for r in results)
        out.append(f"{failed} of {total} requests failed after retries and count as wrong")
    return out


def write_results(
    out_dir: Path,
    header: dict[str, Any],
    results: Sequence[ProblemResult],
    pass_k: Sequence[int],
    extra_notes: Sequence[str] = (),
) -> Path:
    """Write eval_results.json and transcripts.jsonl; return the results file's path."""
    rows = band_rows(results, pass_k)
    data = header | {
        "overall": rows[-1],
        "bands": rows[:-1],
        "notes": [*notes(results), *extra_notes],
        "problems": [r.to_json(pass_k) for r in results],
    }
    return write_files(out_dir, data, [r.transcript() for r in results])


def write_files(out_dir: Path, data: dict[str, Any], transcripts: Sequence[dict[str, Any]]) -> Path:
    """eval_results.json (`data`) and transcripts.jsonl (one line each); the results path."""
    out_dir.mkdir(parents=True, exist_ok=True)
    with open(out_dir / TRANSCRIPTS_FILE, "w", encoding="utf-8") as fh:
        for transcript in transcripts:
            fh.write(json.dumps(transcript, ensure_ascii=False) + "\n")
    path = out_dir / RESULTS_FILE
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    os.replace(tmp, path)  # readers see the old results or the new, never half
    return path


def output_dir(cfg: LLMConfig, run_dir: Path | None, problems: Path) -> Path:
    """`[eval] output_dir`, else RUN_DIR/eval/<problem file stem>."""
    if cfg.eval.output_dir:
        return Path(cfg.eval.output_dir)
    base = run_dir if run_dir is not None else Path(cfg.run.output_dir) / cfg.run.name
    return base / "eval" / problems.name.split(".")[0]

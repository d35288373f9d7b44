"""`ascent data grade IN --out OUT --policy CONFIG_OR_RUN_DIR [--k K]`: difficulty from a shell.

It samples K answers per problem from the config's policy and writes IN's rows to OUT with
`pass_rate` and `difficulty` (easy / medium / hard by the [grade] thresholds), for `[data]
difficulty` to train on chosen buckets. The sampling and judging are `ascent.evaluation.grade`'s;
the last line is {"graded": N, "easy": n, "medium": n, "hard": n, "k": K}. It reads and writes
files as `ascent data clean` does (whole or not at all).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from ascent.data.bundled import resolve_data_path
from ascent.data.commands import JsonlOutput, numbered_rows
from ascent.errors import AscentError
from ascent.evaluation.grade import grade_rows, grading_config, print_grade_report


def grade(
    input: Annotated[
        str,
        typer.Argument(
            metavar="IN",
            help="Problems: .jsonl / .jsonl.gz, .parquet, a datasets.save_to_disk directory, or "
            "a bundled set (ascent:gsm8k_test).",
        ),
    ],
    out: Annotated[
        Path,
        typer.Option(
            "--out", metavar="OUT", help="IN's rows with pass_rate and difficulty added (.jsonl)."
        ),
    ],
    policy: Annotated[
        Path,
        typer.Option(
            "--policy",
            metavar="CONFIG_OR_RUN_DIR",
            help="A TOML config (its [eval] policy: [model] locally, or an API role) or a run "
            "directory (its final-model); its [data] prompt_template, [reward] and [grade] apply.",
        ),
    ],
    k: Annotated[
        int | None, typer.Option("--k", min=1, help="Samples per problem; overrides [grade] k.")
    ] = None,
    kind: Annotated[
        str,
        typer.Option("--kind", help="math, code, or auto: each row by its columns, as data clean."),
    ] = "auto",
    set_: Annotated[
        list[str] | None,
        typer.Option("--set", help="Override a config value, e.g. --set grade.hard_below=0.2."),
    ] = None,
) -> None:
    """Grade problems by difficulty (SRPO): sample k answers per problem from a policy, add
    pass_rate (correct / k) and difficulty (easy / medium / hard, by [grade] thresholds)."""
    path = resolve_data_path(input)
    if not out.name.endswith(".jsonl") or out.name == ".jsonl":
        raise AscentError(f"--out {out}: the output is JSONL; give a file name ending in .jsonl")
    if out.resolve() == path.resolve():
        raise AscentError(f"--out {out}: that is the input; write the output elsewhere")
    cfg, run_dir = grading_config(policy, set_ or [], k)
    rows, _ = numbered_rows(path, cfg.data.split)
    report = grade_rows(rows, path, cfg, kind=kind, run_dir=run_dir)
    with JsonlOutput(out) as graded:
        for row in report.rows:
            graded.write(row)
    print_grade_report(report, out)
    typer.echo(json.dumps(report.to_json()))

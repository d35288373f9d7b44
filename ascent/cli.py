"""The `ascent` command.

Each command is a thin shell: it loads the config (with `--set` overrides), calls one function
of the package that owns the job, and prints. Command groups owned by a package (`reward`,
`sandbox`, ...) are Typer sub-apps defined next to the code they drive and mounted here.

User errors (`AscentError`) print as one line and exit 2; `--debug` shows the traceback.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Annotated, Any

import click
import typer

from ascent.errors import EXIT_USER_ERROR, AscentError
from ascent.serve.server import DEFAULT_HOST, DEFAULT_MAX_BATCH, DEFAULT_PORT

app = typer.Typer(
    name="ascent",
    help=(
        "RL post-training for reasoning and code language models. One TOML file describes a "
        "run; `ascent train CONFIG` executes it. Run `ascent train` with no config for the "
        "built-in demo (tiny model, CPU, a few minutes)."
    ),
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)

_state = {"debug": False}

SetOption = Annotated[
    list[str] | None,
    typer.Option(
        "--set",
        help="Override one config value, e.g. --set optim.lr=1e-5 (repeatable; value is TOML).",
    ),
]


@app.callback()
def _root(
    debug: Annotated[
        bool, typer.Option("--debug", help="Show full tracebacks for errors.")
    ] = False,
) -> None:
    _state["debug"] = debug


@app.command()
def train(
    config: Annotated[
        Path | None,
        typer.Argument(help="TOML config; omit for the built-in demo (tiny model, CPU)."),
    ] = None,
    set_: SetOption = None,
    resume: Annotated[
        Path | None,
        typer.Option(
            "--resume",
            help="Continue RUN_DIR from its latest checkpoint, with the run's own config "
            "(RUN_DIR/config.toml) when no CONFIG is given. Settings changed from the run's "
            "are named; ones its checkpoints cannot follow (model, data, seed, a critic "
            "added, ...) are refused.",
        ),
    ] = None,
    overwrite: Annotated[
        bool, typer.Option("--overwrite", help="Replace an existing run directory.")
    ] = False,
    nproc: Annotated[
        int,
        typer.Option(
            "--nproc",
            min=1,
            help="Ranks to train on: the actor (and critic, reference) sharded with FSDP2 "
            "over them, rollouts and evaluation split between them; nccl on GPUs (one per "
            "rank), gloo on CPU. Same as torchrun --nproc-per-node N -m ascent train ...",
        ),
    ] = 1,
    dry_run: Annotated[
        bool,
        typer.Option(
            "--dry-run",
            help="Resolve and check everything the run needs (model and tokenizer, data and "
            "the columns its rewards read, API keys, ranks and batch arithmetic, memory "
            "estimate, run directory) without training or writing; exit 0, or 2 with one "
            "line per problem.",
        ),
    ] = False,
) -> None:
    """Train: an LLM recipe (GRPO, PPO, VAPO, ...) or classic PPO (a config with [env])."""
    from ascent.configfile import load_config
    from ascent.configfile.loader import run_config_overrides
    from ascent.train import check_world_size, run_training, train_rank

    sets, notes = list(set_ or []), []
    if config is None and resume is not None and (resume / "config.toml").is_file():
        config = resume / "config.toml"  # continue the run as it was configured
        sets, notes = run_config_overrides(resume, sets)
    cfg = load_config(config, sets)
    for note in notes:
        typer.echo(f"warning: {note}", err=True)
    if dry_run:
        _dry_run(cfg, nproc, resume, overwrite)
        return
    for warning in cfg.warnings:
        typer.echo(f"warning: {warning}", err=True)
    if nproc == 1:
        summary = run_training(cfg, resume=resume, overwrite=overwrite)
    else:
        import logging

        from ascent.train.distributed import launch

        check_world_size(cfg, nproc)
        logging.getLogger("torch").setLevel(logging.CRITICAL)  # the launcher's own chatter
        source = str(config) if config is not None else None
        resumed = str(resume) if resume else None
        summary = launch(nproc, train_rank, source, sets, resumed, overwrite)
    if os.environ.get("RANK", "0") == "0":  # under torchrun every rank runs this command
        typer.echo(f"summary: {summary}")


def _dry_run(cfg: Any, nproc: int, resume: Path | None, overwrite: bool) -> None:
    """`train --dry-run`: the checklist, then each problem on a line of its own (exit 2)."""
    from ascent.doctor.checks import format_checks
    from ascent.doctor.dry_run import dry_run

    checks = dry_run(cfg, nproc, resume=resume, overwrite=overwrite)
    typer.echo("\n".join(format_checks(checks)))
    problems = [c for c in checks if c.status == "fail"]
    for check in problems:
        typer.echo(f"error: {check.name}: {check.detail}", err=True)
    if problems:
        raise typer.Exit(2)
    typer.echo("dry run: everything the run needs is in place; nothing was written")


@app.command("eval")
def eval_(
    target: Annotated[
        Path,
        typer.Argument(help="A run directory (runs/NAME, holding config.toml) or a TOML config."),
    ],
    set_: SetOption = None,
    episodes: Annotated[
        int | None,
        typer.Option("--episodes", min=1, help="Episodes to run (classic PPO; default 10)."),
    ] = None,
    checkpoint: Annotated[
        Path | None,
        typer.Option(
            "--checkpoint",
            help="Checkpoint (or model directory) to load; default: the run's final-model/ "
            "(LLM runs), else its best checkpoint, else its latest.",
        ),
    ] = None,
) -> None:
    """Evaluate a policy: an LLM on [eval] problems (pass@k by rating band), or a classic PPO
    run's greedy episodes (mean, std of return)."""
    from ascent.configfile import load_config, load_run_config
    from ascent.rules import ClassicConfig

    if target.is_dir() and not (target / "config.toml").is_file():
        raise AscentError(f"{target}: a directory without config.toml; pass a run directory")
    if target.is_dir():
        cfg, notes = load_run_config(target, set_ or [])
        for note in notes:
            typer.echo(f"warning: {note}", err=True)
    else:
        cfg = load_config(target, set_ or [])
    if not isinstance(cfg, ClassicConfig):
        from ascent.evaluation import print_summary, run_eval

        if episodes is not None:
            raise AscentError(
                "--episodes is for classic PPO runs; an LLM eval runs [eval] problems "
                "(limit them with --set eval.limit=N)"
            )
        from ascent.rules.llm_rules import eval_inert_settings

        for warning in eval_inert_settings(cfg):
            typer.echo(f"warning: {warning}", err=True)
        run_dir = target if target.is_dir() else None
        print_summary(run_eval(cfg, run_dir=run_dir, checkpoint=checkpoint))
        return
    from ascent.train.classic_eval import evaluate_classic

    run_path = target if target.is_dir() else Path(cfg.run.output_dir) / cfg.run.name
    result = evaluate_classic(cfg, run_path, checkpoint=checkpoint, episodes=episodes or 10)
    typer.echo(result.describe())


@app.command()
def report(
    paths: Annotated[
        list[Path],
        typer.Argument(
            metavar="RUN_DIR",
            help="A run directory, e.g. runs/tiny-grpo (several with --compare); with --html, "
            "optionally the page to write, a path ending in .html (default: RUN_DIR/report.html"
            ", or the first RUN_DIR's compare.html with --compare).",
        ),
    ],
    html: Annotated[
        bool,
        typer.Option(
            "--html",
            help="Write one self-contained HTML page of plots (reward, KL, length, eval "
            "accuracy, ..., diagnosis marked on the curves) and print its path; needs "
            "pip install 'ascent[report]'.",
        ),
    ] = False,
    compare: Annotated[
        bool,
        typer.Option("--compare", help="With --html: overlay several runs on the same plots."),
    ] = False,
) -> None:
    """Summarise a run: metric trends, eval results, and diagnosed failure patterns."""
    if not html:
        if compare or len(paths) > 1:
            raise AscentError("the text report reads one RUN_DIR; add --html to compare runs")
        from ascent.observe.report import print_report

        print_report(paths[0])
        return
    from ascent.observe.html_report import split_paths, write_html_report

    run_dirs, out = split_paths(paths)
    if len(run_dirs) > 1 and not compare:
        raise AscentError(f"{len(run_dirs)} run directories: add --compare to overlay them")
    if compare and len(run_dirs) < 2:
        raise AscentError("--compare overlays two or more run directories; only one given")
    typer.echo(str(write_html_report(run_dirs, out)))


@app.command()
def smoke(
    config: Annotated[Path, typer.Argument(help="TOML config with [api] and [models].")],
    set_: SetOption = None,
    max_tokens: Annotated[
        int, typer.Option("--max-tokens", help="Longest answer per request (keep it cheap).")
    ] = 16,
) -> None:
    """Send one minimal request per API role; print status, latency and the answer's first line."""
    from ascent.configfile import load_config
    from ascent.doctor.smoke import format_smoke, run_smoke

    rows = run_smoke(load_config(config, set_ or []), max_tokens)
    typer.echo("\n".join(format_smoke(rows)))
    failed = [row.role for row in rows if not row.ok]
    if failed:
        raise AscentError(f"smoke failed for {len(failed)} of {len(rows)}: {', '.join(failed)}")


@app.command()
def doctor(
    config: Annotated[
        Path | None, typer.Argument(help="TOML config; omit to check the machine only.")
    ] = None,
    set_: SetOption = None,
    numerics: Annotated[
        bool,
        typer.Option(
            "--numerics",
            help="Instead: run CONFIG's engine and trainer on one batch and compare per-token "
            "log-probs, measure what top-p / top-k leave out, and check that a weight sync "
            "reaches the engine; a table, what to change, then one JSON object (max_logprob_gap, "
            "mean_logprob_gap, truncation_mass, weight_sync_ok, verdict). Exit 1 on a mismatch.",
        ),
    ] = False,
) -> None:
    """Check config, environment, sandbox, disk, keys and endpoints, without training."""
    from ascent.doctor.checks import format_checks, run_doctor

    if numerics:
        from ascent.doctor.numerics import numerics as check

        if config is None:
            raise AscentError("doctor --numerics needs a CONFIG: ascent doctor --numerics CONFIG")
        lines, code = check(config, set_ or [])
        typer.echo("\n".join(lines))
        raise typer.Exit(code)
    checks = run_doctor(config, set_ or [])
    typer.echo("\n".join(format_checks(checks)))
    failed = [c.name for c in checks if c.status == "fail"]
    if failed:
        raise AscentError(f"{len(failed)} check(s) failed: {', '.join(failed)}")


@app.command()
def plan(
    config: Annotated[
        Path | None, typer.Argument(help="TOML config; omit for the built-in demo.")
    ] = None,
    set_: SetOption = None,
    hardware: Annotated[
        str,
        typer.Option(
            "--hardware",
            help="Device the JSON line reports: cpu (this machine, its rates measured now), "
            "h100, h200 or a100 (data-sheet rates). The table shows all of them.",
        ),
    ] = "cpu",
    nproc: Annotated[int, typer.Option("--nproc", min=1, help="Ranks the run would train on.")] = 1,
) -> None:
    """Predict a run's peak memory per device, tokens per step and step time, before any
    weight loads; the last line is one JSON object (peak_memory_mb, step_s, fits)."""
    import json

    from ascent.configfile import load_config
    from ascent.doctor.plan import make_plan, plan_lines, report
    from ascent.models.hardware import HARDWARE_NAMES
    from ascent.rules import LLMConfig

    if hardware not in HARDWARE_NAMES:
        raise AscentError(f"--hardware {hardware!r}: choose one of {', '.join(HARDWARE_NAMES)}")
    cfg = load_config(config, set_ or [])
    if not isinstance(cfg, LLMConfig):
        raise AscentError("ascent plan reads LLM runs; a classic PPO run's needs are its env's")
    made = make_plan(cfg, nproc)
    typer.echo("\n".join(plan_lines(made, hardware)))
    typer.echo(json.dumps(report(made, hardware)))


@app.command()
def serve(
    model_or_run_dir: Annotated[
        str,
        typer.Argument(
            help="Model directory, run directory (serves its final/best model), or ascent:tiny."
        ),
    ],
    host: Annotated[
        str, typer.Option("--host", help="Address to bind (loopback by default).")
    ] = DEFAULT_HOST,
    port: Annotated[
        int, typer.Option("--port", help="TCP port (0 picks a free one).")
    ] = DEFAULT_PORT,
    name: Annotated[
        str | None,
        typer.Option("--name", help="Model name clients send; default: the directory name."),
    ] = None,
    device: Annotated[str, typer.Option("--device", help="auto, cpu, cuda or cuda:N.")] = "auto",
    max_batch: Annotated[
        int,
        typer.Option(
            "--max-batch", help="Most concurrent requests batched into one generate call."
        ),
    ] = DEFAULT_MAX_BATCH,
    api_key_env: Annotated[
        str | None,
        typer.Option(
            "--api-key-env",
            metavar="VAR",
            help="Require a key: VAR is the NAME of the environment variable holding it (read "
            "once at startup). Requests without 'Authorization: Bearer <key>' get 401; openai "
            "clients send their api_key that way. Without it, anyone who can reach the port "
            "can use the model.",
        ),
    ] = None,
) -> None:
    """Serve a local policy as an OpenAI-compatible endpoint (chat, completions, models)."""
    from ascent.serve.server import serve_forever

    serve_forever(
        model_or_run_dir,
        host=host,
        port=port,
        name=name,
        device=device,
        max_batch=max_batch,
        api_key_env=api_key_env,
    )


config_app = typer.Typer(help="Inspect configuration files.", no_args_is_help=True)
app.add_typer(config_app, name="config")


@config_app.command("show")
def config_show(
    config: Annotated[
        Path | None,
        typer.Argument(help="TOML config; omit for the built-in default run."),
    ] = None,
    set_: SetOption = None,
    fmt: Annotated[str, typer.Option("--format", help="Output format: toml or json.")] = "toml",
) -> None:
    """Print the fully resolved config: every section, every default, overrides applied."""
    from ascent.configfile import dump_config, load_config

    cfg = load_config(config, set_ or [])
    if fmt not in ("toml", "json"):
        raise AscentError(f"--format {fmt!r} is not supported; use toml or json")
    if fmt == "json":  # the TOML form carries them as comments
        for warning in cfg.warnings:
            typer.echo(f"warning: {warning}", err=True)
    typer.echo(dump_config(cfg, fmt), nl=False)


@config_app.command("migrate")
def config_migrate(
    config: Annotated[
        Path,
        typer.Argument(help="A config from the write-ups or TRL: TOML, or YAML (.yaml, .yml)."),
    ],
    out: Annotated[
        Path | None,
        typer.Option("--out", help="Write the ascent config to PATH instead of standard output."),
    ] = None,
) -> None:
    """Rewrite a config with the write-ups' or TRL's keys as an ascent config; every key moved,
    left out or not mapped is commented."""
    from ascent.configfile.migrate import migrate_file

    if out is not None and out.resolve() == config.resolve():
        raise AscentError(f"--out {out}: that is the file being migrated; choose another path")
    result = migrate_file(config)
    if out is None:
        typer.echo(result.text, nl=False)
    else:
        try:
            out.write_text(result.text, encoding="utf-8")
        except OSError as err:
            raise AscentError(f"--out {out}: cannot write it ({err.strerror})") from None
        typer.echo(f"wrote {out}", err=True)
    if result.problem is not None:
        raise AscentError(f"the migrated config does not load yet: {result.problem}")


def _mount_subapps() -> None:
    """Mount the command groups owned by other packages (kept here so `--help` lists them)."""
    from ascent.data.commands import data_app
    from ascent.evaluation.commands import grade
    from ascent.rewards.commands import reward_app, sandbox_app

    data_app.command("grade")(grade)
    app.add_typer(reward_app, name="reward")
    app.add_typer(sandbox_app, name="sandbox")
    app.add_typer(data_app, name="data")


_mount_subapps()


def _click_error_classes() -> tuple[type[Exception], ...]:
    """Usage errors: recent typer releases parse with a vendored copy of click whose
    exceptions are not the click package's classes, so both are caught."""
    classes: list[type[Exception]] = [click.ClickException]
    try:
        from typer._click.exceptions import ClickException as Vendored
    except ImportError:  # a typer that parses with the click package itself
        return tuple(classes)
    return (*classes, Vendored)


_CLICK_ERROR = _click_error_classes()
_ABORT = (click.exceptions.Abort, typer.Abort)
_EXIT = (click.exceptions.Exit, typer.Exit)


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    _state["debug"] = "--debug" in args
    try:
        code = app(args=args, prog_name="ascent", standalone_mode=False)
    except AscentError as err:
        if _state["debug"]:
            raise
        typer.echo(f"error: {err}", err=True)
        sys.exit(err.exit_code)
    except _ABORT:
        typer.echo("aborted", err=True)
        sys.exit(130)
    except _CLICK_ERROR as err:
        err.show()
        sys.exit(err.exit_code)
    except _EXIT as err:
        sys.exit(err.exit_code)
    except KeyboardInterrupt:
        typer.echo("interrupted", err=True)
        sys.exit(130)
    if isinstance(code, int) and code:  # a command's typer.Exit(n), returned in this mode
        sys.exit(code)


__all__ = ["EXIT_USER_ERROR", "app", "main"]

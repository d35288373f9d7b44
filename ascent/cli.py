"""The `ascent` command.

Each command is a thin shell: it loads the config (with `--set` overrides), calls one function
of the package that owns the job, and prints. Command groups owned by a package (`reward`,
`sandbox`, ...) are Typer sub-apps defined next to the code they drive and mounted here.

User errors (`AscentError`) print as one line and exit 2; `--debug` shows the traceback.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import click
import typer

from ascent.errors import EXIT_USER_ERROR, AscentError

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
        typer.Option("--resume", help="Continue RUN_DIR from its latest checkpoint."),
    ] = None,
    overwrite: Annotated[
        bool, typer.Option("--overwrite", help="Replace an existing run directory.")
    ] = False,
) -> None:
    """Train: an LLM recipe (GRPO, PPO, VAPO, ...) or classic PPO (a config with [env])."""
    from ascent.config import load_config
    from ascent.train import run_training

    cfg = load_config(config, set_ or [])
    summary = run_training(cfg, resume=resume, overwrite=overwrite)
    typer.echo(f"summary: {summary}")


@app.command()
def report(
    run_dir: Annotated[Path, typer.Argument(help="A run directory, e.g. runs/tiny-grpo.")],
) -> None:
    """Summarise a run: metric trends, eval results, and diagnosed failure patterns."""
    from ascent.observe.report import print_report

    print_report(run_dir)


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
    from ascent.config import dump_config, load_config

    cfg = load_config(config, set_ or [])
    if fmt not in ("toml", "json"):
        raise AscentError(f"--format {fmt!r} is not supported; use toml or json")
    typer.echo(dump_config(cfg, fmt), nl=False)


def _mount_subapps() -> None:
    """Mount the command groups owned by other packages (kept here so `--help` lists them)."""


_mount_subapps()


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    _state["debug"] = "--debug" in args
    try:
        app(args=args, standalone_mode=False)
    except AscentError as err:
        if _state["debug"]:
            raise
        typer.echo(f"error: {err}", err=True)
        sys.exit(err.exit_code)
    except click.exceptions.Abort:
        typer.echo("aborted", err=True)
        sys.exit(130)
    except click.exceptions.ClickException as err:
        err.show()
        sys.exit(err.exit_code)
    except click.exceptions.Exit as err:
        sys.exit(err.exit_code)
    except KeyboardInterrupt:
        typer.echo("interrupted", err=True)
        sys.exit(130)


__all__ = ["EXIT_USER_ERROR", "app", "main"]

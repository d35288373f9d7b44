"""The progress line prints text as written: a model's answer is not rich markup."""

from __future__ import annotations

import io

from rich.console import Console

from ascent.observe.progress import TrainProgress

ANSWER = (
    "assistant (step 4): The return is flat at 22 and the critic lags (explained variance "
    "0.05). Raise [train] clip_range to 0.3 and [optim] lr_critic to 3e-3; a stray [/x] or "
    "[bold] stays as written."
)


def console(terminal: bool) -> tuple[Console, io.StringIO]:
    out = io.StringIO()
    return Console(file=out, width=80, force_terminal=terminal, color_system=None), out


def test_printed_text_keeps_its_brackets_and_is_not_wrapped_at_80_columns():
    con, out = console(terminal=False)
    with TrainProgress(10, {"reward": "reward"}, console=con) as bar:
        bar.print(ANSWER)
        bar.update(10, {"reward": 0.5})
    lines = out.getvalue().splitlines()
    assert lines[0] == ANSWER  # one line of 170 characters, brackets and all
    assert lines[1].startswith("train 10/10  reward 0.500  [")


def test_printed_text_above_a_live_bar_keeps_its_brackets():
    con, out = console(terminal=True)
    with TrainProgress(10, {"reward": "reward"}, console=con) as bar:
        bar.print(ANSWER)
    assert ANSWER in out.getvalue()


def test_a_quiet_progress_prints_nothing():
    con, out = console(terminal=False)
    with TrainProgress(10, {}, console=con, quiet=True) as bar:
        bar.print(ANSWER)
    assert out.getvalue() == ""

"""Data that would hang a run or fill memory is refused in one line before anything is
written: FIFOs, devices, unbounded lines, prompts longer than the model's context."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import pytest

from ascent.data import code_problems
from ascent.data.files import read_rows
from ascent.errors import AscentError


@pytest.mark.timeout(30)
def test_a_fifo_with_no_writer_is_refused_not_waited_on(tmp_path):
    fifo = tmp_path / "rows.jsonl"
    os.mkfifo(fifo)
    with pytest.raises(AscentError, match="a FIFO, not a data file"):
        list(read_rows(fifo, "auto", "train"))


@pytest.mark.timeout(30)
@pytest.mark.parametrize(("device", "fmt"), [("/dev/zero", "jsonl"), ("/dev/null", "parquet")])
def test_devices_are_refused(device, fmt):
    with pytest.raises(AscentError, match="a device, not a data file"):
        list(read_rows(Path(device), fmt, "train"))


def test_a_line_longer_than_the_bound_is_refused_with_its_number(tmp_path, monkeypatch):
    monkeypatch.setattr(code_problems, "MAX_LINE_CHARS", 100)
    path = tmp_path / "rows.jsonl"
    rows = [{"q": "1+1=", "a": "2"}, {"q": "x" * 200, "a": "1"}]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(AscentError, match=r"rows\.jsonl:2: a line of more than 100 characters"):
        list(read_rows(path, "auto", "train"))
    path.write_text("x" * 1000)  # no line break at all: read in bounded pieces, refused
    with pytest.raises(AscentError, match=r":1: a line of more than 100 characters"):
        list(read_rows(path, "auto", "train"))


def test_prompts_longer_than_the_context_are_counted_and_refused_before_the_run(cwd, run_cli):
    """The tiny model's context is 256 tokens; with max_new_tokens 6, 250 are left. One 5 MB
    prompt (never tokenized: it cannot fit whatever it holds) and one of 600 digits (tokenized:
    600 tokens) are over; the 30 short ones are fine."""
    rows = [{"question": "7" * 5_000_000, "answer": "1"}, {"question": "1" * 600, "answer": "1"}]
    rows += [{"question": f"{i:02d}+01=", "answer": str(i + 1)} for i in range(30)]
    (cwd / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    settings = ['data.path="rows.jsonl"', 'data.columns={prompt="question", answer="answer"}',
                "data.eval_size=10", "data.shuffle=false"]  # fmt: skip
    seen = threading.active_count()
    code, _, err = run_cli("train", *(a for s in settings for a in ("--set", s)))
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert "2 of 32 prompts are longer than the model's context allows" in err
    assert "leaves 250" in err and "Traceback" not in err
    assert sorted(p.name for p in cwd.iterdir()) == ["rows.jsonl"]  # no run directory
    assert threading.active_count() <= seen


def test_max_new_tokens_that_leave_no_room_for_a_prompt_are_refused(cwd, run_cli):
    code, _, err = run_cli("train", "--set", "rollout.max_new_tokens=1000")
    assert code == 2 and "max_new_tokens: 1,000 leaves no room for a prompt" in err, err
    assert list(cwd.iterdir()) == []


@pytest.mark.timeout(30)
def test_a_config_path_that_is_no_file_says_what_it_is(tmp_path, run_cli):
    loop = tmp_path / "a.toml"
    loop.symlink_to(tmp_path / "b.toml")
    (tmp_path / "b.toml").symlink_to(loop)
    fifo = tmp_path / "fifo.toml"
    os.mkfifo(fifo)
    for path, what in ((loop, "a symlink loop"), (fifo, "a FIFO"), ("/dev/null", "a device")):
        code, _, err = run_cli("config", "show", str(path))
        assert code == 2 and f"{path}: {what}, not a config file; check the path" in err, err

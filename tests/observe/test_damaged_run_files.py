"""A damaged run directory gets one line naming the file, not a traceback: `ascent report`
on a broken summary.json or a binary metrics.jsonl, `ascent eval --checkpoint FILE`."""

from __future__ import annotations

import json
from pathlib import Path


def run_dir(tmp_path, metrics: bytes, summary: bytes | None = None):
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.jsonl").write_bytes(metrics)
    if summary is not None:
        (run / "summary.json").write_bytes(summary)
    return run


GOOD = b"".join(json.dumps({"step": s, "reward": s / 10}).encode() + b"\n" for s in range(1, 6))


def test_a_binary_metrics_file_is_one_line(tmp_path, run_cli):
    run = run_dir(tmp_path, b"\x00\x01\xff\xfe" * 10)
    code, _, err = run_cli("report", str(run))
    assert code == 2 and "Traceback" not in err
    assert err.strip() == (
        f"error: {run / 'metrics.jsonl'}: not text (byte 2 is not UTF-8); ascent writes one "
        "JSON object per line, so this file is damaged or not ascent's: move it away and "
        "report again"
    )


def test_a_damaged_summary_is_one_line_and_lines_that_are_not_objects_are_skipped(
    tmp_path, run_cli
):
    run = run_dir(tmp_path, GOOD + b"5\n[1, 2]\n" + b'{"step": 6, "rew', b'{"eval_accuracy": ')
    code, _, err = run_cli("report", str(run))
    assert code == 2 and "summary.json: not a JSON summary" in err and "Traceback" not in err
    (run / "summary.json").unlink()
    code, out, err = run_cli("report", str(run))
    assert code == 0, err
    assert "reward" in out


def test_eval_checkpoint_that_is_a_file_names_what_to_pass(tmp_path, run_cli):
    weights = tmp_path / "model.safetensors"
    weights.write_bytes(b"not safetensors")
    config = Path(__file__).parents[2] / "examples" / "grpo.toml"
    problems = 'eval.problems="ascent:gsm8k_test"'
    code, _, err = run_cli("eval", str(config), "--checkpoint", str(weights), "--set", problems)
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert f"{weights}: a file; pass the directory that holds the model" in err

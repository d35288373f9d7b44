"""benchmarks/sandbox.py runs and ends with its JSON report (a tiny run: this checks the
script, not the speed; the figures come from a full run)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.rewards.conftest import FAST, isolation_or_skip

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.timeout(120)
def test_sandbox_benchmark_prints_a_json_report_last():
    isolation_or_skip(FAST)
    done = subprocess.run(
        [
            sys.executable,
            "benchmarks/sandbox.py",
            "--runs",
            "20",
            "--rounds",
            "1",
            "--workers",
            "2",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=110,
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert {"ratio", "isolated_runs_per_s", "plain_runs_per_s"} <= set(report)
    assert report["isolated_runs_per_s"] > 0 and report["plain_runs_per_s"] > 0
    assert report["ratio"] == pytest.approx(
        report["isolated_runs_per_s"] / report["plain_runs_per_s"], rel=0.05
    )

"""benchmarks/memory_bandwidth.py: its read loops read every value once (else the script
stops: a loop that skipped data would report a bandwidth it never reached), and it ends with
its JSON report. Tiny buffers: this checks the script, not the speed."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from ascent.rollout.native import c_compiler

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "memory_bandwidth.py"
needs_cc = pytest.mark.skipif(c_compiler() is None, reason="no C compiler")


def load_script():
    spec = importlib.util.spec_from_file_location("memory_bandwidth", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@needs_cc
@pytest.mark.parametrize("threads", [1, 2, 3])
def test_the_script_reports_every_read_loop_against_the_copy(threads):
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--mib", "8", "--threads", str(threads)],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout.strip().splitlines()[-1])
    loops = {"c_plain", "c_2_streams", "c_4_streams", "c_prefetch_2k", "c_2_streams_prefetch_2k"}
    assert loops | {"torch_copy_read_plus_written", "torch_float32_sum"} == set(report["gb_per_s"])
    assert report["skipped"] is None and all(v > 0 for v in report["gb_per_s"].values())
    assert report["vs_torch_copy"]["torch_copy_read_plus_written"] == 1.0


@needs_cc
def test_a_loop_that_skips_half_its_lines_stops_the_script(monkeypatch):
    module = load_script()
    broken = module.SOURCE.replace("at += 64)", "at += 128)")
    assert broken != module.SOURCE
    monkeypatch.setattr(module, "SOURCE", broken)
    monkeypatch.setattr(sys, "argv", ["memory_bandwidth.py", "--mib", "8"])
    with pytest.raises(SystemExit, match=r"c_plain summed .* ones: a bug"):
        module.main()


@pytest.mark.parametrize("args", [["--mib", "0"], ["--mib", "9000"], ["--threads", "0"]])
def test_bad_sizes_and_thread_counts_are_one_line_and_exit_2(args):
    done = subprocess.run([sys.executable, str(SCRIPT), *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=60)  # fmt: skip
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines()[-1].endswith(("give 8 to 4096", "give 1 or more"))

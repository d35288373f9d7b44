"""`ascent eval examples/codeforces_eval.toml` end to end: against `ascent serve` serving the
tiny model on loopback, and against the fault-injecting server.

The tiny model has a 256-token context and scores ~0; the point is the pipeline: prompts,
concurrent requests, sandboxed judging of 100+ tests per problem, the band table, the files.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator

import pytest

from tests.api.scripted_server import Reply, ScriptedServer, models_body
from tests.evaluation.conftest import CHAT, MODELS, PROJECT, fenced

EXAMPLE = PROJECT / "examples" / "codeforces_eval.toml"
TINY = "ascent:tiny"
# The tiny model's 256 tokens hold a cut statement and a short answer, nothing more.
TINY_FIT = [
    "eval.max_problem_chars=120",
    'eval.prompt_template="{problem}"',
    "eval.max_new_tokens=48",
]


def sets(*items: str) -> list[str]:
    return [arg for item in items for arg in ("--set", item)]


@pytest.fixture(scope="module")
def served_tiny() -> Iterator[str]:
    """`ascent serve ascent:tiny --port 0` in a subprocess; yields its base URL."""
    env = {
        **os.environ,
        "PYTHONUNBUFFERED": "1",
        "TRANSFORMERS_VERBOSITY": "error",
        "OMP_NUM_THREADS": "1",
    }
    command = [sys.executable, "-m", "ascent", "serve", TINY, "--port", "0", "--device", "cpu"]
    proc = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    )
    try:
        line = proc.stdout.readline()
        assert line.startswith(f"serving {TINY} "), line + proc.stderr.read()
        yield line.split(" at ")[1].split()[0]
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def test_example_against_ascent_serve_prints_the_band_table(
    sandbox, served_tiny, tmp_path, run_cli, monkeypatch
):
    monkeypatch.chdir(tmp_path)  # the example names a bundled set: no path to resolve
    overrides = sets(
        f"api.base_url={served_tiny}",
        "eval.limit=4",
        "eval.num_samples=2",
        "eval.pass_k=[1, 2]",
        f'eval.output_dir="{tmp_path}"',
        *TINY_FIT,
    )
    code, out, err = run_cli("eval", str(EXAMPLE), *overrides)
    assert code == 0, err
    lines = out.strip().splitlines()
    assert lines[-1] == str(tmp_path / "eval_results.json")
    table = "\n".join(lines)
    for text in ("band", "pass@1", "pass@2", "MEDIUM (no rating)", "A (no rating)", "all"):
        assert text in table
    assert "no rating in the data" in out  # the table says labels are not ratings
    results = json.loads((tmp_path / "eval_results.json").read_text())
    assert results["policy"] == {
        "policy": "api",
        "role": "solver",
        "model": TINY,
        "base_url": served_tiny,
    }
    assert [b["band"] for b in results["bands"]] == ["A (no rating)", "MEDIUM (no rating)"]
    assert results["overall"]["problems"] == 4 and results["overall"]["failed_requests"] == 0
    assert results["usage"]["solver"]["requests"] == 8
    transcripts = [
        json.loads(x) for x in (tmp_path / "transcripts.jsonl").read_text().split("\n") if x
    ]
    assert len(transcripts) == 4 and transcripts[0]["truncated_prompt"] is True
    sample = transcripts[0]["samples"][0]
    assert sample["completion"] is not None and sample["completion_tokens"] <= 48
    assert sample["judge"]["total"] == 101  # judged against the problem's real tests


def test_example_against_the_fault_injecting_server_degrades_with_clear_messages(
    sandbox, tmp_path, run_cli, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    with ScriptedServer() as server:
        server.default(MODELS, Reply(200, models_body(TINY)))

        def answer(seen):
            prompt = seen.body["messages"][-1]["content"]
            if "Alice and Johnny" in prompt:  # problem a3: the upstream keeps failing
                return Reply(503, {"error": {"message": "overloaded"}})
            if "Digit Jump" in prompt:  # problem digjump: rate-limited past every retry
                return Reply(429, {"error": {"message": "slow down"}}, {"Retry-After": "0"})
            return fenced("print(0)")

        server.default(CHAT, answer)
        overrides = sets(
            f"api.base_url={server.url}",
            "api.backoff_sec=0.01",
            "eval.limit=4",
            "eval.num_samples=1",
            "eval.pass_k=[1]",
            f'eval.output_dir="{tmp_path}"',
        )
        code, out, err = run_cli("eval", str(EXAMPLE), *overrides)
    assert code == 0, err
    host = server.url.split("//")[1]
    assert (
        f"problem a3: role solver (ascent:tiny) at {host}: server error 503 after 3 retries "
        "(overloaded)" in err
    )
    assert "still rate-limited (429) after 3 retries; lower [rollout] async_workers (now 8)" in err
    results = json.loads((tmp_path / "eval_results.json").read_text())
    statuses = [next(iter(p["statuses"])) for p in results["problems"]]
    assert statuses.count("request_failed") == 2 and "wrong_answer" in statuses
    assert results["overall"]["failed_requests"] == 2
    assert "2 of 4 requests failed after retries and count as wrong" in out
    assert out.strip().splitlines()[-1] == str(tmp_path / "eval_results.json")

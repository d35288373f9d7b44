"""The harness against a scripted OpenAI-compatible endpoint: real problems, real judging,
concurrency, and the failures it must survive or stop on."""

from __future__ import annotations

import pytest

from ascent.data.code_problems import load_code_problems
from tests.api.scripted_server import Reply, models_body, ok
from tests.evaluation.conftest import (
    CHAT,
    KEY_VAR,
    MODELS,
    data_file,
    fenced,
    read_results,
    read_transcripts,
    router,
    write_config,
)

N_HUMANEVAL = 6


@pytest.fixture
def humaneval():
    path = data_file("humaneval.jsonl.gz")
    return path, load_code_problems(path, limit=N_HUMANEVAL)


def reference_answers(problems, solve=lambda i: True):
    """A router answering problem i with its reference solution when solve(i), else a bug."""

    def answer(prompt: str) -> Reply:
        for i, p in enumerate(problems):
            if p.statement in prompt:
                code = p.reference_solution if solve(i) else p.statement + "    return None\n"
                return fenced(code)
        return ok("no idea")

    return router(answer)


def test_reference_solutions_pass_and_bugs_fail_with_k_out_of_n(
    sandbox, server, humaneval, tmp_path, run_cli
):
    path, problems = humaneval
    server.default(CHAT, reference_answers(problems, solve=lambda i: i % 2 == 0))
    keys = f"limit = {N_HUMANEVAL}\nnum_samples = 2\npass_k = [1, 2]\ntemperature = 0.7"
    code, out, err = run_cli("eval", str(write_config(tmp_path, path, server.url, keys)))
    assert code == 0, err
    results = read_results(tmp_path)
    assert results["overall"]["pass@1"] == pytest.approx(0.5)
    assert results["overall"]["pass@2"] == pytest.approx(0.5)
    assert results["overall"]["solved"] == N_HUMANEVAL // 2
    assert [p["correct"] for p in results["problems"]] == [2, 0, 2, 0, 2, 0]
    assert results["bands"] == [results["overall"] | {"band": "unrated", "kind": "unrated"}]
    assert results["policy"]["model"] == "m" and results["policy"]["role"] == "solver"
    assert server.count(CHAT) == 2 * N_HUMANEVAL
    body = server.requests(CHAT)[0].body
    assert body["temperature"] == 0.7 and body["max_tokens"] == 2048 and "top_p" not in body
    transcript = read_transcripts(tmp_path)[1]
    sample = transcript["samples"][0]
    assert transcript["prompt"].startswith("Complete the following Python function")
    assert sample["status"] == "wrong_answer" and sample["passed"] is False
    assert "return None" in sample["program"] and sample["judge"]["tests"][0]["status"]
    assert out.strip().splitlines()[-1] == str(tmp_path / "out" / "eval_results.json")
    assert "pass@2" in out and "unrated" in out


def test_requests_stay_async_workers_deep(sandbox, server, humaneval, tmp_path, run_cli):
    path, problems = humaneval

    def slow(prompt):
        return Reply(200, fenced(problems[0].reference_solution).body, delay=0.3)

    server.default(CHAT, router(slow))
    keys = "limit = 4\nnum_samples = 3\npass_k = [1, 3]"
    code, _, err = run_cli("eval", str(write_config(tmp_path, path, server.url, keys)))
    assert code == 0, err
    assert server.count(CHAT) == 12
    assert server.max_in_flight == 4  # [rollout] async_workers


def test_a_problem_whose_requests_fail_is_recorded_with_its_diagnosis(
    sandbox, server, humaneval, tmp_path, run_cli
):
    path, problems = humaneval
    good = reference_answers(problems)

    def flaky(seen):
        if problems[2].statement in seen.body["messages"][-1]["content"]:
            return Reply(500, {"error": {"message": "upstream exploded"}})
        return good(seen)

    server.default(CHAT, flaky)
    config = write_config(tmp_path, path, server.url, f"limit = {N_HUMANEVAL}")
    code, out, err = run_cli("eval", str(config))
    assert code == 0, err
    results = read_results(tmp_path)
    failed = results["problems"][2]
    assert failed["correct"] == 0 and failed["statuses"] == {"request_failed": 1}
    (error,) = failed["errors"]
    assert "server error 500 after 1 retry (upstream exploded)" in error
    assert results["overall"]["pass@1"] == pytest.approx(5 / 6)  # counted as wrong
    assert results["overall"]["failed_requests"] == 1
    assert f"problem {problems[2].id}: role solver (m) at 127.0.0.1" in err
    assert "1 of 6 requests failed after retries and count as wrong" in out


def test_a_refused_key_stops_early_with_one_line_and_exit_2(
    server, humaneval, tmp_path, run_cli, monkeypatch
):
    path, _ = humaneval
    monkeypatch.setenv(KEY_VAR, "sk-test-0123456789abcdef")
    server.default(CHAT, Reply(401, {"error": {"message": "Incorrect API key provided"}}))
    keys = f'api_key_env = "{KEY_VAR}"'
    config = write_config(tmp_path, path, server.url, "num_samples = 1", api_keys=keys)
    code, _, err = run_cli("eval", str(config))
    assert code == 2
    (line,) = err.strip().splitlines()[-1:]
    assert line.startswith("error: stopping the evaluation: role solver (m) at 127.0.0.1:")
    assert f"401 Unauthorized: the key in {KEY_VAR} was refused" in line
    assert server.count(CHAT) <= 4  # the first wave of requests, not all 164 problems
    assert not (tmp_path / "out" / "eval_results.json").exists()


@pytest.mark.parametrize(
    ("models_reply", "expected"),
    [
        (Reply(404, {"error": {"message": "Not Found"}}), "base_url is probably wrong"),
        (Reply(200, models_body("gpt-x", "m-large")), "model 'm' is not served by 127.0.0.1"),
    ],
)
def test_wrong_base_url_or_unknown_model_stops_with_the_diagnosis(
    server, humaneval, tmp_path, run_cli, models_reply, expected
):
    path, _ = humaneval
    server.default(MODELS, models_reply)
    server.default(CHAT, Reply(404, {"error": {"message": "Not Found"}}))
    code, _, err = run_cli("eval", str(write_config(tmp_path, path, server.url)))
    assert code == 2 and "error: stopping the evaluation: " in err and expected in err
    assert server.count(CHAT) <= 4  # the first wave of async_workers requests, not 164


def test_a_missing_key_variable_stops_before_any_request(
    server, humaneval, tmp_path, run_cli, monkeypatch
):
    path, _ = humaneval
    monkeypatch.delenv(KEY_VAR, raising=False)
    config = write_config(tmp_path, path, server.url, api_keys=f'api_key_env = "{KEY_VAR}"')
    code, _, err = run_cli("eval", str(config))
    assert code == 2 and f"API key variable {KEY_VAR} is not set" in err
    assert server.count(CHAT) == 0


def test_every_request_failing_prints_the_table_then_exits_2(
    sandbox, server, humaneval, tmp_path, run_cli
):
    path, _ = humaneval
    server.default(CHAT, Reply(429, {"error": {"message": "slow down"}}))
    code, out, err = run_cli("eval", str(write_config(tmp_path, path, server.url, "limit = 2")))
    assert code == 2
    assert out.strip().splitlines()[-1].endswith("eval_results.json")
    assert "error: every request failed, nothing was evaluated: role solver (m)" in err
    assert "still rate-limited (429) after 1 retry; lower [rollout] async_workers (now 4)" in err
    assert read_results(tmp_path)["overall"]["failed_requests"] == 2


def test_math_problems_are_checked_by_equivalence(server, tmp_path, run_cli):
    path = data_file("gsm8k_test.jsonl")
    golds = {}
    for line in path.read_text().splitlines()[:4]:
        import json

        row = json.loads(line)
        golds[row["question"]] = row["answer"].rsplit("####", 1)[1].strip()
    right = list(golds)[:2]

    def answer(prompt: str) -> Reply:
        question = next(q for q in golds if q in prompt)
        value = golds[question] if question in right else "-1"
        return ok(f"So the total is \\boxed{{{value}}}.")

    server.default(CHAT, router(answer))
    code, out, err = run_cli("eval", str(write_config(tmp_path, path, server.url, "limit = 4")))
    assert code == 0, err
    results = read_results(tmp_path)
    assert results["kind"] == "math" and results["overall"]["pass@1"] == pytest.approx(0.5)
    assert "accuracy" in out and "50.0%" in out
    prompt = server.requests(CHAT)[0].body["messages"][0]["content"]
    assert prompt.endswith("put your final answer within \\boxed{}.")
    sample = read_transcripts(tmp_path)[0]["samples"][0]
    assert sample["judge"]["outcome"] == "equal" and sample["passed"] is True

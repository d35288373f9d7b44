"""The log assistant: three sentences every log_interval steps, never in training's way."""

from __future__ import annotations

import json
import time

import pytest

from ascent.api import ApiClient, KeySource, RetryPolicy, RoleSpec, UsageLedger
from ascent.api.assistant import SYSTEM_PROMPT, LogAssistant, assistant_session
from ascent.config.api import AssistantSection
from ascent.configfile import load_config
from ascent.errors import ConfigError
from tests.api.conftest import KEY, KEY_VAR, leaks
from tests.api.scripted_server import Reply, chat_body, ok

CHAT = "/v1/chat/completions"
ANSWER = (
    "The policy is improving: reward rose from 0.1 to 0.4. There is no critic in this run. "
    "Keep lr at 1e-6 and raise kl_coef to 0.01 if kl passes 1.0."
)


def assistant(server, tmp_path, echo, **section) -> LogAssistant:
    spec = RoleSpec("analyst", "judge", f"{server.url}/v1", KEY_VAR)
    cfg = AssistantSection(enabled=True, **{"log_interval": 5, "history": 3, **section})

    def make_client():
        return ApiClient(
            {"analyst": spec}, concurrency=1, keys=KeySource(), policy=RetryPolicy(5, 0, 0.01, 1)
        )

    return LogAssistant(cfg, make_client, tmp_path, echo)


def metrics(step):
    return {"reward": 0.1 * step, "kl": 0.001 * step, "value_loss": float("nan")}


def test_every_interval_the_role_answers_and_it_is_printed_and_saved(server, tmp_path):
    server.default(CHAT, ok(ANSWER + "\n"))
    printed = []
    a = assistant(server, tmp_path, printed.append)
    for step in range(1, 11):
        a.observe(step, metrics(step))
        if step % 5 == 0:
            assert a.wait_idle(5)
    a.close(timeout=5)
    assert server.count(CHAT) == 2
    body = server.requests(CHAT)[1].body
    assert body["model"] == "judge" and body["max_tokens"] == 200
    assert body["messages"][0] == {"role": "system", "content": SYSTEM_PROMPT}
    user = body["messages"][1]["content"].splitlines()
    assert user[0] == "Metrics of the last 3 logged steps, oldest first:"
    assert json.loads(user[1]) == {"step": 8, "reward": 0.8, "kl": 0.008, "value_loss": "nan"}
    assert printed == [f"assistant (step 5): {ANSWER}", f"assistant (step 10): {ANSWER}"]
    saved = [json.loads(x) for x in (tmp_path / "assistant.jsonl").read_text().splitlines()]
    assert saved == [{"step": 5, "text": ANSWER}, {"step": 10, "text": ANSWER}]


def test_a_slow_endpoint_never_slows_training_and_the_timeout_is_logged(server, tmp_path, caplog):
    server.default(CHAT, Reply(200, chat_body(ANSWER), delay=1.5))
    a = assistant(server, tmp_path, print, timeout_sec=0.3, log_interval=1)
    worst = 0.0
    for step in range(1, 31):
        start = time.monotonic()
        a.observe(step, metrics(step))
        worst = max(worst, time.monotonic() - start)
        time.sleep(0.01)
    assert worst < 0.05  # observe only hands over a copy
    assert a.skipped  # interval steps while one was in flight were dropped, not queued
    assert a.wait_idle(3)
    a.close(timeout=3)
    assert {"step": 1, "error": "no answer within 0.3 s"} in a.analyses
    assert "assistant (step 1) failed: no answer within 0.3 s" in caplog.text


def test_an_endpoint_error_is_logged_in_one_line_without_the_key(server, tmp_path, caplog):
    server.default(CHAT, Reply(401, {"error": {"message": f"invalid key {KEY}"}}))
    a = assistant(server, tmp_path, print)
    a.observe(5, metrics(5))
    assert a.wait_idle(5)
    a.close(timeout=5)
    (entry,) = a.analyses
    assert "401 Unauthorized: the key in ASCENT_TEST_API_KEY was refused" in entry["error"]
    text = caplog.text + (tmp_path / "assistant.jsonl").read_text()
    assert not leaks(text)


def test_from_config_is_none_when_disabled_and_refuses_a_role_without_model(tmp_path):
    path = tmp_path / "run.toml"
    path.write_text("[models]\nsolver_model = 'm'\n")
    assert LogAssistant.from_config(load_config(path)) is None
    with pytest.raises(ConfigError, match=r"\[assistant\] role: 'analyst' has no model; add ana"):
        load_config(path, ["assistant.enabled=true"])  # at load time, before any training
    path.write_text("[models]\nanalyst_model = 'm'\n[assistant]\nenabled = true\n")
    a = LogAssistant.from_config(load_config(path), tmp_path)
    assert a is not None
    a.close(timeout=2)


def test_the_analysts_tokens_count_in_the_runs_ledger(server, tmp_path):
    server.default(CHAT, ok(ANSWER, prompt_tokens=40, completion_tokens=30))
    path = tmp_path / "run.toml"
    path.write_text(
        f'[api]\nbase_url = "{server.url}"\napi_key_env = "{KEY_VAR}"\n'
        '[models]\nanalyst_model = "judge"\n[assistant]\nenabled = true\nlog_interval = 2\n'
    )
    usage = UsageLedger()
    usage.answered("solver", 100, 50, 0.1)  # what the run's own roles spent
    a = LogAssistant.from_config(load_config(path), tmp_path, lambda _: None, usage=usage)
    a.observe(2, metrics(2))
    assert a.wait_idle(5)
    a.close(timeout=5)
    spent = usage.snapshot()
    assert (spent["analyst"].requests, spent["analyst"].total_tokens) == (1, 70)
    assert spent["solver"].total_tokens == 150
    saved = json.loads(usage.write(tmp_path).read_text())
    assert set(saved) == {"analyst", "solver"}


def test_a_context_too_small_for_the_analyst_names_the_assistants_settings(server, tmp_path):
    said = "This model's maximum context length is 256 tokens. However, you requested 1400 tokens."
    server.default(CHAT, Reply(400, {"error": {"message": said}}))
    path = tmp_path / "run.toml"
    path.write_text(
        f'[api]\nbase_url = "{server.url}"\napi_key_env = "{KEY_VAR}"\nmax_retries = 0\n'
        '[models]\nanalyst_model = "judge"\n'
        "[assistant]\nenabled = true\nlog_interval = 1\nhistory = 3\nmax_tokens = 64\n"
    )
    a = LogAssistant.from_config(load_config(path), tmp_path, lambda _: None)
    a.observe(1, metrics(1))
    assert a.wait_idle(5)
    a.close(timeout=5)
    (failed,) = a.analyses
    assert failed["error"] == (
        f"role analyst (judge) at {server.url[7:]}: max_tokens=64 plus the prompt is over the "
        "model's limit (the model allows 256 tokens); lower [assistant] max_tokens (now 64) or "
        f"[assistant] history (now 3 records per prompt) (server: {said})"
    )


# -- the end of a run: wait for an analysis in flight only when the endpoint answers --------


def session(server, tmp_path, printed, interrupted=lambda: False):
    """Both loops' `assistant_session`, on a config whose analyst is `server`'s."""
    path = tmp_path / "run.toml"
    path.write_text(
        f'[api]\nbase_url = "{server.url}"\napi_key_env = "{KEY_VAR}"\nmax_retries = 0\n'
        '[models]\nanalyst_model = "judge"\n[assistant]\nenabled = true\nlog_interval = 1\n'
    )
    cfg = load_config(path)
    return assistant_session(cfg, tmp_path, printed.append, UsageLedger(), interrupted=interrupted)


def answers_then(delay: float):
    """A reply that answers the first request at once and each later one after `delay` s."""
    seen_so_far = []

    def reply(seen):
        seen_so_far.append(seen)
        return ok(ANSWER) if len(seen_so_far) == 1 else Reply(200, chat_body("Late."), delay=delay)

    return reply


def test_a_run_that_ends_waits_a_little_for_an_analysis_when_the_endpoint_answers(server, tmp_path):
    server.default(CHAT, answers_then(1.0))
    printed: list[str] = []
    with session(server, tmp_path, printed) as a:
        a.observe(1, metrics(1))
        assert a.wait_idle(5)
        a.observe(2, metrics(2))  # in flight when training ends; answered 1 s later
        ended = time.monotonic()
    assert time.monotonic() - ended < 8.0  # FINAL_ANALYSIS_WAIT_S = 10
    assert a.analyses == [{"step": 1, "text": ANSWER}, {"step": 2, "text": "Late."}]
    assert printed == [f"assistant (step 1): {ANSWER}", "assistant (step 2): Late."]


def test_a_hanging_endpoint_is_not_waited_for_when_the_run_ends(server, tmp_path):
    server.default(CHAT, Reply(200, chat_body("late"), delay=30.0))  # never answers in time
    printed: list[str] = []
    with session(server, tmp_path, printed) as a:
        a.observe(1, metrics(1))
        ended = time.monotonic()
    assert time.monotonic() - ended < 2.0  # not the 10 s grace: nothing was ever answered
    assert printed == [
        "assistant: an analysis was still running when training ended; not waited for"
    ]
    assert a.analyses == []


def test_an_answer_arriving_after_the_run_ended_is_never_printed_or_saved(server, tmp_path):
    # Printed later, it would land in whatever the process does next (a second run, the next
    # notebook cell, the next test's captured output): the worker is cancelled instead.
    server.default(CHAT, Reply(200, chat_body("late"), delay=1.0))
    printed: list[str] = []
    with session(server, tmp_path, printed) as a:
        a.observe(1, metrics(1))
        deadline = time.monotonic() + 5
        while server.count(CHAT) == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert server.count(CHAT) == 1  # the request is in flight
    time.sleep(1.5)  # the endpoint has answered by now
    assert printed == [
        "assistant: an analysis was still running when training ended; not waited for"
    ]
    assert a.analyses == [] and not (tmp_path / "assistant.jsonl").exists()
    a._thread.join(2)
    assert not a._thread.is_alive()


def test_an_interrupted_run_never_waits_for_an_analysis(server, tmp_path):
    server.default(CHAT, answers_then(5.0))
    printed: list[str] = []
    with session(server, tmp_path, printed, interrupted=lambda: True) as a:
        a.observe(1, metrics(1))
        assert a.wait_idle(5)
        a.observe(2, metrics(2))
        ended = time.monotonic()
    assert time.monotonic() - ended < 2.0  # Ctrl-C: the answered endpoint is not waited for
    assert a.analyses == [{"step": 1, "text": ANSWER}]
    assert printed == [f"assistant (step 1): {ANSWER}"]


def test_a_training_run_consults_the_assistant_and_reports_its_usage(server, tmp_path, capsys):
    from ascent.rundir import RunDir
    from ascent.train.llm import train_llm

    server.default(CHAT, ok(ANSWER, prompt_tokens=40, completion_tokens=30))
    cfg = load_config(
        None,
        [
            "train.total_steps=4", "train.batch_size=16", "train.micro_batch_size=16",
            "train.eval_steps=0", "train.save_steps=0", "data.eval_size=8",
            "rollout.max_new_tokens=4", "logging.progress=false",
            f'run.output_dir="{tmp_path}"', "run.name=consulted",
            f'api.base_url="{server.url}"', f'api.api_key_env="{KEY_VAR}"',
            'models.analyst_model="judge"', "assistant.enabled=true", "assistant.log_interval=2",
        ],
    )  # fmt: skip
    run_dir = RunDir.create(cfg)
    train_llm(cfg, run_dir)
    saved = [json.loads(x) for x in (run_dir.path / "assistant.jsonl").read_text().splitlines()]
    assert [s["step"] for s in saved] and {s["step"] for s in saved} <= {2, 4}
    assert all(s.get("text") == ANSWER for s in saved)
    sent = json.loads(server.requests(CHAT)[0].body["messages"][1]["content"].splitlines()[-1])
    assert "reward" in sent and sent["step"] in (1, 2)  # the trainer's own metrics
    usage = json.loads((run_dir.path / "api_usage.json").read_text())
    assert usage["analyst"]["requests"] == len(saved) and usage["analyst"][
        "total_tokens"
    ] == 70 * len(saved)
    out = capsys.readouterr().out
    assert "api usage: analyst:" in out and not leaks(out)


def test_a_training_run_does_not_wait_for_an_endpoint_that_never_answered(server, tmp_path, capsys):
    from ascent.rundir import RunDir
    from ascent.train.llm import train_llm

    server.default(CHAT, Reply(200, chat_body("late"), delay=30.0))  # hangs past the run
    cfg = load_config(
        None,
        [
            "train.total_steps=2", "train.batch_size=16", "train.micro_batch_size=16",
            "train.eval_steps=0", "train.save_steps=0", "data.eval_size=8",
            "rollout.max_new_tokens=4", "logging.progress=false",
            f'run.output_dir="{tmp_path}"', "run.name=hung",
            f'api.base_url="{server.url}"', f'api.api_key_env="{KEY_VAR}"',
            'models.analyst_model="judge"', "assistant.enabled=true", "assistant.log_interval=1",
        ],
    )  # fmt: skip
    start = time.monotonic()
    summary = train_llm(cfg, RunDir.create(cfg))
    after_training = time.monotonic() - start - summary["wall_s"]  # setup, and the end
    assert summary["steps"] == 2 and server.count(CHAT) >= 1
    out = capsys.readouterr().out
    assert "assistant: an analysis was still running when training ended; not waited for" in out
    assert after_training < 8.0  # the old end of run waited 10 s for the hanging analysis

"""`ascent serve`: the official openai client against the tiny model on loopback."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import openai
import pytest

from ascent.api import diagnoses as d
from ascent.errors import AscentError
from ascent.serve.local_policy import LocalPolicy, find_model_dir
from ascent.serve.server import Batcher, Generation, GenParams, PolicyServer
from ascent.serve.wire import MAX_N
from tests.api.conftest import KEY_VAR, run

MODEL = "ascent:tiny"


@pytest.fixture(scope="module")
def policy() -> LocalPolicy:
    return LocalPolicy.load(MODEL, device="cpu")


@pytest.fixture
def served(policy):
    with PolicyServer(policy, port=0, window_sec=0.05) as srv:
        yield srv


def chat(client, content="12+34=", **kw):
    return client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": content}], **kw
    )


def test_chat_completion_returns_content_usage_and_finish_reason(served):
    client = openai.OpenAI(base_url=served.url, api_key="unused", max_retries=0)
    r = chat(client, max_tokens=8)
    assert r.object == "chat.completion" and r.model == MODEL
    choice = r.choices[0]
    assert isinstance(choice.message.content, str) and choice.message.role == "assistant"
    assert choice.finish_reason in ("stop", "length")
    assert r.usage.prompt_tokens == len("12+34=")  # one token per character, no BOS
    assert 1 <= r.usage.completion_tokens <= 8
    assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens
    if choice.finish_reason == "length":
        assert r.usage.completion_tokens == 8


def test_greedy_completions_are_deterministic_and_stop_strings_cut(served):
    client = openai.OpenAI(base_url=served.url, api_key="unused", max_retries=0)
    a = client.completions.create(model=MODEL, prompt="7+8=", max_tokens=12, temperature=0)
    b = client.completions.create(model=MODEL, prompt="7+8=", max_tokens=12, temperature=0)
    assert a.choices[0].text == b.choices[0].text
    text = a.choices[0].text
    if len(text) >= 3:
        stop = text[2]
        c = client.completions.create(
            model=MODEL, prompt="7+8=", max_tokens=12, temperature=0, stop=[stop]
        )
        assert c.choices[0].text == text[: text.index(stop)]
        assert c.choices[0].finish_reason == "stop"


def test_models_lists_the_served_name_and_n_gives_choices(served):
    client = openai.OpenAI(base_url=served.url, api_key="unused", max_retries=0)
    assert [m.id for m in client.models.list().data] == [MODEL]
    assert len(chat(client, max_tokens=4, n=3).choices) == 3


def test_streaming_clients_get_the_answer(served):
    client = openai.OpenAI(base_url=served.url, api_key="unused", max_retries=0)
    chunks = list(chat(client, max_tokens=6, stream=True, temperature=0))
    streamed = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert streamed == chat(client, max_tokens=6, temperature=0).choices[0].message.content
    assert chunks[-1].choices[0].finish_reason in ("stop", "length")


def test_concurrent_requests_are_batched_into_one_generate_call(served):
    async def many():
        async with openai.AsyncOpenAI(base_url=served.url, api_key="x", max_retries=0) as c:
            return await asyncio.gather(
                *(
                    c.chat.completions.create(
                        model=MODEL, messages=[{"role": "user", "content": f"{i}+1="}], max_tokens=6
                    )
                    for i in range(8)
                )
            )

    results = run(many())
    assert len(results) == 8 and all(r.choices[0].message.content is not None for r in results)
    sizes = served.batcher.batch_sizes
    assert sum(sizes) == 8
    assert len(sizes) <= 2 and max(sizes) >= 4, sizes  # 8 requests, at most 2 generate calls


def test_batcher_gathers_requests_that_arrive_while_generating():
    release = threading.Event()

    class Slow:
        name, max_context = "fake", None

        def __init__(self):
            self.calls: list[list[str]] = []

        def generate(self, prompts, params):
            self.calls.append(list(prompts))
            release.wait(5)
            return [Generation(p.upper(), "stop", 1, 1) for p in prompts]

    gen = Slow()
    batcher = Batcher(gen, max_batch=16, window_sec=0.0)
    try:
        params = GenParams(max_tokens=4)
        first = batcher.submit("a", params)
        while not gen.calls:
            time.sleep(0.001)
        rest = [batcher.submit(p, params) for p in "bcdef"]
        other = batcher.submit("g", GenParams(max_tokens=4, temperature=0.0))
        release.set()
        assert first.result(5).text == "A"
        assert [f.result(5).text for f in rest] == list("BCDEF")
        assert other.result(5).text == "G"
    finally:
        batcher.close()
    # the 5 that waited share one call; different sampling settings get their own
    assert gen.calls == [["a"], ["b", "c", "d", "e", "f"], ["g"]]


def test_our_client_diagnoses_serve_errors(served, monkeypatch):
    from ascent.api import ApiClient, KeySource, RetryPolicy, RoleSpec

    monkeypatch.setenv(KEY_VAR, "local-key-not-checked")

    def client(model):
        spec = RoleSpec("solver", model, served.url, KEY_VAR)
        return ApiClient(
            {"solver": spec}, concurrency=4, keys=KeySource(), policy=RetryPolicy(30, 0, 0.01, 1)
        )

    async def ask(model, **kw):
        async with client(model) as c:
            return await c.chat("solver", [{"role": "user", "content": "1+1="}], **kw)

    assert run(ask(MODEL, max_tokens=4)).prompt_tokens == 4
    with pytest.raises(d.UnknownModelError, match="closest of the 1 listed: ascent:tiny"):
        run(ask("ascent:tiny2", max_tokens=4))
    allows = r"max_tokens=1000 .*\(the model allows 256 tokens\)"
    with pytest.raises(d.MaxTokensError, match=allows):
        run(ask(MODEL, max_tokens=1000))


def test_bad_requests_are_openai_style_errors(served):
    client = openai.OpenAI(base_url=served.url, api_key="unused", max_retries=0)
    with pytest.raises(openai.BadRequestError, match="'temperature' must be a number in"):
        chat(client, temperature=5)
    with pytest.raises(openai.BadRequestError, match="'logprobs' is not supported"):
        chat(client, logprobs=True)
    with pytest.raises(openai.NotFoundError, match="this server serves `ascent:tiny`"):
        client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "x"}])


class Echo:
    """A Generator without a model: answers each prompt reversed."""

    name, max_context = "echo", None

    def count_tokens(self, text):
        return len(text)

    def chat_prompt(self, messages):
        return "".join(m["content"] for m in messages)

    def generate(self, prompts, params):
        return [Generation(p[::-1], "stop", len(p), len(p)) for p in prompts]


@pytest.fixture
def echo_served():
    with PolicyServer(Echo(), port=0) as srv:
        yield srv


def test_n_is_refused_outside_1_to_max_n(echo_served):
    client = openai.OpenAI(base_url=echo_served.url, api_key="unused", max_retries=0)
    msgs = [{"role": "user", "content": "abc"}]
    r = client.chat.completions.create(model="echo", messages=msgs, n=MAX_N)
    assert len(r.choices) == MAX_N and r.choices[-1].message.content == "cba"
    for n in (0, MAX_N + 1):
        with pytest.raises(openai.BadRequestError) as err:
            client.chat.completions.create(model="echo", messages=msgs, n=n)
        assert err.value.body == {
            "message": f"'n' must be an integer in [1, {MAX_N}]",
            "type": "invalid_request_error",
            "param": "n",
            "code": None,
        }
    assert sum(echo_served.batcher.batch_sizes) == MAX_N  # the refused ones never generated


def test_a_body_that_is_not_utf8_json_is_a_400(echo_served):
    request = urllib.request.Request(f"{echo_served.url}/chat/completions", data=b"\xff\xfe")
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(request, timeout=10)
    assert err.value.code == 400
    assert json.loads(err.value.read())["error"]["message"].startswith("invalid JSON body")


def _save(policy: LocalPolicy, where: Path) -> Path:
    policy.model.save_pretrained(where)
    policy.tokenizer.save_pretrained(where)
    return where


def test_run_directory_serves_its_final_model_then_its_last_stages(policy, tmp_path):
    run_dir = tmp_path / "runs" / "my-run"
    with pytest.raises(AscentError) as err:
        run_dir.mkdir(parents=True)
        find_model_dir(run_dir)
    assert str(err.value) == (
        f"{run_dir}: no model found: expected a model directory with config.json, a run "
        "directory with final-model/ or checkpoints, or one checkpoint; check the path"
    )
    stage2 = _save(policy, run_dir / "stages" / "02-mix" / "final-model")
    _save(policy, run_dir / "stages" / "01-math" / "final-model")
    assert find_model_dir(run_dir) == stage2
    final = _save(policy, run_dir / "final-model")
    assert find_model_dir(run_dir) == final
    assert find_model_dir(final) == final
    with pytest.raises(AscentError, match="no such file or directory"):
        find_model_dir(tmp_path / "nope")
    served = LocalPolicy.load(str(run_dir), device="cpu")
    assert served.name == "my-run" and served.source == str(final)


def test_ascent_serve_command_on_loopback(tmp_path):
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "TRANSFORMERS_VERBOSITY": "error"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "ascent", "serve", MODEL, "--port", "0", "--device", "cpu"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        line = proc.stdout.readline()
        assert line.startswith(f"serving {MODEL} "), line + proc.stderr.read()
        url = line.split(" at ")[1].split()[0]
        assert url.startswith("http://127.0.0.1:") and url.endswith("/v1")
        client = openai.OpenAI(base_url=url, api_key="unused", max_retries=0, timeout=30)
        r = chat(client, max_tokens=5)
        assert r.choices[0].finish_reason in ("stop", "length") and r.usage.prompt_tokens == 6
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0


def test_a_checkpoint_without_tokenizer_files_uses_the_runs_tokenizer(policy, tmp_path):
    run_dir = tmp_path / "run"
    weights = run_dir / "checkpoints" / "step-000010" / "model"
    policy.model.save_pretrained(weights)
    (run_dir / "config.toml").write_text(f'[model]\nname_or_path = "{MODEL}"\n')
    served = LocalPolicy.load(str(weights.parent), device="cpu")
    assert served.count_tokens("12+34=") == 6


def test_a_classic_ppo_checkpoint_is_refused_in_one_line(tmp_path):
    ckpt = tmp_path / "ppo" / "checkpoints" / "step-000010"
    ckpt.mkdir(parents=True)
    (tmp_path / "ppo" / "config.toml").write_text('[env]\nid = "CartPole-v1"\n')
    (ckpt / "state.pt").write_bytes(b"")
    with pytest.raises(AscentError, match=r"no LLM run config\.toml above it"):
        find_model_dir(ckpt)

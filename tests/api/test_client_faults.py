"""Fault tests: a real HTTP server on loopback answers as scripted; the client must retry (or
not) as documented and end with the right one-line diagnosis, never leaking the key."""

from __future__ import annotations

import asyncio
import itertools
import socket
import threading
import time

import pytest

from ascent.api import diagnoses as d
from tests.api.conftest import KEY, KEY_VAR, chat_once, leaks, make_client, run
from tests.api.scripted_server import Reply, chat_body, models_body, ok

CHAT = "/v1/chat/completions"
MODELS = "/v1/models"


def gaps(server, path=CHAT):
    times = [s.at for s in server.requests(path)]
    return [b - a for a, b in itertools.pairwise(times)]


def test_429_then_success_waits_what_retry_after_asks(server, api_log):
    server.script(
        CHAT, [Reply(429, {"error": {"message": "slow down"}}, {"Retry-After": "1"}), ok("hello")]
    )
    result = run(chat_once(make_client(server.url, backoff_sec=0.01)))
    assert result.text == "hello" and result.attempts == 2
    assert server.count(CHAT) == 2
    assert 0.95 <= gaps(server)[0] < 2.0  # backoff alone would have waited ~0.01 s
    assert "retry 1/2 in 1.00 s" in api_log.text


def test_retry_after_ms_and_cap_by_max_wait(server):
    server.script(
        CHAT,
        [
            Reply(429, None, {"Retry-After-Ms": "150"}),
            Reply(429, None, {"Retry-After": "30"}),
            ok(),
        ],
    )
    start = time.monotonic()
    result = run(chat_once(make_client(server.url, max_wait_sec=0.3)))
    assert result.attempts == 3
    assert 0.14 <= gaps(server)[0] < 0.6
    assert 0.29 <= gaps(server)[1] < 0.8  # 30 s asked, capped at max_wait_sec
    assert time.monotonic() - start < 3


def test_500_then_success_backs_off_exponentially(server):
    server.script(CHAT, [Reply(500, {"error": {"message": "boom"}}), Reply(503, None), ok("fine")])
    result = run(chat_once(make_client(server.url, backoff_sec=0.1)))
    assert result.text == "fine" and result.attempts == 3
    first, second = gaps(server)
    assert 0.075 <= first < 0.5  # 0.1 s ±25% jitter
    assert 0.15 <= second < 0.8  # doubled
    assert second > first


def test_always_429_gives_rate_limited_with_worker_advice(server):
    server.default(CHAT, Reply(429, {"error": {"message": "rate limit"}}))
    with pytest.raises(d.RateLimitedError) as err:
        run(chat_once(make_client(server.url, max_retries=2, concurrency=8)))
    assert server.count(CHAT) == 3
    assert str(err.value) == (
        "role solver (m) at " + server.url.split("//")[1] + ": still rate-limited (429) after 2 "
        "retries; lower [rollout] async_workers (now 8), raise [api] max_retries, or give this "
        "role its own key ([models.solver] api_key_env)"
    )


def test_401_is_not_retried_and_names_the_variable_without_leaking(server, api_log, capsys):
    echo = f"Incorrect API key provided: {KEY[:8]}****{KEY[-4:]} (full: {KEY})"
    server.default(CHAT, Reply(401, {"error": {"message": echo}}))
    with pytest.raises(d.AuthError) as err:
        run(chat_once(make_client(server.url)))
    assert server.count(CHAT) == 1
    msg = str(err.value)
    assert msg.startswith("role solver (m) at 127.0.0.1")
    assert f"401 Unauthorized: the key in {KEY_VAR} was refused" in msg
    assert "\n" not in msg
    assert not leaks(msg + api_log.text + repr(err.value) + capsys.readouterr().err)
    # the request did carry the key
    assert server.requests(CHAT)[0].headers["authorization"] == f"Bearer {KEY}"


@pytest.mark.parametrize("suffix", ["", "/", "/v1", "/v1/", "/v1/v1", "/v1/chat/completions"])
def test_base_url_with_or_without_v1_never_doubles_it(server, suffix):
    server.default(CHAT, ok("hi"))
    server.default("/v1/v1/chat/completions", Reply(404, {"error": {"message": "Not Found"}}))
    result = run(chat_once(make_client(server.url + suffix)))
    assert result.text == "hi"
    assert [s.path for s in server.seen] == [CHAT]


def test_api_root_without_v1_gets_it(server):
    server.default("/api/v1/chat/completions", ok("via api"))
    assert run(chat_once(make_client(server.url + "/api"))).text == "via api"


def test_version_less_root_with_append_v1_false(server):
    server.default("/chat/completions", ok("no version"))
    assert run(chat_once(make_client(server.url, append_v1=False))).text == "no version"
    assert [s.path for s in server.seen] == ["/chat/completions"]


def test_404_at_an_appended_v1_points_at_append_v1(server):
    server.default("/chat/completions", ok("no version"))
    with pytest.raises(d.BaseUrlError) as err:
        run(chat_once(make_client(server.url)))
    assert str(err.value).endswith(
        "(a root without /v1, such as https://api.perplexity.ai, needs [api] append_v1 = false)"
    )


def test_404_at_wrong_base_url_says_base_url(server):
    with pytest.raises(d.BaseUrlError) as err:
        run(chat_once(make_client(server.url + "/wrong/v1")))
    assert server.count("/wrong/v1/chat/completions") == 1  # a 404 is not retried
    assert server.count("/wrong/v1/models") == 1  # asked to tell base_url from model
    assert str(err.value).startswith(
        f"role solver (m) at {server.url[7:]}: 404 Not Found at "
        f"{server.url}/wrong/v1/chat/completions; base_url is probably wrong"
    )


def test_unknown_model_lists_the_closest_available(server):
    server.default(
        CHAT, Reply(404, {"error": {"message": "The model `gpt-4o-mni` does not exist"}})
    )
    server.default(
        MODELS, Reply(200, models_body("gpt-4o-mini", "gpt-4o", "o3-mini", "text-embedding-3"))
    )
    with pytest.raises(d.UnknownModelError) as err:
        run(chat_once(make_client(server.url, model="gpt-4o-mni")))
    assert str(err.value) == (
        f"role solver: model 'gpt-4o-mni' is not served by {server.url[7:]}; closest of the 4 "
        "listed: gpt-4o-mini, gpt-4o, o3-mini; fix the name in [models]"
    )
    assert server.count(CHAT) == 1


def test_unknown_model_when_models_is_not_listed(server):
    server.default(CHAT, Reply(404, {"error": {"message": "model not found: foo"}}))
    with pytest.raises(d.UnknownModelError, match="does not know model 'foo'"):
        run(chat_once(make_client(server.url, model="foo")))


def _openrouter_unknown(seen):
    model = seen.body["model"]
    if model == "deepseek/deepseek-chat":
        return ok("from fallback", model=model)
    return Reply(400, {"error": {"message": f"{model} is not a valid model ID", "code": 400}})


def test_400_not_a_valid_model_id_is_an_unknown_model_with_the_list(server):
    server.default(CHAT, _openrouter_unknown)
    server.default(MODELS, Reply(200, models_body("deepseek/deepseek-r1", "openai/gpt-4o")))
    with pytest.raises(d.UnknownModelError) as err:
        run(chat_once(make_client(server.url, model="deepseek/deepseek-r2")))
    assert str(err.value) == (
        f"role solver: model 'deepseek/deepseek-r2' is not served by {server.url[7:]}; closest "
        "of the 2 listed: deepseek/deepseek-r1; fix the name in [models]"
    )
    assert server.count(CHAT) == 1 and server.count(MODELS) == 1  # not retried; /models asked


def test_400_unknown_model_falls_back_to_the_roles_fallback(server):
    server.default(CHAT, _openrouter_unknown)
    server.default(MODELS, Reply(200, models_body("deepseek/deepseek-chat")))
    client = make_client(
        server.url, model="deepseek/deepseek-r2", fallback="deepseek/deepseek-chat"
    )
    result = run(chat_once(client))
    assert result.used_fallback and result.text == "from fallback"
    assert [s.body["model"] for s in server.requests(CHAT)] == [
        "deepseek/deepseek-r2",
        "deepseek/deepseek-chat",
    ]


def test_400_model_not_exist_when_models_is_not_listed(server):
    server.default(CHAT, Reply(400, {"error": {"message": "Model Not Exist"}}))
    with pytest.raises(d.UnknownModelError) as err:
        run(chat_once(make_client(server.url, model="deepseek-r2")))
    assert str(err.value) == (
        f"role solver (deepseek-r2) at {server.url[7:]}: the endpoint does not know model "
        "'deepseek-r2' (Model Not Exist); check the model name in [models] (the endpoint does "
        "not list its models)"
    )


@pytest.mark.parametrize(("status", "reason"), [(408, "Request Timeout"), (409, "Conflict")])
def test_408_and_409_after_all_retries_are_called_transient(server, status, reason):
    server.default(CHAT, Reply(status, {"error": {"message": "try again"}}))
    with pytest.raises(d.ServerError) as err:
        run(chat_once(make_client(server.url, max_retries=1)))
    assert server.count(CHAT) == 2
    assert str(err.value) == (
        f"role solver (m) at {server.url[7:]}: {status} {reason} after 1 retry (try again); a "
        "transient failure on the endpoint's side, not a fault in the request: retry later, "
        "raise [api] max_retries, or set [models.solver] fallback"
    )


def test_empty_choices_is_retried_then_explained(server):
    server.default(
        CHAT,
        Reply(200, {"id": "x", "choices": [], "error": {"message": "Provider returned error"}}),
    )
    with pytest.raises(d.NoChoicesError) as err:
        run(chat_once(make_client(server.url, max_retries=1)))
    assert server.count(CHAT) == 2
    assert str(err.value) == (
        f"role solver (m) at {server.url[7:]}: the answer has no choices (server: Provider "
        "returned error); usually an upstream provider error: retry later, or set "
        "[models.solver] fallback"
    )


def test_missing_choices_key_then_success(server):
    server.script(CHAT, [Reply(200, {"id": "x"}), ok("second")])
    assert run(chat_once(make_client(server.url))).text == "second"


def test_truncated_json_is_a_bad_response_not_retried(server):
    server.default(CHAT, Reply(200, '{"id": "chatcmpl-1", "choices": [{"index": 0, "mess'))
    with pytest.raises(d.BadResponseError) as err:
        run(chat_once(make_client(server.url)))
    assert server.count(CHAT) == 1
    assert "the answer is not valid JSON (Unterminated string" in str(err.value)


def test_html_page_at_base_url_is_a_base_url_error(server):
    server.default(
        CHAT, Reply(200, b"<html><body>Welcome</body></html>", {"Content-Type": "text/html"})
    )
    with pytest.raises(d.BaseUrlError, match="answered with a web page, not JSON"):
        run(chat_once(make_client(server.url)))


def test_slow_answer_past_timeout_retries_then_times_out(server):
    server.default(CHAT, Reply(200, chat_body("late"), delay=1.0))
    start = time.monotonic()
    with pytest.raises(d.RequestTimeoutError) as err:
        run(chat_once(make_client(server.url, timeout_sec=0.3, max_retries=1)))
    elapsed = time.monotonic() - start
    assert server.count(CHAT) == 2
    assert 0.6 <= elapsed < 2.5
    assert str(err.value) == (
        f"role solver (m) at {server.url[7:]}: no answer within timeout_sec=0.3 s after 1 retry; "
        "raise [api] timeout_sec, lower max_tokens, or set a fallback model"
    )


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_proxy_variable_pointing_nowhere_is_named(server, monkeypatch):
    port = _closed_port()
    monkeypatch.setenv("HTTP_PROXY", f"http://user:pw@127.0.0.1:{port}")
    with pytest.raises(d.ProxyError) as err:
        run(chat_once(make_client(server.url, max_retries=1)))
    msg = str(err.value)
    assert server.count(CHAT) == 0
    assert f"could not connect through the proxy in HTTP_PROXY (http://127.0.0.1:{port})" in msg
    assert "unset HTTP_PROXY, or add 127.0.0.1 to NO_PROXY" in msg
    assert "pw" not in msg


def test_no_proxy_bypass_reaches_the_server(server, monkeypatch):
    monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{_closed_port()}")
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    server.default(CHAT, ok("direct"))
    assert run(chat_once(make_client(server.url))).text == "direct"


def test_unreachable_endpoint_without_proxy(monkeypatch):
    port = _closed_port()
    with pytest.raises(
        d.UnreachableError, match=f"could not connect to http://127.0.0.1:{port}/v1"
    ):
        run(chat_once(make_client(f"http://127.0.0.1:{port}", max_retries=1)))


def test_max_tokens_over_the_model_limit(server):
    said = (
        "This model's maximum context length is 4096 tokens. However, you requested 100012 "
        "tokens (12 in the messages, 100000 in the completion)."
    )
    server.default(
        CHAT, Reply(400, {"error": {"message": said, "code": "context_length_exceeded"}})
    )
    with pytest.raises(d.MaxTokensError) as err:
        run(chat_once(make_client(server.url), max_tokens=100000))
    assert server.count(CHAT) == 1
    assert str(err.value).startswith(
        f"role solver (m) at {server.url[7:]}: max_tokens=100000 plus the prompt is over the "
        "model's limit (the model allows 4096 tokens); lower max_tokens"
    )


def test_other_400_quotes_the_server_scrubbed(server):
    server.default(
        CHAT, Reply(400, {"error": {"message": f"temperature must be <= 2 (key {KEY})"}})
    )
    with pytest.raises(d.RequestRejectedError) as err:
        run(chat_once(make_client(server.url), temperature=5.0))
    assert "request rejected with 400: temperature must be <= 2" in str(err.value)
    assert not leaks(str(err.value))


def test_concurrency_limit_holds_requests_in_flight(server):
    server.default(CHAT, Reply(200, chat_body("x"), delay=0.15))

    async def many():
        async with make_client(server.url, concurrency=2) as client:
            return await asyncio.gather(
                *(client.chat("solver", [{"role": "user", "content": str(i)}]) for i in range(6))
            )

    results = run(many())
    assert len(results) == 6
    assert server.max_in_flight == 2


def test_one_client_serves_one_asyncio_run_after_another(server):
    server.default(CHAT, Reply(200, chat_body("x"), delay=0.05))
    client = make_client(server.url, concurrency=1)

    async def three():
        msgs = [{"role": "user", "content": "hi"}]
        return await asyncio.gather(*(client.chat("solver", msgs) for _ in range(3)))

    async def three_and_close():
        async with client:
            return await three()

    assert len(run(three())) == 3  # left open: the next loop must not reuse its connections
    assert len(run(three_and_close())) == 3
    assert len(run(three_and_close())) == 3
    assert server.count(CHAT) == 9 and server.max_in_flight == 1


def test_two_event_loops_at_once_are_refused(server):
    server.default(CHAT, Reply(200, chat_body("x"), delay=0.5))
    client = make_client(server.url)
    msgs = [{"role": "user", "content": "hi"}]
    other = threading.Thread(target=lambda: run(chat_once(client)))
    other.start()
    try:
        while not server.count(CHAT):
            time.sleep(0.01)
        with pytest.raises(RuntimeError, match="one client per thread"):
            run(client.chat("solver", msgs))
    finally:
        other.join()


def test_fallback_model_answers_when_primary_keeps_failing(server):
    def route(model):
        return [s for s in server.requests(CHAT) if s.body["model"] == model]

    server.script(CHAT, [Reply(503, None), Reply(503, None), ok("from fallback", model="small")])
    client = make_client(server.url, model="big", fallback="small", max_retries=1)
    result = run(chat_once(client))
    assert result.used_fallback and result.model == "small" and result.text == "from fallback"
    assert len(route("big")) == 2 and len(route("small")) == 1
    usage = client.usage.snapshot()["solver"]
    assert (usage.fallbacks, usage.retries, usage.requests, usage.failures) == (1, 1, 1, 0)


def test_fallback_is_not_used_for_a_bad_key(server):
    server.default(CHAT, Reply(401, None))
    with pytest.raises(d.AuthError):
        run(chat_once(make_client(server.url, model="big", fallback="small")))
    assert server.count(CHAT) == 1


def test_usage_is_counted_per_role_and_written(server, tmp_path):
    server.default(CHAT, ok("x", prompt_tokens=11, completion_tokens=3))
    client = make_client(server.url)

    async def two():
        async with client:
            for _ in range(2):
                await client.chat("solver", [{"role": "user", "content": "hi"}])

    run(two())
    u = client.usage.snapshot()["solver"]
    assert (u.requests, u.prompt_tokens, u.completion_tokens) == (2, 22, 6)
    path = client.usage.write(tmp_path)
    assert '"total_tokens": 28' in path.read_text()
    assert client.usage.summary_lines()[0].startswith(
        "solver: 2 requests, 22 prompt + 6 completion"
    )


def test_401_from_an_endpoint_configured_without_key(server):
    server.default(CHAT, Reply(401, None))
    with pytest.raises(d.AuthError, match="this endpoint wants a key but api_key_env is empty"):
        run(chat_once(make_client(server.url, key_var="")))
    assert server.requests(CHAT)[0].headers["authorization"] == "Bearer no-key"


def test_usage_finish_prints_and_writes_at_the_end_of_a_run(server, tmp_path):
    server.default(CHAT, ok("x", prompt_tokens=5, completion_tokens=2))
    client = make_client(server.url)
    printed: list[str] = []
    client.usage.finish(tmp_path / "run", printed.append)
    assert printed == []  # nothing ran: nothing to say
    run(chat_once(client))
    client.usage.finish(tmp_path / "run", printed.append)
    assert printed[0].startswith("api usage: solver: 1 requests, 5 prompt + 2 completion tokens")
    assert (tmp_path / "run" / "api_usage.json").is_file()

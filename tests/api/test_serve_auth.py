"""`ascent serve --api-key-env VAR`: a real server on loopback, the official openai client."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager

import httpx
import openai
import pytest

from ascent.api import diagnoses as d
from ascent.api.keys import Secret
from ascent.serve.batching import Generation
from ascent.serve.server import PolicyServer, exposure_warning, is_loopback, read_serve_key
from tests.api.conftest import KEY, KEY_VAR, chat_once, leaks, make_client, run

WRONG = "sk-Wrong8RmW3vXk2PbN7yLc4TfH9sQ"  # long enough that a leak of 5 characters shows
INVALID_KEY = {"type": "invalid_request_error", "code": "invalid_api_key", "param": None}


class Reverse:
    """A Generator without a model: answers each prompt reversed."""

    name, max_context = "reverse", None

    def count_tokens(self, text):
        return len(text)

    def chat_prompt(self, messages):
        return "".join(m["content"] for m in messages)

    def generate(self, prompts, params):
        return [Generation(p[::-1], "stop", len(p), len(p)) for p in prompts]


@pytest.fixture
def keyed(caplog) -> Iterator[PolicyServer]:
    caplog.set_level(logging.DEBUG)  # every log line the server writes is checked for the key
    with PolicyServer(Reverse(), port=0, api_key=read_serve_key(KEY_VAR)) as srv:
        yield srv


def ask(client: openai.OpenAI):
    return client.chat.completions.create(
        model="reverse", messages=[{"role": "user", "content": "abc"}]
    )


def test_the_right_key_gets_a_completion_and_a_wrong_one_an_authentication_error(
    keyed, caplog, capsys
):
    good = openai.OpenAI(base_url=keyed.url, api_key=KEY, max_retries=0)
    assert ask(good).choices[0].message.content == "cba"
    assert [m.id for m in good.models.list().data] == ["reverse"]

    bad = openai.OpenAI(base_url=keyed.url, api_key=WRONG, max_retries=0)
    with pytest.raises(openai.AuthenticationError) as err:
        ask(bad)
    assert err.value.status_code == 401
    said = f"Incorrect API key provided: 'sk-W…' ({len(WRONG)} chars)"
    assert err.value.body == {"message": said} | INVALID_KEY
    with pytest.raises(openai.AuthenticationError):
        bad.models.list()
    with pytest.raises(openai.AuthenticationError):  # a prefix of the key is not the key
        ask(openai.OpenAI(base_url=keyed.url, api_key=KEY[:-1], max_retries=0))

    out, errs = capsys.readouterr()
    seen = str(err.value) + out + errs + caplog.text
    assert leaks(seen) == [] and leaks(seen, WRONG) == []
    assert sum(keyed.batcher.batch_sizes) == 1  # refused requests never reached the model


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/v1/models"),
        ("GET", "/models"),
        ("POST", "/v1/chat/completions"),
        ("POST", "/v1/completions"),
        ("GET", "/v1/no-such-route"),  # unknown routes are not revealed either
        ("POST", "/no-such-route"),
    ],
)
def test_every_route_answers_401_in_openai_shape_without_the_key(keyed, method, path):
    body = {"model": "reverse", "messages": [{"role": "user", "content": "abc"}], "prompt": "a"}
    host = keyed.url.removesuffix("/v1")
    with httpx.Client(base_url=host, timeout=10) as http:
        for headers in ({}, {"Authorization": f"Basic {KEY}"}, {"Authorization": "Bearer"}):
            r = http.request(method, path, json=body, headers=headers)
            assert r.status_code == 401
            assert r.headers["WWW-Authenticate"] == "Bearer"
            assert r.json() == {"error": {"message": r.json()["error"]["message"]} | INVALID_KEY}
            assert "Authorization: Bearer <key>" in r.json()["error"]["message"]
            assert leaks(r.text) == []
        # the refused requests' bodies were drained: the same connection still works
        ok = http.post("/v1/completions", json=body, headers={"Authorization": f"Bearer {KEY}"})
        assert ok.status_code == 200 and ok.json()["choices"][0]["text"] == "a"
    assert keyed.batcher.batch_sizes == [1]


def test_without_a_key_every_request_is_served_as_before():
    with PolicyServer(Reverse(), port=0) as srv:
        r = httpx.get(f"{srv.url}/models", timeout=10)
    assert r.status_code == 200 and r.json()["data"][0]["id"] == "reverse"


def test_our_client_sends_the_key_from_api_key_env_and_diagnoses_a_wrong_one(keyed, monkeypatch):
    assert run(chat_once(make_client(keyed.url, model="reverse"))).text == "ih"
    monkeypatch.setenv("ASCENT_TEST_OTHER_KEY", WRONG)
    client = make_client(keyed.url, model="reverse", key_var="ASCENT_TEST_OTHER_KEY")
    with pytest.raises(d.AuthError, match="401 Unauthorized: the key in ASCENT_TEST_OTHER_KEY"):
        run(chat_once(client))


def test_the_key_is_read_from_the_named_variable_and_prints_as_4_characters(monkeypatch):
    key = read_serve_key(KEY_VAR)
    assert isinstance(key, Secret) and key.reveal() == KEY
    assert leaks(repr(key) + str(key) + key.masked) == []
    monkeypatch.setenv(KEY_VAR, f"  {KEY}\n")
    assert read_serve_key(KEY_VAR).reveal() == KEY


def test_an_unset_empty_or_pasted_key_variable_is_refused_in_one_line(monkeypatch):
    monkeypatch.delenv(KEY_VAR)
    with pytest.raises(d.KeyMissingError) as err:
        read_serve_key(KEY_VAR)
    assert str(err.value) == (
        f"--api-key-env {KEY_VAR}: the variable {KEY_VAR} is not set; "
        f"export {KEY_VAR}=<the key clients must send>"
    )
    monkeypatch.setenv(KEY_VAR, "  ")
    with pytest.raises(d.KeyMissingError, match=f"the variable {KEY_VAR} is set but empty"):
        read_serve_key(KEY_VAR)
    with pytest.raises(Exception, match="takes the NAME of an environment variable") as err:
        read_serve_key(KEY)  # the key itself pasted where its variable's name goes
    assert f"'sk-Z…' ({len(KEY)} chars)" in str(err.value) and leaks(str(err.value)) == []


@pytest.mark.parametrize("host", ["127.0.0.1", "127.8.9.10", "::1", "[::1]", "localhost"])
def test_loopback_hosts_need_no_key_and_get_no_warning(host):
    assert is_loopback(host)
    assert exposure_warning(host, 8000, keyed=False) is None


@pytest.mark.parametrize("host", ["0.0.0.0", "", "::", "192.168.1.20", "gpu-box.lan"])
def test_other_hosts_without_a_key_get_a_warning_with_the_fix(host):
    assert not is_loopback(host)
    warning = exposure_warning(host, 8000, keyed=False)
    assert warning.startswith("warning: ") and "\n" not in warning
    assert "anyone who can reach this port can use the model" in warning
    assert "--api-key-env VAR" in warning and "8000" in warning
    assert exposure_warning(host, 8000, keyed=True) is None


def test_cli_with_the_key_variable_unset_exits_2_in_one_line(run_cli, monkeypatch):
    monkeypatch.delenv(KEY_VAR)
    code, out, err = run_cli("serve", "ascent:tiny", "--port", "0", "--api-key-env", KEY_VAR)
    assert (code, out) == (2, "")
    assert err == f"error: --api-key-env {KEY_VAR}: the variable {KEY_VAR} is not set; " + (
        f"export {KEY_VAR}=<the key clients must send>\n"
    )
    code, out, err = run_cli("serve", "ascent:tiny", "--api-key-env", KEY)  # key, not its name
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err
    assert leaks(out + err) == []


def test_serve_help_explains_the_option(run_cli):
    code, out, _ = run_cli("serve", "--help")
    assert code == 0
    assert "--api-key-env VAR" in out and "NAME of the environment" in " ".join(out.split())


@contextmanager
def ascent_serve(*args: str) -> Iterator[tuple[str, subprocess.Popen]]:
    """`ascent serve ascent:tiny --port 0 ARGS` in a subprocess; yields its serving line."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "TRANSFORMERS_VERBOSITY": "error"}
    command = [sys.executable, "-m", "ascent", "serve", "ascent:tiny", "--port", "0"]
    proc = subprocess.Popen(
        [*command, "--device", "cpu", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        line = proc.stdout.readline()
        assert line.startswith("serving ascent:tiny "), line + proc.stderr.read()
        yield line, proc
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def test_ascent_serve_with_a_key_refuses_others_and_never_prints_the_key():
    with ascent_serve("--api-key-env", KEY_VAR) as (line, proc):
        assert f"key required (from ASCENT_TEST_API_KEY: 'sk-Z…' ({len(KEY)} chars))" in line
        url = line.split(" at ")[1].split()[0]
        kw = {"base_url": url, "max_retries": 0, "timeout": 30}
        with pytest.raises(openai.AuthenticationError):
            openai.OpenAI(api_key=WRONG, **kw).models.list()
        client = openai.OpenAI(api_key=KEY, **kw)
        r = client.completions.create(model="ascent:tiny", prompt="1+2=", max_tokens=3)
        assert r.choices[0].finish_reason in ("stop", "length")
        assert httpx.get(f"{url}/models", timeout=10).status_code == 401
    out, err = proc.communicate(timeout=15)
    assert proc.returncode == 0
    assert "warning" not in err  # loopback: nothing to warn about
    assert leaks(line + out + err) == [] and leaks(line + out + err, WRONG) == []


def test_ascent_serve_on_every_interface_without_a_key_warns_once():
    with ascent_serve("--host", "0.0.0.0") as (line, proc):
        port = line.split(" at ")[1].split()[0].split(":")[2].split("/")[0]
        r = httpx.get(f"http://127.0.0.1:{port}/v1/models", timeout=10)
        assert r.status_code == 200  # no key: served as before
    _, err = proc.communicate(timeout=15)
    warnings = [w for w in err.splitlines() if w.startswith("warning: ")]
    assert warnings == [exposure_warning("0.0.0.0", int(port), keyed=False)]

"""`ascent smoke` and `ascent doctor` through the CLI, against a scripted loopback endpoint."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.api.conftest import KEY, KEY_VAR, leaks
from tests.api.scripted_server import Reply, models_body, ok

CHAT = "/v1/chat/completions"


def config(tmp_path: Path, url: str, extra: str = "") -> Path:
    path = tmp_path / "roles.toml"
    path.write_text(
        f"""
[api]
base_url = "{url}"
api_key_env = "{KEY_VAR}"
timeout_sec = 5
max_retries = 1
backoff_sec = 0.01

[models]
solver_model = "small"
hypothesis_model = "big"
{extra}
"""
    )
    return path


def test_smoke_prints_one_row_per_role(run_cli, server, tmp_path):
    server.default(CHAT, ok("ok\nmore text"))
    code, out, err = run_cli("smoke", str(config(tmp_path, server.url)))
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].split() == ["role", "model", "endpoint", "status", "latency", "answer"]
    assert lines[1].split()[:4] == ["hypothesis", "big", server.url[7:], "ok"]
    assert lines[2].split()[:4] == ["solver", "small", server.url[7:], "ok"]
    assert lines[1].endswith("  ok") and " s  " in lines[1]
    assert server.count(CHAT) == 2
    body = server.requests(CHAT)[0].body
    assert body["max_tokens"] == 16 and "temperature" not in body


def test_smoke_fails_with_the_diagnosis_and_tests_the_fallback(run_cli, server, tmp_path):
    def by_model(seen):
        if seen.body["model"] in ("small", "big"):
            return ok("fine")
        return Reply(404, {"error": {"message": "model not found"}})

    server.default(CHAT, by_model)
    server.default("/v1/models", Reply(200, models_body("small", "big")))
    path = config(tmp_path, server.url, '[models.solver]\nfallback = "tiny-typo"\n')
    code, out, err = run_cli("smoke", str(path))
    assert code == 2
    lines = out.splitlines()
    rows = {line.split("  ")[0].strip(): line for line in lines[1:4]}
    assert set(rows) == {"hypothesis", "solver", "solver (fallback)"}
    assert (
        "FAILED" in rows["solver (fallback)"] and "UnknownModelError" in rows["solver (fallback)"]
    )
    assert "ok" in rows["solver"].split()
    assert lines[4] == (
        f"role solver: model 'tiny-typo' is not served by {server.url[7:]}; available: big, "
        "small; fix the name in [models]"
    )
    assert err == "error: smoke failed for 1 of 3: solver (fallback)\n"


def test_smoke_without_a_key_names_the_variable_and_sends_nothing(
    run_cli, server, tmp_path, monkeypatch
):
    monkeypatch.delenv(KEY_VAR)
    code, out, _err = run_cli("smoke", str(config(tmp_path, server.url)))
    assert code == 2
    assert f"API key variable {KEY_VAR} is not set" in out
    assert server.seen == []


def test_smoke_with_no_roles_says_how_to_add_one(run_cli, tmp_path):
    path = tmp_path / "empty.toml"
    path.write_text("[api]\n")
    code, _out, err = run_cli("smoke", str(path))
    assert code == 2
    assert 'no roles in [models]; name one, e.g. solver_model = "gpt-4o-mini"' in err


def free_disk(monkeypatch: pytest.MonkeyPatch, gib: float) -> None:
    """The doctor's disk check sees `gib` free, whatever this machine's disk holds."""
    usage = shutil.disk_usage("/")._replace(free=int(gib * 2**30))
    monkeypatch.setattr("ascent.doctor.checks.shutil.disk_usage", lambda _path: usage)


def test_doctor_checks_keys_endpoints_and_models(run_cli, server, tmp_path, monkeypatch):
    free_disk(monkeypatch, 80.0)
    server.default("/v1/models", Reply(200, models_body("small", "big", "other")))
    code, out, err = run_cli("doctor", str(config(tmp_path, server.url)))
    assert code == 0, out + err
    status = {line[6:].split("  ")[0].strip(): line[:4].strip() for line in out.splitlines()}
    for name in (
        "config",
        "python",
        "torch / CUDA",
        "optional extras",
        "disk space",
        f"key {KEY_VAR}",
        f"endpoint {server.url}/v1",
        "model solver",
        "model hypothesis",
    ):
        assert status[name] == "ok", (name, out)
    assert "sandbox isolation" in status
    assert server.count(CHAT) == 0  # the doctor never spends tokens
    assert f"set in the environment ('{KEY[:4]}…' ({len(KEY)} chars))" in out
    assert not leaks(out + err)


def test_doctor_reports_each_failure_and_goes_on(run_cli, server, tmp_path, monkeypatch):
    server.default("/v1/models", Reply(401, {"error": {"message": f"bad key {KEY}"}}))
    extra = '[models.judge]\nmodel = "j"\napi_key_env = "ASCENT_UNSET_VAR"\n'
    monkeypatch.delenv("ASCENT_UNSET_VAR", raising=False)
    code, out, err = run_cli("doctor", str(config(tmp_path, server.url, extra)))
    assert code == 2
    fails = [line for line in out.splitlines() if line.startswith("FAIL")]
    assert any("API key variable ASCENT_UNSET_VAR is not set" in line for line in fails)
    assert any("401 Unauthorized" in line for line in fails)
    assert not leaks(out + err)


def test_doctor_with_a_broken_config_still_checks_the_machine(run_cli, tmp_path):
    path = tmp_path / "bad.toml"
    path.write_text("[api]\ntimeout_sec = -1\n")
    code, out, _err = run_cli("doctor", str(path))
    assert code == 2
    assert out.splitlines()[0].startswith("FAIL  config")
    assert "torch / CUDA" in out and "disk space" in out
    assert "GiB free for checkpoints in runs/" in out  # [run] output_dir's default


def test_doctor_measures_the_disk_of_the_configs_output_dir(run_cli, server, tmp_path):
    server.default("/v1/models", Reply(200, models_body("small", "big")))
    out_dir = tmp_path / "checkpoints-here"
    path = config(tmp_path, server.url, f'[run]\noutput_dir = "{out_dir}"\n')
    _code, out, _err = run_cli("doctor", str(path))
    assert f"GiB free for checkpoints in {out_dir}/" in out


@pytest.mark.parametrize(
    ("gib", "status", "code"), [(0.5, "FAIL", 2), (3.0, "WARN", 0), (12.0, "ok", 0)]
)
def test_doctor_warns_below_5_gib_free_and_fails_below_1(
    run_cli, server, tmp_path, monkeypatch, gib, status, code
):
    free_disk(monkeypatch, gib)
    server.default("/v1/models", Reply(200, models_body("small", "big")))
    got, out, err = run_cli("doctor", str(config(tmp_path, server.url)))
    line = next(line for line in out.splitlines() if line[6:].startswith("disk space"))
    assert line[:4].strip() == status, out
    assert f"{gib:.1f} GiB free for checkpoints" in line
    assert got == code, out + err


# -- a classic PPO config: the log assistant's role is its only one ----------------------------

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "ppo_cartpole.toml"


def with_assistant(url: str) -> list[str]:
    """`--set`s that give examples/ppo_cartpole.toml its (commented-out) log assistant."""
    sets = [
        f'api.base_url="{url}"',
        f'api.api_key_env="{KEY_VAR}"',
        "api.max_retries=0",
        'models.analyst_model="judge"',
        "assistant.enabled=true",
    ]
    return [arg for s in sets for arg in ("--set", s)]


def test_smoke_on_a_classic_config_asks_the_log_assistants_role_once(run_cli, server):
    server.default(CHAT, ok("ok"))
    code, out, err = run_cli("smoke", str(EXAMPLE), *with_assistant(server.url))
    assert code == 0, err
    lines = out.splitlines()
    assert len(lines) == 2 and lines[1].split()[:4] == ["analyst", "judge", server.url[7:], "ok"]
    assert server.count(CHAT) == 1
    assert server.requests(CHAT)[0].body["max_tokens"] == 16


def test_smoke_on_a_classic_config_without_an_assistant_says_there_is_nothing_to_ask(run_cli):
    code, out, err = run_cli("smoke", str(EXAMPLE))
    assert code == 2 and out == ""
    assert err == (
        f"error: {EXAMPLE}: a classic PPO run calls an API only for the log assistant, and "
        "[assistant] enabled = false, so there is nothing to smoke-test; enable it with [models] "
        "analyst_model and [assistant] enabled = true (examples/ppo_cartpole.toml)\n"
    )


def test_doctor_on_a_classic_config_checks_the_assistants_endpoint_or_skips_the_api(
    run_cli, server
):
    server.default("/v1/models", Reply(200, models_body("judge", "other")))
    code, out, err = run_cli("doctor", str(EXAMPLE), *with_assistant(server.url))
    assert code == 0, out + err
    status = {line[6:].split("  ")[0].strip(): line[:4].strip() for line in out.splitlines()}
    assert out.splitlines()[0].split() == [
        "ok",
        "config",
        f"{EXAMPLE}:",
        "valid",
        "(classic",
        "PPO",
        "run)",
    ]
    assert status["sandbox isolation"] == "skip"  # no generated code runs
    assert status[f"key {KEY_VAR}"] == status[f"endpoint {server.url}/v1"] == "ok"
    assert status["model analyst"] == "ok" and server.count(CHAT) == 0
    code, out, err = run_cli("doctor", str(EXAMPLE))
    assert code == 0, out + err
    assert out.splitlines()[-1].split(None, 3)[:3] == ["skip", "API", "roles"]
    assert "[assistant] enabled = false: API checks skipped" in out


def test_doctor_with_an_unset_base_url_env_fails_that_check_and_goes_on(
    run_cli, tmp_path, monkeypatch
):
    monkeypatch.delenv("ASCENT_UNSET_URL", raising=False)
    path = tmp_path / "roles.toml"
    path.write_text('[api]\nbase_url_env = "ASCENT_UNSET_URL"\n[models]\nsolver_model = "m"\n')
    code, out, err = run_cli("doctor", str(path))
    assert code == 2 and err == "error: 1 check(s) failed: API roles\n"
    (line,) = [line for line in out.splitlines() if line.startswith("FAIL")]
    assert (
        "API roles" in line and "[api] base_url_env: variable ASCENT_UNSET_URL is not set" in line
    )
    assert "torch / CUDA" in out and "disk space" in out

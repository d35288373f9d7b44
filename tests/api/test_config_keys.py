"""[api] / [models] / [assistant] as users write them; keys from env and .env; no key leaks."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from ascent.api import KeySource, Secret, normalize_base_url, redact, resolve_roles
from ascent.api.diagnoses import KeyLooksLikeNameError, KeyMissingError
from ascent.configfile import load_config
from ascent.errors import ConfigError
from ascent.rules import LLMConfig
from tests.api.conftest import KEY, leaks

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "api_roles.toml"


def write(tmp_path: Path, text: str, name: str = "run.toml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_the_write_ups_config_loads_as_written():
    cfg = load_config(EXAMPLE)
    roles = resolve_roles(cfg.api, cfg.models)
    assert list(roles) == ["hypothesis", "solver", "summarizer", "testgen"]
    assert roles["hypothesis"].model == "deepseek/deepseek-r1"
    assert roles["hypothesis"].api_key_env == "OPENROUTER_API_KEY"
    assert roles["solver"].api_key_env == "SOLVER_API_KEY"
    assert roles["solver"].fallback == "deepseek/deepseek-chat"
    assert roles["testgen"].base_url == "https://openrouter.ai/api/v1"
    assert cfg.api.timeout_sec == 120 and cfg.api.max_retries == 3
    assert cfg.rollout.async_workers == 8  # [rollout] absent: its default is the concurrency


def test_any_role_name_and_per_role_endpoint(tmp_path):
    path = write(
        tmp_path,
        """
[api]
base_url = "https://openrouter.ai/api"
[models]
reward_model = "judge-1"
fallback_model = "cheap"
[models.reward]
base_url = "http://127.0.0.1:8000"
api_key_env = "REWARD_KEY"
[models.critic]
model = "crit"
""",
    )
    roles = resolve_roles(*(lambda c: (c.api, c.models))(load_config(path)))
    assert roles["reward"].base_url == "http://127.0.0.1:8000/v1"
    assert roles["reward"].api_key_env == "REWARD_KEY"
    assert roles["reward"].fallback == "cheap"
    assert roles["critic"].model == "crit"
    assert roles["critic"].base_url == "https://openrouter.ai/api/v1"
    assert "fallback" not in roles


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("solverr = 'x'", "[models] unknown key 'solverr': name a role's model as <role>_model"),
        ("solver_model = 3", "[models] solver_model: must be a model name string"),
        (
            "[models.solver]\nfallbak = 'x'",
            "[models.solver]: unknown key 'fallbak'; valid keys: model, base_url, append_v1, "
            "api_key_env, fallback",
        ),
        ("[models.solver]\nmodel = 'a'\n[models.x]\n", None),
        (
            "[models.judge]\nbase_url = 'http://h'",
            "[models.judge]: role judge has no model; add judge_model",
        ),
    ],
)
def test_models_section_errors_read_well(tmp_path, line, expected):
    path = write(tmp_path, f"[models]\n{line}\n")
    if expected is None:
        with pytest.raises(ConfigError, match="role x has no model"):
            cfg = load_config(path)
            resolve_roles(cfg.api, cfg.models)
        return
    with pytest.raises(ConfigError) as err:
        cfg = load_config(path)
        resolve_roles(cfg.api, cfg.models)
    assert expected in str(err.value)
    assert str(err.value).count("\n") == 0


def test_a_key_pasted_as_api_key_env_is_refused_without_leaking(tmp_path):
    path = write(tmp_path, f'[api]\napi_key_env = "{KEY}"\n')
    with pytest.raises(ConfigError) as err:
        load_config(path)
    msg = str(err.value)
    assert (
        "[api] api_key_env holds what looks like an API key ('sk-Z…' (32 chars)), "
        "not a variable name" in msg
    )
    assert not leaks(msg)
    with pytest.raises(ValidationError) as raw:  # even pydantic's own text hides the input
        LLMConfig.model_validate({"models": {"solver_model": "m", "solver": {"api_key_env": KEY}}})
    assert not leaks(str(raw.value) + repr(raw.value.errors()[0]["msg"]))
    with pytest.raises(ValidationError) as raw:
        LLMConfig.model_validate({"api": {"api_key_env": KEY}})
    assert not leaks(str(raw.value))


@pytest.mark.parametrize(
    ("value", "fix"),
    [
        ("$OPENAI_API_KEY", "write the variable name without '$'"),
        ("MY KEY", "is not an environment variable name"),
    ],
)
def test_api_key_env_must_be_a_variable_name(tmp_path, value, fix):
    with pytest.raises(ConfigError, match=fix.replace("$", r"\$")):
        load_config(write(tmp_path, f'[api]\napi_key_env = "{value}"\n'))


def test_base_url_must_be_http(tmp_path):
    with pytest.raises(
        ConfigError, match=r"\[api\] base_url: 'openrouter.ai/api' is not an http\(s\) URL"
    ):
        load_config(write(tmp_path, '[api]\nbase_url = "openrouter.ai/api"\n'))


@pytest.mark.parametrize(
    ("url", "root"),
    [
        ("https://openrouter.ai/api", "https://openrouter.ai/api/v1"),
        ("https://openrouter.ai/api/v1", "https://openrouter.ai/api/v1"),
        ("https://openrouter.ai/api/v1/", "https://openrouter.ai/api/v1"),
        ("https://openrouter.ai/api/v1/v1", "https://openrouter.ai/api/v1"),
        ("https://api.openai.com/v1/chat/completions", "https://api.openai.com/v1"),
        ("http://127.0.0.1:8000", "http://127.0.0.1:8000/v1"),
        (
            "https://generativelanguage.googleapis.com/v1beta/openai/",
            "https://generativelanguage.googleapis.com/v1beta/openai",
        ),
    ],
)
def test_normalize_base_url(url, root):
    assert normalize_base_url(url) == root


def test_append_v1_false_keeps_a_version_less_root(tmp_path):
    path = write(
        tmp_path,
        """
[api]
base_url = "https://api.perplexity.ai/"
append_v1 = false
[models]
solver_model = "sonar"
hypothesis_model = "deepseek/deepseek-r1"
[models.hypothesis]
base_url = "https://openrouter.ai/api"
append_v1 = true
""",
    )
    roles = resolve_roles(*(lambda c: (c.api, c.models))(load_config(path)))
    assert roles["solver"].base_url == "https://api.perplexity.ai"
    assert roles["hypothesis"].base_url == "https://openrouter.ai/api/v1"
    assert normalize_base_url("https://x.ai/chat/completions", append_v1=False) == "https://x.ai"
    assert normalize_base_url("https://x.ai/v1/v1/", append_v1=False) == "https://x.ai/v1"


def test_role_append_v1_must_be_a_boolean(tmp_path):
    path = write(tmp_path, '[models]\nsolver_model = "m"\n[models.solver]\nappend_v1 = "no"\n')
    with pytest.raises(ConfigError, match=r"\[models.solver\] append_v1: must be true or false"):
        load_config(path)


@pytest.mark.parametrize("where", ["[api]", "[models.solver]"])
def test_base_url_with_a_query_string_is_refused_without_showing_it(tmp_path, where):
    url = f"https://host.example/v1?key={KEY}"
    table = "[api]" if where == "[api]" else "[models.solver]"
    path = write(tmp_path, f'[models]\nsolver_model = "m"\n{table}\nbase_url = "{url}"\n')
    with pytest.raises(ConfigError) as err:
        load_config(path)
    msg = str(err.value)
    assert f"{where} base_url: 'https://host.example/v1…' carries a query string" in msg
    assert 'write the API root alone, e.g. base_url = "https://host.example/v1"' in msg
    assert not leaks(msg)
    with pytest.raises(ConfigError, match="carries a query string"):
        normalize_base_url(url)


@pytest.mark.parametrize("user", ["user", "", "x" * 30])
def test_a_key_inside_base_url_is_refused_without_showing_it(tmp_path, user, run_cli):
    url = f"http://{user}:{KEY}@host.example:8000/v1"
    path = write(tmp_path, f'[api]\nbase_url = "{url}"\n')
    with pytest.raises(ConfigError) as err:
        load_config(path)
    msg = str(err.value)
    assert "[api] base_url: 'http://…@host.example:8000' carries credentials before the host" in msg
    assert "('http://host.example:8000/v1')" in msg and "api_key_env" in msg
    assert not leaks(msg) and (user == "" or user not in msg)
    code, out, err_text = run_cli("config", "show", str(path))  # nor does any command print it
    assert code == 2 and not leaks(out + err_text)


def test_a_key_inside_the_base_url_a_variable_holds_is_refused_too(monkeypatch):
    from ascent.api.roles import api_base_url
    from ascent.config.api import ApiSection

    monkeypatch.setenv("ROOT_WITH_KEY", f"https://me:{KEY}@api.example/v1")
    with pytest.raises(
        ConfigError, match=r"base_url_env \(ROOT_WITH_KEY\) base_url: .* carries credentials"
    ) as err:
        api_base_url(ApiSection(base_url_env="ROOT_WITH_KEY"))
    assert not leaks(str(err.value))


def test_a_url_that_is_not_http_is_quoted_without_its_key(tmp_path):
    path = write(tmp_path, f'[api]\nbase_url = "me:{KEY}@host.example"\n')
    with pytest.raises(ConfigError, match="is not an http") as err:
        load_config(path)
    assert not leaks(str(err.value))


def test_dotenv_beside_the_config_and_environment_wins(tmp_path, monkeypatch):
    config = write(tmp_path, "[models]\nsolver_model = 'm'\n")
    (tmp_path / ".env").write_text("FROM_FILE=sk-file-0123456789abcdef\nBOTH=from-file\n")
    monkeypatch.setenv("BOTH", "from-env-value")
    monkeypatch.delenv("FROM_FILE", raising=False)
    keys = KeySource.beside(str(config))
    assert keys.require("FROM_FILE", "solver").reveal() == "sk-file-0123456789abcdef"
    assert keys.where("FROM_FILE") == str(tmp_path / ".env")
    assert keys.require("BOTH", "solver").reveal() == "from-env-value"
    assert keys.where("BOTH") == "environment"
    assert KeySource.beside(str(config), env_file="").lookup("FROM_FILE") is None


def test_key_variable_unset_names_it_and_the_env_file(tmp_path, monkeypatch):
    monkeypatch.delenv("NOPE_KEY", raising=False)
    keys = KeySource.beside(str(write(tmp_path, "")))
    with pytest.raises(KeyMissingError) as err:
        keys.require("NOPE_KEY", "solver")
    assert str(err.value) == (
        f"role solver: API key variable NOPE_KEY is not set; export NOPE_KEY=<your key> or add "
        f"NOPE_KEY=... to {tmp_path / '.env'}"
    )


def test_key_variable_empty(monkeypatch):
    monkeypatch.setenv("EMPTY_KEY", "  ")
    with pytest.raises(KeyMissingError, match="API key variable EMPTY_KEY is set but empty"):
        KeySource().require("EMPTY_KEY", "solver")


@pytest.mark.parametrize("value", ["OPENAI_API_KEY", "$OPENROUTER_API_KEY", "SOLVER_VAR"])
def test_key_variable_holding_a_variable_name(monkeypatch, value):
    monkeypatch.setenv("SOLVER_VAR", value)
    with pytest.raises(KeyLooksLikeNameError) as err:
        KeySource().require("SOLVER_VAR", "solver")
    msg = str(err.value)
    assert (
        f"SOLVER_VAR holds '{value[:4]}…' ({len(value)} chars), which looks like a variable name"
        in msg
    )
    assert "set SOLVER_VAR to the key itself" in msg


def test_secret_never_prints_more_than_four_characters():
    s = Secret(KEY)
    assert not leaks(repr(s) + str(s) + f"{s}" + repr([s]))
    assert repr(s) == "Secret('sk-Z…' (32 chars))"
    with pytest.raises(TypeError):
        import pickle

        pickle.dumps(s)


def test_redact_scrubs_keys_and_key_shaped_tokens():
    text = (
        f"bad key {KEY[:10]}***{KEY[-6:]} and sk-proj-abcdefgh1234 "
        "near model qwen-2.5-coder-32b-instruct"
    )
    out = redact(text, [KEY])
    assert not leaks(out)
    assert "sk-proj" not in out
    assert "qwen-2.5-coder-32b-instruct" in out


def test_assistant_section_defaults_and_role_name(tmp_path):
    cfg = load_config(
        write(tmp_path, "[models]\nanalyst_model = 'm'\n[assistant]\nenabled = true\n")
    )
    assert (cfg.assistant.role, cfg.assistant.log_interval) == ("analyst", 50)
    with pytest.raises(ConfigError, match="is not a role name"):
        load_config(write(tmp_path, "[assistant]\nrole = 'Log Analyst'\n"))


def test_empty_api_key_env_means_an_endpoint_without_keys(tmp_path):
    path = write(tmp_path, '[api]\napi_key_env = ""\n[models]\nsolver_model = "m"\n')
    cfg = load_config(path)
    roles = resolve_roles(cfg.api, cfg.models)
    assert roles["solver"].api_key_env == ""
    assert KeySource().require("", "solver").reveal() == "no-key"


def test_client_takes_retries_and_concurrency_from_the_config(tmp_path):
    from ascent.api import ApiClient, RetryPolicy
    from ascent.config.api import ApiSection

    assert RetryPolicy() == RetryPolicy.from_section(ApiSection())  # one set of defaults
    path = write(
        tmp_path,
        '[api]\ntimeout_sec = 7\nmax_retries = 1\n[models]\nsolver_model = "m"\n'
        "[rollout]\nasync_workers = 3\n",
    )
    client = ApiClient.from_config(load_config(path))
    assert client.concurrency == 3
    assert (client.policy.timeout_sec, client.policy.max_retries) == (7, 1)

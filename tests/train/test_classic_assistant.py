"""Classic PPO with the log assistant, and the actor-critic write-up's settings.json (seed 003).

`ascent train examples/ppo_cartpole.toml` with an `[assistant]` prints three-sentence analyses
while CartPole trains and counts their tokens; an endpoint that is dead or hangs never slows
or stops the run. The write-up's nested settings.json is read where its fields map onto
ascent's keys; a path of its own layout that ascent does not follow is a one-line warning
saying where ascent puts that thing, and any other field ascent cannot honour is refused in
one line naming it.
"""

from __future__ import annotations

import json
import shutil
import socket
import time
from pathlib import Path

import openai  # noqa: F401  (imported up front, as a run's first analysis would: timing)
import pytest

from ascent.configfile import load_config
from ascent.errors import ConfigError
from ascent.serve.local_policy import LocalPolicy
from ascent.serve.server import PolicyServer
from tests.api.scripted_server import Reply, ScriptedServer, chat_body, ok
from tests.fake_secrets import FAKE_KEY

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "ppo_cartpole.toml"
SEEDS = ROOT / "tests" / "configfile" / "seed_configs"
CHAT = "/v1/chat/completions"
ANSWER = (  # printed as written: "[train]" and "[/x]" are not rich markup
    "The policy is improving: the mean return rose from 22 to 41. The critic is converging, "
    "explained variance is up to 0.3. Raise [train] total_timesteps to 50000 and keep "
    "[optim] lr_actor at 3e-4 [/x]."
)
UPDATES = 16  # 4096 env steps in rollouts of 256
SHORT = [
    "train.total_timesteps=4096",
    "train.rollout_steps=256",
    "train.update_epochs=2",
    "logging.progress=false",
]
PROXY_VARS = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY")


@pytest.fixture(autouse=True)
def no_proxy(monkeypatch):
    """Loopback requests go straight to the loopback server, whatever the shell has."""
    for var in PROXY_VARS:
        monkeypatch.delenv(var, raising=False)
        monkeypatch.delenv(var.lower(), raising=False)


def train(run_cli, out: Path, name: str, *settings: str) -> tuple[float, str, dict]:
    """`ascent train examples/ppo_cartpole.toml --set ...`: (wall seconds, output, summary)."""
    sets = [*SHORT, f'run.output_dir="{out}"', f"run.name={name}", *settings]
    start = time.perf_counter()
    code, stdout, stderr = run_cli("train", str(EXAMPLE), *[a for s in sets for a in ("--set", s)])
    wall = time.perf_counter() - start
    assert code == 0, stderr
    return wall, stdout + stderr, json.loads((out / name / "summary.json").read_text())


def analyst(url: str, model: str = "judge", every: int = 2, *more: str) -> list[str]:
    return [
        f'api.base_url="{url}"',
        'api.api_key_env=""',  # a loopback server asks for no key
        f'models.analyst_model="{model}"',
        "assistant.enabled=true",
        f"assistant.log_interval={every}",
        *more,
    ]


def saved(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "assistant.jsonl").read_text().splitlines()]


def dead_port() -> int:
    """A loopback port nobody listens on."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# -- the assistant in the classic loop -------------------------------------------------------


def test_analyses_are_printed_while_cartpole_trains_and_their_tokens_counted(run_cli, tmp_path):
    with ScriptedServer() as server:
        server.default(CHAT, ok(ANSWER, prompt_tokens=400, completion_tokens=45))
        _, out, summary = train(run_cli, tmp_path, "assisted", *analyst(server.url))
        sent = [r.body for r in server.requests(CHAT)]
    assert summary["updates"] == UPDATES
    analyses = saved(tmp_path / "assisted")
    steps = [a["step"] for a in analyses]
    assert len(steps) >= 2 and all(a.get("text") == ANSWER for a in analyses)
    assert all(step % 2 == 0 for step in steps)  # every log_interval updates (busy: skipped)
    assert min(steps) < UPDATES  # analysed while training, not after it
    printed = out.splitlines()  # one line each, not wrapped at 80 columns
    assert [line for line in printed if ANSWER in line] == [
        f"assistant (step {step}): {ANSWER}" for step in steps
    ]
    first = json.loads(sent[0]["messages"][1]["content"].splitlines()[-1])
    assert first["step"] == steps[0] and sent[0]["model"] == "judge"
    assert {"episode/return_mean", "loss/value", "value/explained_variance"} <= set(first)
    usage = json.loads((tmp_path / "assisted" / "api_usage.json").read_text())["analyst"]
    assert (usage["requests"], usage["total_tokens"]) == (len(steps), 445 * len(steps))
    assert f"api usage: analyst: {len(steps)} requests" in out


def test_a_dead_or_hanging_endpoint_never_slows_or_stops_training(run_cli, tmp_path):
    train(run_cli, tmp_path, "warm-up")  # the first run in a process pays for imports
    plain, _, _ = train(run_cli, tmp_path, "plain")
    port = dead_port()
    dead_url = f"http://127.0.0.1:{port}"
    dead, _, dead_summary = train(
        run_cli, tmp_path, "dead", *analyst(dead_url, "judge", 1, "api.max_retries=0")
    )
    with ScriptedServer() as server:
        server.default(CHAT, Reply(200, chat_body("late"), delay=30.0))  # hangs past the run
        hung, hung_out, hung_summary = train(
            run_cli, tmp_path, "hung", *analyst(server.url, every=1)
        )
        asked = server.count(CHAT)
    plain = max(plain, train(run_cli, tmp_path, "plain-again")[0])  # 2 cores shared: noise
    for wall, summary in ((dead, dead_summary), (hung, hung_summary)):
        assert summary["updates"] == UPDATES  # training finished
        assert wall < 1.5 * plain + 2.0, (wall, plain)  # a retry or a hang would cost 7-30 s
    failures = saved(tmp_path / "dead")  # each failure recorded in one line, the run went on
    assert failures and all(f"127.0.0.1:{port}" in f["error"] for f in failures)
    assert asked >= 1 and not (tmp_path / "hung" / "assistant.jsonl").exists()
    assert "an analysis was still running when training ended; not waited for" in hung_out


def test_a_model_served_by_ascent_serve_answers_during_training(run_cli, tmp_path):
    # The built-in tiny model allows 256 positions and the assistant's prompt of one record is
    # ~1,100 characters (one token each), so it is served with its position limit raised. It
    # only knows addition: its answers are noise; the pipeline is the point.
    tiny = LocalPolicy.load("ascent:tiny", device="cpu")
    tiny.model.config.max_position_embeddings = 2048
    policy = LocalPolicy(tiny.model, tiny.tokenizer, tiny.name, tiny.source)
    with PolicyServer(policy, port=0, window_sec=0.01) as server:
        more = ("assistant.max_tokens=16", "assistant.history=1")
        _, out, summary = train(
            run_cli, tmp_path, "served", *analyst(server.url, "ascent:tiny", 1, *more)
        )
    assert summary["updates"] == UPDATES
    analyses = [a for a in saved(tmp_path / "served") if "text" in a]
    assert analyses and min(a["step"] for a in analyses) < UPDATES
    assert f"assistant (step {analyses[0]['step']}): " in out
    usage = json.loads((tmp_path / "served" / "api_usage.json").read_text())["analyst"]
    assert usage["requests"] >= len(analyses) and usage["prompt_tokens"] > 900 * len(analyses)


def test_a_served_model_whose_context_cannot_hold_the_prompt_fails_in_one_line(run_cli, tmp_path):
    tiny = LocalPolicy.load("ascent:tiny", device="cpu")  # 256 positions, as `ascent serve` has
    with PolicyServer(tiny, port=0, window_sec=0.01) as server:
        _, _, summary = train(run_cli, tmp_path, "small", *analyst(server.url, "ascent:tiny", 4))
    assert summary["updates"] == UPDATES
    failures = saved(tmp_path / "small")
    assert failures and all("the model allows 256 tokens" in f["error"] for f in failures)
    assert all(  # what shortens the analyst's requests, not the rollout's
        "lower [assistant] max_tokens (now 200) or [assistant] history (now 5 records per "
        "prompt)" in f["error"]
        for f in failures
    )
    assert all("\n" not in f["error"] for f in failures)


# -- [api], [models], [assistant] in a classic config ----------------------------------------


def classic(tmp_path: Path, extra: str = "", name: str = "run.toml") -> Path:
    path = tmp_path / name
    path.write_text(f'[env]\nid = "CartPole-v1"\n{extra}')
    return path


def test_a_classic_run_calls_no_api_role_but_the_assistants(tmp_path):
    with pytest.raises(ConfigError, match=r"\[models\] solver: a classic PPO run calls an API"):
        load_config(classic(tmp_path, '[models]\nsolver_model = "m"\n'))
    with pytest.raises(ConfigError, match=r"\[assistant\] role: 'analyst' has no model; add"):
        load_config(classic(tmp_path, "[assistant]\nenabled = true\n"))
    cfg = load_config(classic(tmp_path, '[api]\nbase_url = "http://127.0.0.1:8000/v1"\n'))
    assert cfg.warnings == [
        "[api] has no effect: a classic PPO run calls an API only for the log assistant, and "
        "[assistant] enabled = false"
    ]


def test_the_write_ups_service_section_is_refused_naming_where_each_key_lives(tmp_path):
    seed = (SEEDS / "seed003_ppo.toml").read_text()
    service = seed[seed.index("[service]") :]
    with pytest.raises(ConfigError) as err:
        load_config(classic(tmp_path, service))
    message = str(err.value)
    assert "\n" not in message and "unknown section [service]" in message
    for moved in ("[api] api_key_env", "[models] analyst_model", "[api] timeout_sec"):
        assert moved in message


# -- the write-up's nested settings.json ------------------------------------------------------


def seed_settings() -> dict:
    return json.loads((SEEDS / "seed003_settings.json").read_text())


def test_the_migrated_write_up_loads_beside_its_settings_json_warning_once_per_layout_path(
    run_cli, tmp_path, monkeypatch
):
    # Day one with the write-up: migrate its config.toml, keep its settings.json as it is.
    monkeypatch.chdir(tmp_path)
    shutil.copy(SEEDS / "seed003_ppo.toml", "seed003_ppo.toml")
    shutil.copy(SEEDS / "seed003_settings.json", "settings.json")
    code, _, err = run_cli("config", "migrate", "seed003_ppo.toml", "--out", "config.toml")
    assert code == 0, err
    cfg = load_config(tmp_path / "config.toml")
    source = tmp_path / "settings.json"
    assert cfg.warnings[:2] == [
        f'{source}: paths.checkpoint_dir "./checkpoints" is not used: checkpoints go in the run '
        "directory, ./logs/config/checkpoints (<output_dir>/<run name>/checkpoints; "
        "paths.log_dir sets output_dir)",
        f'{source}: paths.tensorboard "./runs" is not used: TensorBoard files go in '
        './logs/config/tensorboard with [logging] trackers = ["tensorboard"] (not set: none '
        "are written)",
    ]
    # paths.config names the file being loaded, so it agrees: a note, no warning
    assert f'paths.config = "./config.toml" from {source}: the config being loaded' in cfg._notes
    assert (cfg.run.output_dir, cfg.run.device, cfg.api.base_url_env) == (
        "./logs",
        "cpu",
        "TAOTOKEN_BASE_URL",
    )
    code, out, err = run_cli("config", "show", str(tmp_path / "config.toml"))
    assert code == 0, err
    assert f"# warning: {cfg.warnings[0]}\n" in out and f"# warning: {cfg.warnings[1]}\n" in out


def test_each_layout_path_ascent_does_not_follow_is_one_warning_saying_where_it_goes(tmp_path):
    settings = seed_settings()
    settings["paths"]["log_dir"] = "out"
    (tmp_path / "settings.json").write_text(json.dumps(settings))
    path = classic(tmp_path, '[logging]\ntrackers = ["tensorboard"]\n', name="ppo.toml")
    cfg = load_config(path)
    warned = [w.removeprefix(f"{tmp_path / 'settings.json'}: ") for w in cfg.warnings]
    assert warned[:3] == [
        'paths.config "./config.toml" is not the config being loaded: ascent reads ppo.toml, '
        "the config it is given, with the settings.json beside it",
        'paths.checkpoint_dir "./checkpoints" is not used: checkpoints go in the run directory, '
        "out/ppo/checkpoints (<output_dir>/<run name>/checkpoints; paths.log_dir sets "
        "output_dir)",
        'paths.tensorboard "./runs" is not used: TensorBoard files go in out/ppo/tensorboard; '
        "run tensorboard --logdir out",
    ]
    settings["paths"]["tensorboard"] = ["./runs"]  # not a path: still refused
    (tmp_path / "settings.json").write_text(json.dumps(settings))
    with pytest.raises(ConfigError, match=r'paths.tensorboard \["./runs"\]: must be a path'):
        load_config(path)


def test_the_write_ups_settings_json_fills_run_logging_and_api(run_cli, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the write-up's paths are relative to where ascent runs
    settings = seed_settings()
    settings["paths"] |= {"checkpoint_dir": "logs/config/checkpoints", "tensorboard": "logs"}
    (tmp_path / "settings.json").write_text(json.dumps(settings))
    path = classic(tmp_path, "[train]\ntotal_timesteps = 20000\n", name="config.toml")
    cfg = load_config(path)
    assert (cfg.run.device, cfg.run.deterministic, cfg.run.output_dir) == ("cpu", True, "./logs")
    assert cfg.logging.project == "ppo-actor-critic"
    assert (cfg.api.base_url, cfg.api.api_key_env) == (
        "https://example.invalid/api",
        "TAOTOKEN_API_KEY",
    )
    code, out, _ = run_cli("config", "show", str(path))
    assert code == 0
    source = tmp_path / "settings.json"
    notes = [line for line in out.splitlines() if f"from {source}" in line]
    fields = [note.split(" = ")[0].removeprefix("# ") for note in notes]
    assert fields == [
        "logging.project", "run.output_dir", "api.base_url", "api.api_key_env", "run.device",
        "run.deterministic", "version", "paths.config", "paths.checkpoint_dir",
        "paths.tensorboard", "service.provider", "service.endpoints", "runtime.num_workers",
    ]  # fmt: skip
    assert f'# run.device = "cpu" from {source} (runtime.device)' in notes
    assert (
        "the paths ascent requests under [api] base_url" in notes[fields.index("service.endpoints")]
    )


@pytest.mark.parametrize(
    ("settings", "expected"),
    [
        (
            {"runtime": {"num_workers": 4}},
            "runtime.num_workers 4: a classic run has no worker pool",
        ),
        (
            {"service": {"endpoints": {"chat": "/chat"}}},
            'service.endpoints.chat "/chat": ascent requests [api] base_url + /chat/completions',
        ),
        (
            {"service": {"endpoints": {"embeddings": "/v1/embeddings"}}},
            "service.endpoints.embeddings: ascent calls only the chat and models endpoints",
        ),
        (
            {
                "service": {
                    "base_url": "https://x.example/v1",
                    "endpoints": {"chat": "/v1/chat/completions"},
                }
            },
            "is not a request ascent sends",
        ),
        ({"runtime": {"devise": "cpu"}}, "unknown key 'runtime.devise' (did you mean 'device'?)"),
        ({"paths": "./logs"}, "paths must be an object with any of config, log_dir"),
        ({"device": "cpu", "runtime": {"device": "cpu"}}, "device and runtime.device both set"),
        ({"runtime": {"device": "tpu"}}, "runtime.device -> [run] device: "),
        ({"service": {"base_url": "ftp://x"}}, "service.base_url -> [api] base_url: 'ftp://x'"),
    ],
)
def test_a_settings_json_field_ascent_cannot_honour_is_refused_in_one_line(
    tmp_path, settings, expected
):
    (tmp_path / "settings.json").write_text(json.dumps(settings))
    with pytest.raises(ConfigError) as err:
        load_config(classic(tmp_path))
    assert expected in str(err.value) and "\n" not in str(err.value)
    assert str(tmp_path / "settings.json") in str(err.value)


def test_a_key_pasted_into_settings_json_is_refused_without_showing_it(tmp_path):
    key = FAKE_KEY
    (tmp_path / "settings.json").write_text(json.dumps({"service": {"api_key_env": key}}))
    with pytest.raises(ConfigError, match="looks like an API key") as err:
        load_config(classic(tmp_path))
    shown = [key[i : i + 5] for i in range(4, len(key) - 4) if key[i : i + 5] in str(err.value)]
    assert shown == []  # no 5 characters of it past the 4 that may be shown


def test_version_less_endpoints_under_a_version_less_root_turn_append_v1_off(tmp_path):
    service = {"base_url": "https://x.example/api", "endpoints": {"chat": "/chat/completions"}}
    (tmp_path / "settings.json").write_text(json.dumps({"service": service}))
    cfg = load_config(classic(tmp_path))
    assert cfg.api.append_v1 is False and cfg.api.base_url == "https://x.example/api"
    assert f"api.append_v1 = false from {tmp_path / 'settings.json'} (service.endpoints)" in (
        cfg._notes
    )


def test_the_tomls_base_url_env_wins_over_settings_json_base_url(tmp_path):
    # what `ascent config migrate` writes from the write-up's [service] base_url_env
    (tmp_path / "settings.json").write_text(json.dumps({"service": seed_settings()["service"]}))
    cfg = load_config(classic(tmp_path, '[api]\nbase_url_env = "TAOTOKEN_BASE_URL"\n'))
    assert cfg.api.base_url_env == "TAOTOKEN_BASE_URL" and not cfg.api.explicitly_set("base_url")
    source = tmp_path / "settings.json"
    assert (
        f'api.base_url = "https://example.invalid/api" from {source} (service.base_url; '
        "overridden by the TOML's base_url_env)"
    ) in cfg._notes
    assert (
        f'service.endpoints = {{"chat": "/v1/chat/completions", "models": "/v1/models"}} from '
        f"{source}: not checked: [api] base_url_env gives the API root when the run starts"
    ) in cfg._notes


def test_settings_json_base_url_env_fills_api_base_url_env_unless_the_toml_gives_the_root(
    tmp_path,
):
    source = tmp_path / "settings.json"
    source.write_text(json.dumps({"service": {"base_url_env": "TAOTOKEN_BASE_URL"}}))
    cfg = load_config(classic(tmp_path))
    assert cfg.api.base_url_env == "TAOTOKEN_BASE_URL" and not cfg.api.explicitly_set("base_url")
    cfg = load_config(classic(tmp_path, '[api]\nbase_url = "https://x.example/v1"\n'))
    assert (cfg.api.base_url, cfg.api.base_url_env) == ("https://x.example/v1", "")
    assert (
        f'api.base_url_env = "TAOTOKEN_BASE_URL" from {source} (service.base_url_env; '
        "overridden by the TOML's base_url)"
    ) in cfg._notes

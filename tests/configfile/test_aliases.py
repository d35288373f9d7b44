"""The one table of foreign keys (write-ups, TRL, verl) and where each lives in ascent; the
hints the loader builds from it; top_k = -1 as off; and [api] base_url_env, the write-ups'
way of keeping the base URL in .env beside the key."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from ascent.api import KeySource, resolve_roles
from ascent.api.client import ApiClient
from ascent.configfile import aliases, load_config
from ascent.configfile.aliases import ALIASES, find, is_key, keys_of, sections
from ascent.errors import ConfigError


def write(tmp_path: Path, text: str, name: str = "run.toml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def error_of(path: Path, overrides: tuple[str, ...] = ()) -> str:
    with pytest.raises(ConfigError) as info:
        load_config(path, list(overrides))
    message = str(info.value)
    assert "\n" not in message
    return message


# -- the table ----------------------------------------------------------------------------


@pytest.mark.parametrize("alias", ALIASES, ids=lambda a: f"{a.key}@{'/'.join(a.within)}")
def test_every_alias_points_at_real_ascent_keys(alias):
    for kind in alias.kinds:
        for target in alias.targets:
            assert is_key(target, kind), f"{alias.key} -> {target} ({kind})"
        assert set(alias.weak) <= set(alias.targets)


@pytest.mark.parametrize("alias", ALIASES, ids=lambda a: f"{a.key}@{'/'.join(a.within)}")
def test_no_alias_hides_a_key_ascent_has_where_it_applies(alias):
    for kind in alias.kinds:
        for section in alias.within:
            model = sections(kind).get(section)
            assert model is None or alias.key not in keys_of(model), (alias.key, section)


def test_each_foreign_key_has_one_meaning_per_place():
    places = Counter(
        (a.key, kind, section)
        for a in ALIASES
        for kind in a.kinds
        for section in a.within or ("*",)
    )
    assert [place for place, n in places.items() if n > 1] == []


@pytest.mark.parametrize(
    ("key", "section", "kind", "value", "context", "expected"),
    [
        ("top_k", "", "llm", -1, {}, {"rollout.top_k": 0}),
        ("top_k", "", "llm", 40, {}, {"rollout.top_k": 40}),
        ("num_generations", "", "llm", 16, {}, {"rollout.group_size": 16}),
        ("beta", "", "llm", 0.04, {}, {"algorithm.kl_coef": 0.04}),
        ("kl_coef", "grpo", "llm", 0.04, {}, None),  # ascent's own name: found by name
        (
            "clip_range",
            "training",
            "llm",
            0.2,
            {},
            {"algorithm.clip_low": 0.2, "algorithm.clip_high": 0.2},
        ),
        ("loss_type", "", "llm", "grpo", {}, {"algorithm.loss_agg": "seq_mean_token_mean"}),
        ("loss_type", "", "llm", "bnpo", {}, {"algorithm.loss_agg": "token_mean"}),
        ("loss_type", "", "llm", "dapo", {}, {"algorithm.loss_agg": "token_mean"}),
        ("loss_type", "", "llm", "dr_grpo", {}, {"algorithm.loss_agg": "seq_mean_token_sum_norm"}),
        ("scale_rewards", "", "llm", False, {}, {"algorithm.advantage": "dr_grpo"}),
        ("scale_rewards", "", "llm", "group", {}, {"algorithm.advantage": "grpo"}),
        ("num_iterations", "", "llm", 4, {}, {"train.ppo_epochs": 4}),
        ("max_completion_length", "", "llm", 512, {}, {"rollout.max_new_tokens": 512}),
        ("report_to", "", "llm", "none", {}, {"logging.trackers": []}),
        (
            "report_to",
            "",
            "llm",
            ["wandb", "tensorboard"],
            {},
            {"logging.trackers": ["wandb", "tensorboard"]},
        ),
        ("bf16", "", "llm", True, {}, {"model.dtype": "bfloat16"}),
        ("use_vllm", "", "llm", True, {}, {"rollout.engine": "vllm"}),
        (
            "lr_scheduler_type",
            "",
            "llm",
            "constant_with_warmup",
            {},
            {"optim.schedule": "constant"},
        ),
        ("max_steps", "training", "llm", 900, {}, {"train.total_steps": 900}),
        ("learning_rate", "", "llm", 1e-6, {}, {"optim.lr": 1e-6}),
        (
            "learning_rate",
            "",
            "classic",
            3e-4,
            {},
            {"optim.lr_actor": 3e-4, "optim.lr_critic": 3e-4},
        ),
        ("logging_steps", "", "llm", 10, {}, {"logging.log_every": 10}),
        ("timeout_seconds", "api", "llm", 30, {}, {"api.timeout_sec": 30}),
        ("rating_band", "eval", "llm", [1800, 2400], {}, {"eval.rating_bands": [[1800, 2400]]}),
        (
            "per_device_train_batch_size",
            "",
            "llm",
            2,
            {"per_device_train_batch_size": 2, "gradient_accumulation_steps": 16},
            {"train.batch_size": 32, "train.micro_batch_size": 2},
        ),
        (
            "gradient_accumulation_steps",
            "",
            "llm",
            4,
            {"gradient_accumulation_steps": 4},  # TRL's per-device default is 8
            {"train.batch_size": 32, "train.micro_batch_size": 8},
        ),
        (
            "train_batch_size",
            "data",
            "llm",
            128,
            {"n": 8},  # verl counts prompts
            {"train.batch_size": 1024},
        ),
        ("warmup_steps", "", "llm", 50, {"max_steps": 1000}, {"optim.warmup_ratio": 0.05}),
        ("adam_beta2", "", "llm", 0.95, {"adam_beta2": 0.95}, {"optim.betas": [0.9, 0.95]}),
        ("output_dir", "", "llm", "out/exp-3", {}, {"run.output_dir": "out", "run.name": "exp-3"}),
        ("test_timeout", "reward.code", "llm", 2.5, {}, {"sandbox.time_limit_ms": 2500}),
        ("name", "model", "llm", "qwen", {}, {"model.name_or_path": "qwen"}),
        ("name", "env", "classic", "CartPole-v1", {}, {"env.id": "CartPole-v1"}),
        ("attn_implementation", "model", "llm", "sdpa", {}, {}),  # no equivalent
        # numbers written as strings (quoted, or `1e3`, which PyYAML reads as text): numbers
        (
            "per_device_train_batch_size",
            "",
            "llm",
            "8",
            {"per_device_train_batch_size": "8", "gradient_accumulation_steps": 4},
            {"train.batch_size": 32, "train.micro_batch_size": 8},  # not "8888"
        ),
        ("train_batch_size", "data", "llm", "128", {"n": 8}, {"train.batch_size": 1024}),
        ("warmup_steps", "", "llm", "50", {"max_steps": "1e3"}, {"optim.warmup_ratio": 0.05}),
        ("test_timeout", "reward.code", "llm", "2.5", {}, {"sandbox.time_limit_ms": 2500}),
        ("adam_beta1", "", "llm", "0.8", {"adam_beta1": "0.8"}, {"optim.betas": [0.8, 0.999]}),
    ],
)
def test_a_foreign_value_becomes_ascent_keys(key, section, kind, value, context, expected):
    alias = find(key, section, kind)
    if expected is None:
        assert alias is None and aliases.resolve(key, section, kind) == (f"algorithm.{key}",)
        return
    assert alias is not None
    assert alias.values(value, context) == expected


@pytest.mark.parametrize(
    ("key", "value"),
    [("report_to", "mlflow"), ("loss_type", "sapo"), ("top_k", -5), ("warmup_steps", 10)],
)
def test_a_value_with_no_ascent_form_is_refused_with_why(key, value):
    with pytest.raises(ValueError):
        find(key, "", "llm").values(value, {})  # warmup_steps: no step count to divide by


@pytest.mark.parametrize(
    ("key", "value", "context", "why"),
    [
        (
            "per_device_train_batch_size",
            "eight",
            {"per_device_train_batch_size": "eight"},
            "a number",
        ),
        ("gradient_accumulation_steps", 4, {"gradient_accumulation_steps": "4x"}, "a number"),
        ("per_device_train_batch_size", 2.5, {"per_device_train_batch_size": 2.5}, "whole"),
        ("per_device_train_batch_size", 0, {"per_device_train_batch_size": 0}, "below 1"),
        ("gradient_accumulation_steps", True, {"gradient_accumulation_steps": True}, "a number"),
        ("test_timeout", float("inf"), {}, "finite"),  # not an OverflowError from round()
        ("test_timeout", [10], {}, "a number"),
        ("warmup_steps", 10, {"max_steps": "many"}, "a number"),
    ],
)
def test_arithmetic_on_a_value_that_is_no_number_is_refused(key, value, context, why):
    alias = find(key, "reward.code" if key == "test_timeout" else "", "llm")
    with pytest.raises(ValueError, match=why):
        alias.values(value, context)


@pytest.mark.parametrize(
    ("key", "value", "iterations", "expected"),
    [
        ("max_steps", 500, 2, 250),
        ("max_steps", 100, 3, 34),  # 33.3 generations: one more, not one less
        ("save_steps", 10, 4, 3),
        ("eval_steps", "50", 2, 25),
        ("logging_steps", 5, 2, 3),
        ("logging_steps", 7, 1, 7),
        ("save_steps", 0, 2, 0),  # TRL's "never" stays "only at the end"
    ],
)
def test_trl_step_counts_become_rollout_batches(key, value, iterations, expected):
    # TRL: max_steps optimiser steps, num_iterations of them per generation; ascent: one
    # rollout batch per step. ceil(value / iterations), worked out by hand above.
    steps, note = aliases.per_generation(key, value, {"num_iterations": iterations})
    assert steps == expected
    assert ("rounded up" in note) == (iterations > 1)


@pytest.mark.parametrize(
    ("value", "iterations", "why"),
    [(0.1, 2, "fraction of the run"), (100, 0, "below 1"), (100, "two", "a number")],
)
def test_a_trl_step_count_that_cannot_be_divided_is_refused(value, iterations, why):
    with pytest.raises(ValueError, match=why):
        aliases.per_generation("save_steps", value, {"num_iterations": iterations})


# -- hints from the loader ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "[train]\nnum_generations = 8\n",
            "unknown key 'num_generations' in [train] (did you "
            "mean [rollout] group_size? TRL's completions per prompt)",
        ),
        ("[algorithm]\nbeta = 0.04\n", "(did you mean [algorithm] kl_coef? TRL's beta"),
        ("[algorithm]\nclip_ratio = 0.2\n", "(did you mean [algorithm] clip_low and clip_high?"),
        ("[train]\nlearning_rate = 1e-6\n", "(did you mean [optim] lr?"),
        ("[train]\nmax_steps = 10\n", "(did you mean [train] total_steps?"),
        ("[logging]\nlogging_steps = 10\n", "(did you mean [logging] log_every?"),
        ("[train]\nkl_coef = 0.1\n", "(did you mean [algorithm] kl_coef?)"),  # by its name
        ("[api]\ntimeout_seconds = 9\n", "(did you mean [api] timeout_sec?"),
        ("[eval]\nrating_band = [0, 1]\n", "(did you mean [eval] rating_bands?"),
        (
            "num_generations = 8\n",
            "unknown key 'num_generations' at the top level (did you mean [rollout] group_size?",
        ),
        ('optim = "adamw_torch"\n', "(did you mean [optim] name?"),
        ("[model]\nattn_implementation = 'sdpa'\n", "(no ascent equivalent: ascent uses the"),
        ("[optim]\nlrr = 1e-5\n", "(did you mean 'lr'?)"),  # a typo: the closest key in place
        ("[optimm]\nlr = 1\n", "unknown section [optimm] (did you mean [optim]?)"),
        (
            "[grpo]\nnum_generations = 8\nbeta = 0.04\n",
            "unknown section [grpo] (GRPO settings live in [rollout] (sampling), [algorithm] "
            "(clip, KL) and [agentic]; here num_generations -> [rollout] group_size, beta -> "
            "[algorithm] kl_coef; `ascent config migrate {path}` rewrites the file)",
        ),
        ("[training]\nlearning_rate = 1e-6\n", "here learning_rate -> [optim] lr"),
        ("[env]\nid = 'CartPole-v1'\nseed = 1\n", "(did you mean [run] seed?)"),
        ("[env]\nid = 'CartPole-v1'\n[train]\nn_steps = 128\n", "[train] rollout_steps?"),
    ],
)
def test_an_unknown_key_names_its_ascent_key_across_sections(tmp_path, text, expected):
    path = write(tmp_path, text)
    assert expected.format(path=path) in error_of(path)


def test_an_override_is_not_told_to_migrate_the_built_in_default():
    with pytest.raises(ConfigError) as info:
        load_config(None, ["grpo.beta=0.1"])
    message = str(info.value)
    assert "beta -> [algorithm] kl_coef" in message and "migrate" not in message


# -- top_k = -1 ---------------------------------------------------------------------------


def test_top_k_minus_one_is_off_as_in_the_write_ups_and_vllm(tmp_path):
    assert load_config(write(tmp_path, "[rollout]\ntop_k = -1\n")).rollout.top_k == 0
    assert "greater than or equal to -1" in error_of(write(tmp_path, "[rollout]\ntop_k = -2\n"))


# -- [api] base_url_env -------------------------------------------------------------------

API = """
[api]
base_url_env = "TAOTOKEN_BASE_URL"
api_key_env = "TAOTOKEN_API_KEY"
[models]
solver_model = "m"
"""


def test_base_url_env_reads_the_root_from_the_environment(tmp_path, monkeypatch):
    cfg = load_config(write(tmp_path, API))
    assert cfg.api.base_url_env == "TAOTOKEN_BASE_URL"
    keys = KeySource(environ={"TAOTOKEN_BASE_URL": "https://example.invalid/api"})
    assert resolve_roles(cfg.api, cfg.models, keys)["solver"].base_url == (
        "https://example.invalid/api/v1"
    )


def test_base_url_env_reads_the_env_file_beside_the_config(tmp_path, monkeypatch):
    monkeypatch.delenv("TAOTOKEN_BASE_URL", raising=False)
    (tmp_path / ".env").write_text(
        "TAOTOKEN_BASE_URL=https://example.invalid/api/v1\nTAOTOKEN_API_KEY=sk-abcdef123456\n"
    )
    client = ApiClient.from_config(load_config(write(tmp_path, API)))
    assert client.spec("solver").base_url == "https://example.invalid/api/v1"


@pytest.mark.parametrize(("environ", "state"), [({}, "is not set"), ({"X": ""}, "is empty")])
def test_an_unset_or_empty_base_url_variable_is_one_line_naming_it(tmp_path, environ, state):
    cfg = load_config(write(tmp_path, API.replace("TAOTOKEN_BASE_URL", "X")))
    with pytest.raises(ConfigError) as info:
        resolve_roles(cfg.api, cfg.models, KeySource(environ=environ))
    message = str(info.value)
    assert message.startswith(f"[api] base_url_env: variable X {state}")
    assert "\n" not in message and "export X=" in message


def test_a_role_with_its_own_base_url_does_not_need_the_variable(tmp_path):
    text = API + '[models.solver]\nbase_url = "http://127.0.0.1:8000"\n'
    cfg = load_config(write(tmp_path, text))
    roles = resolve_roles(cfg.api, cfg.models, KeySource(environ={}))
    assert roles["solver"].base_url == "http://127.0.0.1:8000/v1"


def test_a_variable_holding_no_url_is_refused(tmp_path):
    cfg = load_config(write(tmp_path, API))
    with pytest.raises(ConfigError, match=r"base_url_env \(TAOTOKEN_BASE_URL\).*http\(s\) URL"):
        resolve_roles(cfg.api, cfg.models, KeySource(environ={"TAOTOKEN_BASE_URL": "nope"}))


@pytest.mark.parametrize(
    ("lines", "expected"),
    [
        (
            'base_url = "https://a.invalid/v1"\nbase_url_env = "URL"\n',
            "[api] base_url_env: base_url is set too; keep one of the two",
        ),
        ('base_url_env = "https://a.invalid/v1"\n', "base_url_env holds a URL, not a variable"),
        ('base_url_env = "$URL"\n', "is not an environment variable name"),
    ],
)
def test_base_url_env_mistakes_are_one_line(tmp_path, lines, expected):
    assert expected in error_of(write(tmp_path, f"[api]\n{lines}"))


def test_base_url_env_survives_config_show(tmp_path, run_cli):
    code, out, err = run_cli("config", "show", str(write(tmp_path, API)))
    assert code == 0, err
    again = load_config(write(tmp_path, out, "again.toml"))  # base_url printed at its default
    assert again.api.base_url_env == "TAOTOKEN_BASE_URL"

"""`ascent config migrate` on the configs the write-ups print, and on one written with TRL's
names: each comes out as an ascent config that loads, every mappable value in its ascent
place, every other key listed in a comment; the unmigrated files get "did you mean" hints
that name the right ascent key."""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
import tomli_w

from ascent.configfile import load_config
from ascent.configfile.loader import tomllib
from ascent.configfile.migrate import _check, migrate_file
from ascent.configfile.migrate_read import read_any
from ascent.errors import ConfigError
from ascent.rules import ClassicConfig, LLMConfig
from ascent.rules.roles import named_roles
from tests.fake_secrets import FAKE_KEY

SEEDS = Path(__file__).resolve().parent / "seed_configs"
HAS_VLLM = importlib.util.find_spec("vllm") is not None


def seed(tmp_path: Path, name: str, settings: bool = True) -> Path:
    """A copy of a seed config; seed003's settings.json beside it under its real name."""
    shutil.copy(SEEDS / name, tmp_path / name)
    if name == "seed003_ppo.toml" and settings:
        shutil.copy(SEEDS / "seed003_settings.json", tmp_path / "settings.json")
    return tmp_path / name


def migrated(tmp_path: Path, name: str, run_cli) -> tuple[Any, str]:
    """Migrate with the CLI into a directory of its own (no settings.json there: only what
    migrate produces is loaded), check `config show` loads it, return (config, text)."""
    source = seed(tmp_path, name)
    out = tmp_path / "out" / "migrated.toml"
    out.parent.mkdir()
    code, stdout, err = run_cli("config", "migrate", str(source), "--out", str(out))
    assert code == 0, err
    assert stdout == "" and err == f"wrote {out}\n"
    code, shown, err = run_cli("config", "show", str(out))
    assert code == 0, err
    assert tomllib.loads(shown)
    return load_config(out), out.read_text()


def comment_rows(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("#   ")]


def test_grandcode_agentic_grpo(tmp_path, run_cli):
    cfg, text = migrated(tmp_path, "seed000_grandcode.toml", run_cli)
    assert isinstance(cfg, LLMConfig)
    a = cfg.agentic
    assert a.enabled  # added: the multi-turn keys act only in agentic episodes
    assert (a.max_turns, a.context_window, a.summarize_threshold) == (6, 32768, 24000)
    assert (a.immediate_reward_weight, a.delayed_reward_weight) == (0.3, 0.7)
    assert a.off_policy_correction and a.correction_clip == 5.0
    assert a.adversarial_penalty == -0.5  # from [reward]
    assert cfg.rollout.group_size == 8 and cfg.rollout.async_workers == 8
    assert (cfg.algorithm.clip_low, cfg.algorithm.clip_high) == (0.2, 0.2)  # clip_ratio
    assert cfg.algorithm.kl_coef == 0.04
    code = cfg.reward.code
    assert (code.compile_reward, code.sample_reward, code.pass_reward) == (0.1, 0.3, 1.0)
    assert cfg.reward.functions == ["code"]
    assert cfg.sandbox.time_limit_ms == 2000
    assert cfg.eval.rating_bands == [(1800, 2400)]
    assert cfg.api.base_url == "https://example.invalid/api/v1"
    assert cfg.api.api_key_env == "TAOTOKEN_API_KEY"
    assert (cfg.api.timeout_sec, cfg.api.max_retries) == (120, 3)
    roles = named_roles(cfg.models)
    assert roles["summarizer"][0] == "claude-haiku-4-20250514"
    assert roles["testgen"][0] == "claude-sonnet-4-20250514"
    assert "max_turns = 6  # from [rollout] max_turns" in text
    assert "clip_low = 0.2  # from [grpo] clip_ratio: one clip range is both bounds" in text
    rows = comment_rows(text)
    assert any(r.startswith('#   [eval] platform = "codeforces": ') for r in rows)
    assert any(r.startswith('#   [eval] problem_set = "round_1087_div2": ') for r in rows)
    # agentic credit discounts across turns with the write-up's gamma and lam (turn_grpo)
    assert (cfg.algorithm.gamma, cfg.algorithm.lam) == (0.99, 0.95)
    assert "gamma = 0.99  # from [grpo] gamma" in text and "lam = 0.95  # from [grpo] lam" in text


def test_srpo_yaml(tmp_path, run_cli):
    cfg, text = migrated(tmp_path, "seed001_srpo.yaml", run_cli)
    assert cfg.model.name_or_path == "Qwen2.5-32B-Instruct"
    assert cfg.model.dtype == "bfloat16" and cfg.model.gradient_checkpointing
    r = cfg.rollout
    assert (r.group_size, r.max_new_tokens, r.temperature, r.top_p) == (8, 4096, 1.0, 1.0)
    assert r.top_k == 0  # -1 is off
    assert cfg.algorithm.kl_coef == 0.001  # kl_coef, ascent's own name, wins over beta = 0.01
    assert (cfg.algorithm.clip_low, cfg.algorithm.clip_high) == (0.2, 0.2)
    t = cfg.train
    assert (t.total_steps, t.save_steps) == (2000, 100)
    assert (t.batch_size, t.micro_batch_size) == (8, 1)  # 1 per device x 8 accumulated
    o = cfg.optim
    assert (o.lr, o.schedule, o.warmup_ratio) == (1e-6, "cosine", 0.03)
    assert cfg.logging.log_every == 1 and cfg.logging.trackers == ["swanlab"]
    assert cfg.reward.functions == ["math", "code"]
    assert (cfg.reward.math.correct_reward, cfg.reward.math.wrong_reward) == (1.0, -1.0)
    code = cfg.reward.code
    assert code.pass_reward == 1.0
    assert code.compile_error_reward == code.compile_reward == code.sample_reward == -1.0
    assert cfg.sandbox.time_limit_ms == 10000  # test_timeout = 10 s
    assert cfg.reward.math.answer_pattern == ""  # ascent's default takes the last \boxed{}
    rows = comment_rows(text)
    for left_out in (
        '[model] attn_implementation = "flash_attention_2"',
        "[grpo] repetition_penalty = 1.0",
        "[grpo] lam = 0.95",
        "[training] num_train_epochs = 2",
        '[reward] type = "rule_based"',
        "[grpo] beta = 0.01 as [algorithm] kl_coef: [grpo] kl_coef = 0.001 sets it",
        "[reward.math] answer_pattern = ",
    ):
        assert any(row.startswith(f"#   {left_out}") for row in rows), left_out
    assert "group_size = 8  # from [grpo] num_generations: TRL's completions per prompt" in text


def test_ppo_with_its_settings_json(tmp_path, run_cli):
    cfg, text = migrated(tmp_path, "seed003_ppo.toml", run_cli)
    assert isinstance(cfg, ClassicConfig)
    assert cfg.env.id == "CartPole-v1" and cfg.run.seed == 42
    t = cfg.train
    assert (t.total_timesteps, t.rollout_steps, t.update_epochs, t.batch_size) == (
        20000,
        2048,
        10,
        64,
    )
    assert (t.gamma, t.gae_lambda, t.clip_range) == (0.99, 0.95, 0.2)
    assert (t.entropy_coef, t.value_coef, t.max_grad_norm) == (0.01, 0.5, 0.5)
    assert t.save_every == 10  # [logging] save_interval
    assert cfg.logging.log_every == 1  # [logging] log_interval
    assert (cfg.optim.lr_actor, cfg.optim.lr_critic) == (3e-4, 1e-3)
    # the write-up gives no schedule: its rates stay constant (ascent's default anneals them)
    assert cfg.optim.anneal_lr is False
    assert "anneal_lr = false  # added: the file's learning rates are constant" in text
    # settings.json, folded in: runtime.device / deterministic, project, paths.log_dir
    assert cfg.run.device == "cpu" and cfg.run.deterministic
    assert cfg.logging.project == "ppo-actor-critic"
    assert cfg.run.output_dir == "./logs"
    # [service]: the log assistant's endpoint, its base URL read from a variable
    assert cfg.api.base_url_env == "TAOTOKEN_BASE_URL"
    assert cfg.api.api_key_env == "TAOTOKEN_API_KEY" and cfg.api.timeout_sec == 30
    assert named_roles(cfg.models)["analyst"][0] == "gpt-4o-mini"
    rows = comment_rows(text)
    for left_out in (
        "[env] max_episode_steps = 500",
        "[optim] weight_decay = 0.0",
        '[logging] checkpoint_dir = "./checkpoints"',
        '[service] provider = "taotoken"',
        'settings.json [service] base_url = "https://example.invalid/api": [api] base_url_env',
        "settings.json [runtime] num_workers = 1",
        'settings.json [paths] checkpoint_dir = "./checkpoints"',
        "settings.json [service] endpoints = ",
    ):
        assert any(row.startswith(f"#   {left_out}") for row in rows), left_out
    header = " ".join(line[2:] for line in text.splitlines()[3:7])
    assert header == (
        "The settings.json beside seed003_ppo.toml is folded in below. Saved beside that "
        "settings.json, this file loads with it: ascent reads the settings.json beside the "
        "config it loads (this file's keys win) and warns about each paths.config, "
        "checkpoint_dir or tensorboard that differs from its own layout. Saved elsewhere, this "
        "file is used without it."
    )


def test_a_classic_config_without_settings_json_says_what_one_beside_it_would_do(tmp_path, run_cli):
    code, text, err = run_cli("config", "migrate", str(seed(tmp_path, "seed003_ppo.toml", False)))
    assert code == 0, err
    assert (
        "# A settings.json saved beside this file (output_dir, device, threads, deterministic) "
        "fills\n# the keys this file leaves out.\n"
    ) in text
    code, text, err = run_cli("config", "migrate", str(seed(tmp_path, "seed004_vapo.toml")))
    assert code == 0, err
    assert "settings.json" not in text  # an LLM run reads none


def test_vapo(tmp_path, run_cli):
    cfg, text = migrated(tmp_path, "seed004_vapo.toml", run_cli)
    assert cfg.api.timeout_sec == 120  # timeout_seconds
    assert cfg.model.name_or_path == "qwen-32b"
    r = cfg.rollout
    assert (r.temperature, r.top_p, r.max_new_tokens, r.group_size) == (0.7, 0.95, 4096, 8)
    alg = cfg.algorithm
    assert alg.advantage == "length_adaptive_gae" and alg.length_alpha == 0.02
    assert alg.loss_agg == "token_mean"
    assert (alg.kl_coef, alg.clip_low, alg.clip_high) == (0.01, 0.2, 0.2)
    assert alg.is_cap == 2.0  # added: replayed completions need capped importance weights
    assert cfg.sampling.replay_ratio == 0.25  # 0.3 x 64 = 19.2 rows; 16 leave whole groups
    t = cfg.train
    assert (t.total_steps, t.batch_size, t.eval_steps, t.save_steps) == (5000, 64, 250, 500)
    assert cfg.optim.lr == 1e-6
    assert "replay_ratio = 0.25  # from [vapo] replay_ratio = 0.3: " in text
    assert "is_cap = 2.0  # added: " in text
    rows = comment_rows(text)
    assert (
        '#   [vapo] lambda_base = 0.95: advantage "length_adaptive_gae" does not read lam' in rows
    )
    assert any(row.startswith('#   [eval] benchmark = "aime_2024": ') for row in rows)
    assert any(row.startswith("#   [vapo] positive_replay = true: ") for row in rows)


# What trl_grpo_config.yaml becomes, worked out from the file by hand. TRL's max_steps,
# save_steps, eval_steps and logging_steps count optimiser steps, num_iterations = 2 of them per
# generation; ascent counts rollout batches: each is divided by 2, rounded up.
TRL_EXPECTED = {
    "run.output_dir": "runs",  # output_dir = runs/qwen-grpo is the run directory
    "run.name": "qwen-grpo",
    "run.seed": 7,
    "model.name_or_path": "Qwen/Qwen2.5-1.5B-Instruct",
    "model.dtype": "bfloat16",
    "model.gradient_checkpointing": True,
    "model.lora.enabled": True,
    "model.lora.r": 32,
    "model.lora.alpha": 64,
    "model.lora.dropout": 0.1,
    "model.lora.target_modules": ["q_proj", "v_proj"],
    "data.path": "trl-lib/DeepMath-103K",
    "rollout.engine": "vllm",
    "rollout.vllm.gpu_memory_utilization": 0.3,
    "rollout.group_size": 8,
    "rollout.max_new_tokens": 1024,
    "rollout.temperature": 0.9,
    "rollout.top_p": 0.95,
    "rollout.top_k": 50,
    "algorithm.kl_coef": 0.04,  # beta
    "algorithm.clip_low": 0.2,  # epsilon
    "algorithm.clip_high": 0.28,  # epsilon_high
    "algorithm.loss_agg": "token_mean",  # loss_type = dapo
    "algorithm.advantage": "dr_grpo",  # scale_rewards = false
    "algorithm.overlong": "mask",  # mask_truncated_completions
    "train.batch_size": 16,  # 4 per device x 4 accumulated
    "train.micro_batch_size": 4,
    "train.ppo_epochs": 2,  # num_iterations
    "train.total_steps": 250,  # max_steps 500 / 2
    "train.save_steps": 50,  # 100 / 2
    "train.eval_steps": 25,  # 50 / 2
    "logging.log_every": 3,  # logging_steps 5 / 2 = 2.5, rounded up
    "train.keep_last": 3,
    "train.max_grad_norm": 0.5,
    "optim.lr": 3e-6,
    "optim.schedule": "cosine",
    "optim.warmup_ratio": 0.05,
    "optim.weight_decay": 0.01,
    "optim.betas": [0.9, 0.99],
    "optim.eps": 1e-7,
    "logging.trackers": ["wandb"],
}


def test_trl_grpo_config_names(tmp_path, run_cli):
    source = seed(tmp_path, "trl_grpo_config.yaml")
    result = migrate_file(source)
    # every value, with or without vllm installed (use_vllm needs the extra only to load)
    assert {k: result.values.get(k) for k in TRL_EXPECTED} == TRL_EXPECTED
    rows = comment_rows(result.text)
    for left_out in (
        "max_prompt_length = 512",
        "num_train_epochs = 1",
        "reward_weights = [1.0, 0.5]",
        "epsilon = 0.2 as [algorithm] clip_high: epsilon_high = 0.28 sets it",
    ):
        assert any(row.startswith(f"#   {left_out}") for row in rows), left_out
    assert "total_steps = 250  # from max_steps: TRL counts optimiser steps, 2 per " in result.text
    assert "500 / 2, rounded up" in result.text
    if not HAS_VLLM:
        assert "needs the vllm extra" in (result.problem or "")
        return
    assert result.problem is None
    (tmp_path / "cli").mkdir()
    cfg, _ = migrated(tmp_path / "cli", "trl_grpo_config.yaml", run_cli)
    loaded = cfg.model_dump()
    for dotted, expected in TRL_EXPECTED.items():
        node = loaded
        for part in dotted.split("."):
            node = node[part]
        assert node == (tuple(expected) if dotted == "optim.betas" else expected), dotted


def test_trl_steps_are_not_divided_without_num_iterations(tmp_path):
    source = tmp_path / "trl.yaml"
    source.write_text("max_steps: 500\nsave_steps: 100\neval_steps: 50\nlogging_steps: 5\n")
    values = migrate_file(source).values
    assert (values["train.total_steps"], values["train.save_steps"]) == (500, 100)
    assert (values["train.eval_steps"], values["logging.log_every"]) == (50, 5)


def test_a_trl_step_fraction_is_not_mapped_when_steps_are_divided(tmp_path):
    source = tmp_path / "trl.yaml"
    source.write_text("num_iterations: 2\nmax_steps: 100\nsave_steps: 0.25\n")
    result = migrate_file(source)
    assert result.values["train.total_steps"] == 50 and "train.save_steps" not in result.values
    assert any(
        row.startswith("#   save_steps = 0.25: save_steps below 1 is TRL's fraction of the run")
        for row in comment_rows(result.text)
    )


def _seed_files() -> list[str]:
    return sorted(p.name for p in SEEDS.iterdir() if p.suffix in (".toml", ".yaml", ".json"))


def _accounted(result: Any, origin: str, dotted: str, value: Any) -> bool:
    """Whether migrate says where a key went, in the forms it writes: kept in place with its
    value, an inline `# from <origin>` comment on the key it moved to, or a header row
    `#   <origin> = <value>: why` (left out, not mapped)."""
    if not origin.startswith("settings.json ") and result.values.get(dotted, object()) == value:
        return True
    moved = re.compile(rf"  # from (?:.*, )?{re.escape(origin)}(?:, | = |: |$)")
    body = [line for line in result.text.splitlines() if not line.startswith("#")]
    if any(moved.search(line) for line in body):
        return True
    return any(row.startswith(f"#   {origin} = ") for row in comment_rows(result.text))


@pytest.mark.parametrize("name", _seed_files())
def test_every_key_is_kept_moved_or_listed(tmp_path, name):
    """Nothing is lost silently: each key of each seed file (its settings.json too) either
    stays where it was with its value or is named in the output, in the comment form
    migrate uses for where it came from."""
    if name.endswith(".json"):  # read beside the TOML of the same seed
        toml = next(SEEDS.glob(f"{name.split('_')[0]}_*.toml")).name
        source, prefix = seed(tmp_path, toml), "settings.json "
        data = json.loads((SEEDS / name).read_text())
    else:
        source, prefix = seed(tmp_path, name), ""
        data = read_any(source)
    result = migrate_file(source)

    def leaves(node: dict[str, Any], path: tuple[str, ...]):
        for key, value in node.items():
            if isinstance(value, dict) and key not in ("endpoints",):
                yield from leaves(value, (*path, key))
            else:
                yield path, key, value

    found = list(leaves(data, ()))
    assert found
    for path, key, value in found:
        origin = prefix + (f"[{'.'.join(path)}] {key}" if path else key)
        dotted = ".".join((*path, key))
        assert _accounted(result, origin, dotted, value), origin


@pytest.mark.parametrize("name", ["seed001_srpo.yaml", "trl_grpo_config.yaml"])
def test_config_show_on_yaml_points_at_migrate(tmp_path, run_cli, name):
    code, out, err = run_cli("config", "show", str(seed(tmp_path, name)))
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and "ascent configs are TOML" in err
    assert f"`ascent config migrate {tmp_path / name}`" in err


def test_migrate_prints_to_stdout_and_refuses_to_overwrite_its_input(tmp_path, run_cli):
    source = seed(tmp_path, "seed004_vapo.toml")
    code, out, err = run_cli("config", "migrate", str(source))
    assert code == 0 and err == ""
    assert out == migrate_file(source).text
    code, _, err = run_cli("config", "migrate", str(source), "--out", str(source))
    assert code == 2 and "that is the file being migrated" in err
    assert source.read_text() == (SEEDS / "seed004_vapo.toml").read_text()


def test_a_result_that_does_not_load_is_printed_then_named_in_one_line(tmp_path, run_cli):
    source = tmp_path / "odd.toml"
    source.write_text("[grpo]\nnum_generations = 6\n[training]\nbatch_size = 64\n")
    code, out, err = run_cli("config", "migrate", str(source))
    assert code == 2
    assert "group_size = 6  # from [grpo] num_generations" in out
    assert "# does not load yet: " in out
    assert err.count("\n") == 1
    assert err.startswith("error: the migrated config does not load yet: ")
    assert "group_size (6) must divide batch_size (64)" in err


def test_unreadable_yaml_is_one_line(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("grpo:\n  beta: [1, 2\n")
    with pytest.raises(ConfigError, match=r"bad\.yaml: YAML syntax error at line \d+"):
        migrate_file(bad)
    (tmp_path / "list.yml").write_text("- 1\n- 2\n")
    with pytest.raises(ConfigError, match="expected a mapping"):
        migrate_file(tmp_path / "list.yml")


@pytest.mark.parametrize(
    ("text", "key", "target"),
    [
        ("lora_target_modules: [q_proj, null]\n", "lora_target_modules", "target_modules"),
        ("lora_target_modules: !!set {q_proj: null}\n", "lora_target_modules", "target_modules"),
        ("lora_dropout: [0.1, null]\n", "lora_dropout", "dropout"),
        ("dataset_name: !!binary aGVsbG8=\n", "dataset_name", "path"),
    ],
)
def test_a_value_toml_cannot_hold_is_listed_as_not_mapped(tmp_path, run_cli, text, key, target):
    source = tmp_path / "trl.yaml"
    source.write_text("lora_r: 8\n" + text)
    code, out, err = run_cli("config", "migrate", str(source))
    assert (code, err) == (0, "")
    written = tomllib.loads(out)  # the rest is written, and is TOML
    assert written["model"]["lora"]["r"] == 8
    assert target not in written["model"]["lora"] and "data" not in written
    row = next(r for r in comment_rows(out) if r.startswith(f"#   {key} = "))
    assert row.endswith(": no TOML form (a null inside it, a set or binary data)")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("a: &a {b: *a}\n", "a value contains itself (a YAML anchor used inside its own value)"),
        ("a: &a [1, *a]\n", "a value contains itself"),
        ("seed: " + "9" * 4400 + "\n", "a number too long to read"),
        ('lora_target_modules: ["\\ud800"]\n', "half of a surrogate pair ('\\ud800')"),
        ("a: " + "[" * 40 + "]" * 40 + "\n", "nested more than 32 deep"),
    ],
)
def test_a_yaml_no_config_can_be_is_one_line(tmp_path, run_cli, text, expected):
    source = tmp_path / "odd.yaml"
    source.write_text(text)
    code, out, err = run_cli("config", "migrate", str(source))
    assert (code, out) == (2, "")
    assert err.count("\n") == 1 and err.startswith(f"error: {source}: ")
    assert expected in err


def test_a_table_name_that_is_no_bare_key_is_quoted(tmp_path):
    source = tmp_path / "roles.toml"
    source.write_text('[models."a b"]\nmodel = "m"\n[models."c.d"]\nmodel = "n"\n')
    result = migrate_file(source)
    assert '\n[models."a b"]\nmodel = "m"\n' in result.text
    assert tomllib.loads(result.text)["models"] == {"a b": {"model": "m"}}
    # the role name is what does not load, and says so; a dotted name is no ascent key
    assert "unknown key 'a b'" in (result.problem or "")
    assert '#   [models] c.d = {"model": "n"}: a name with a dot in it is no ascent key' in (
        comment_rows(result.text)
    )


def test_text_that_is_not_toml_is_a_reason_not_a_traceback():
    problem, warnings = _check("[models.a b]\n", "x.toml", False)
    assert problem is not None and problem.startswith("x.toml (migrated): not valid TOML (")
    assert warnings == []


def leaked(text: str, secret: str) -> list[str]:
    """Every 5-character piece of `secret` past its first 4 characters found in `text`."""
    return [secret[i : i + 5] for i in range(4, len(secret) - 4) if secret[i : i + 5] in text]


@pytest.mark.parametrize(
    ("name", "text", "secret", "why"),
    [
        (
            "a.toml",
            '[api]\napi_key = "abcdef0123456789"\napi_key_env = "MY_KEY"\n',
            "abcdef0123456789",
            "put it in the environment variable that [api] api_key_env names (MY_KEY)",
        ),
        (
            "b.yaml",
            "hub_token: plainXq7Vb2value\nlearning_rate: 1.0e-6\n",
            "plainXq7Vb2value",
            "a secret does not go in a config",
        ),
        (
            "c.toml",
            f'[api]\napi_key_env = "{FAKE_KEY}"\n',
            FAKE_KEY,
            "looks like an API key, not a variable's name",
        ),
        (
            "d.toml",
            '[wandb]\nheaders = {authorization = "Bearer-xyz-0123456789"}\n',
            "Bearer-xyz-0123456789",
            "no ascent key of this name",
        ),
    ],
)
def test_a_secret_in_the_file_is_listed_masked_and_never_written(
    tmp_path, run_cli, name, text, secret, why
):
    source = tmp_path / name
    source.write_text(text)
    code, out, err = run_cli("config", "migrate", str(source))
    assert leaked(out + err, secret) == []
    assert f"'{secret[:4]}…' ({len(secret)} chars)" in out
    row = next(r for r in comment_rows(out) if secret[:4] in r)
    assert why in row
    assert code == 0, err  # the rest loads: nothing secret went into it


def test_the_result_is_checked_with_the_settings_json_it_is_saved_beside(tmp_path, run_cli):
    source = seed(tmp_path, "seed003_ppo.toml")
    out = tmp_path / "migrated.toml"  # beside the settings.json: the merge applies
    code, _, err = run_cli("config", "migrate", str(source), "--out", str(out))
    assert code == 0, err
    assert run_cli("config", "show", str(out))[0] == 0
    settings = json.loads((SEEDS / "seed003_settings.json").read_text())
    settings["runtime"]["num_workers"] = 4  # the merge refuses it
    (tmp_path / "settings.json").write_text(json.dumps(settings))
    code, _, err = run_cli("config", "migrate", str(source), "--out", str(out))
    assert code == 2 and err.count("\n") == 2  # "wrote PATH", then the one-line error
    assert err.splitlines()[1].startswith("error: the migrated config does not load yet: ")
    assert "runtime.num_workers 4: a classic run has no worker pool" in err
    assert "# does not load yet: " in out.read_text()
    code, _, shown_err = run_cli("config", "show", str(out))
    assert code == 2 and "runtime.num_workers 4" in shown_err  # what migrate said


@pytest.mark.parametrize(
    ("service", "append_v1", "row"),
    [
        (
            {"base_url": "https://x.example/api", "endpoints": {"chat": "/chat/completions"}},
            False,
            "",
        ),
        (
            {"base_url": "https://x.example/api", "endpoints": {"chat": "/v1/chat/completions"}},
            True,  # ascent adds /v1: the endpoints agree
            "settings.json [service] endpoints = ",
        ),
        (
            {"base_url": "https://x.example/v1", "endpoints": {"chat": "/chat/completions"}},
            True,  # a versioned root: nothing to add or leave out
            "settings.json [service] endpoints = ",
        ),
    ],
)
def test_service_endpoints_set_append_v1_as_the_loader_does(
    tmp_path, run_cli, service, append_v1, row
):
    (tmp_path / "settings.json").write_text(json.dumps({"service": service}))
    source = tmp_path / "ppo.toml"
    source.write_text('[env]\nid = "CartPole-v1"\n')
    loaded_beside = load_config(source).api.append_v1  # the loader, reading the settings.json
    assert loaded_beside is append_v1
    result = migrate_file(source)
    (tmp_path / "alone").mkdir()
    out = tmp_path / "alone" / "ppo.toml"  # without the settings.json: the file alone says it
    out.write_text(result.text)
    assert load_config(out).api.append_v1 is append_v1
    if not append_v1:
        assert (
            "append_v1 = false  # from settings.json [service] endpoints: paths without a "
            "version under a base_url without one: ascent adds no /v1"
        ) in result.text
    else:
        assert "append_v1" not in tomllib.loads(result.text).get("api", {})
        assert any(r.startswith(f"#   {row}") for r in comment_rows(result.text))


def test_endpoints_ascent_would_not_request_are_not_mapped(tmp_path):
    source = tmp_path / "w.toml"
    source.write_text(
        '[service]\nbase_url = "https://x.example/v1"\n'
        'endpoints = {chat = "/v1/chat/completions"}\n'
    )
    rows = comment_rows(migrate_file(source).text)
    assert any(
        r.startswith("#   [service] endpoints = ") and "is not a request ascent sends" in r
        for r in rows
    ), rows


def test_a_number_yaml_reads_as_text_becomes_a_number(tmp_path):
    source = tmp_path / "trl.yaml"
    source.write_text(
        "learning_rate: 1e-5\nper_device_train_batch_size: '8'\ngradient_accumulation_steps: 4\n"
    )
    values = migrate_file(source).values
    assert values["optim.lr"] == 1e-5 and isinstance(values["optim.lr"], float)
    assert (values["train.batch_size"], values["train.micro_batch_size"]) == (32, 8)


def test_a_batch_size_that_is_no_number_is_not_mapped(tmp_path):
    source = tmp_path / "trl.yaml"
    source.write_text("per_device_train_batch_size: eight\ngradient_accumulation_steps: 4\n")
    result = migrate_file(source)
    assert "train.batch_size" not in result.values
    rows = comment_rows(result.text)
    assert any(
        r.startswith(
            '#   per_device_train_batch_size = "eight": per_device_train_batch_size is not a number'
        )
        for r in rows
    ), rows


# -- the hints `ascent config show` gives on the unmigrated files, one key at a time ------

HINTS: dict[str, dict[str, str]] = {
    "seed000_grandcode.toml": {
        "rollout.max_turns": "(did you mean [agentic] max_turns?)",
        "rollout.context_window": "(did you mean [agentic] context_window?)",
        "rollout.summarize_threshold": "(did you mean [agentic] summarize_threshold?)",
        "grpo.group_size": "group_size -> [rollout] group_size",
        "grpo.clip_ratio": "clip_ratio -> [algorithm] clip_low and clip_high",
        "grpo.kl_coef": "kl_coef -> [algorithm] kl_coef",
        "grpo.gamma": "gamma -> [algorithm] gamma",
        "grpo.lam": "lam -> [algorithm] lam",
        "grpo.immediate_reward_weight": "-> [agentic] immediate_reward_weight",
        "grpo.delayed_reward_weight": "-> [agentic] delayed_reward_weight",
        "grpo.off_policy_correction": "-> [agentic] off_policy_correction",
        "grpo.correction_clip": "-> [agentic] correction_clip",
        "reward.compile_pass": "(did you mean [reward.code] compile_reward?",
        "reward.sample_pass": "(did you mean [reward.code] sample_reward?",
        "reward.hidden_pass": "(did you mean [reward.code] pass_reward?",
        "reward.adversarial_penalty": "(did you mean [agentic] adversarial_penalty?)",
        "reward.time_limit_ms": "(did you mean [sandbox] time_limit_ms?)",
        "eval.platform": "(no ascent equivalent: ascent eval reads problems from [eval] problems",
        "eval.problem_set": "(no ascent equivalent: ascent eval reads problems from [eval]",
        "eval.rating_band": "(did you mean [eval] rating_bands?",
    },
    "seed001_srpo.yaml": {
        "model.base_model": "(did you mean [model] name_or_path?",
        "model.torch_dtype": "(did you mean [model] dtype?",
        "model.attn_implementation": "(no ascent equivalent: ",
        "grpo.num_generations": "num_generations -> [rollout] group_size",
        "grpo.max_new_tokens": "max_new_tokens -> [rollout] max_new_tokens",
        "grpo.temperature": "temperature -> [rollout] temperature",
        "grpo.top_p": "top_p -> [rollout] top_p",
        "grpo.top_k": "top_k -> [rollout] top_k",
        "grpo.repetition_penalty": "repetition_penalty -> no equivalent",
        "grpo.kl_coef": "kl_coef -> [algorithm] kl_coef",
        "grpo.clip_range": "clip_range -> [algorithm] clip_low and clip_high",
        "grpo.gamma": "gamma -> [algorithm] gamma",
        "grpo.lam": "lam -> [algorithm] lam",
        "grpo.beta": "beta -> [algorithm] kl_coef",
        "training.per_device_train_batch_size": "-> [train] batch_size and micro_batch_size",
        "training.gradient_accumulation_steps": "-> [train] batch_size and micro_batch_size",
        "training.learning_rate": "learning_rate -> [optim] lr",
        "training.lr_scheduler_type": "lr_scheduler_type -> [optim] schedule",
        "training.warmup_ratio": "warmup_ratio -> [optim] warmup_ratio",
        "training.num_train_epochs": "num_train_epochs -> no equivalent",
        "training.max_steps": "max_steps -> [train] total_steps",
        "training.save_steps": "save_steps -> [train] save_steps",
        "training.logging_steps": "logging_steps -> [logging] log_every",
        "training.bf16": "bf16 -> [model] dtype",
        "training.gradient_checkpointing": "-> [model] gradient_checkpointing",
        "training.report_to": "report_to -> [logging] trackers",
        "reward.type": "(no ascent equivalent: ",
        "reward.code.test_timeout": "(did you mean [sandbox] time_limit_ms?",
        "reward.code.correct_reward": "(did you mean [reward.code] pass_reward?",
        "reward.code.wrong_reward": "(did you mean [reward.code] compile_error_reward and",
    },
    "seed003_ppo.toml": {
        "env.name": "(did you mean [env] id?",
        "env.seed": "(did you mean [run] seed?)",
        "env.max_episode_steps": "(no ascent equivalent: ",
        "optim.weight_decay": "(no ascent equivalent: classic PPO's Adam has no weight decay",
        "logging.log_interval": "(did you mean [logging] log_every?",
        "logging.save_interval": "(did you mean [train] save_every?",
        "logging.checkpoint_dir": "(no ascent equivalent: checkpoints go to",
        "service.provider": "provider",
        "service.base_url_env": "[api] base_url",
        "service.api_key_env": "[api] api_key_env",
        "service.model": "[models] analyst_model",
        "service.timeout": "[api] timeout_sec",
    },
    "seed004_vapo.toml": {
        "api.timeout_seconds": "(did you mean [api] timeout_sec?",
        "model.name": "(did you mean [model] name_or_path?",
        "model.temperature": "(did you mean [rollout] temperature?",
        "model.top_p": "(did you mean [rollout] top_p?",
        "model.max_tokens": "(did you mean [rollout] max_new_tokens?",
        "vapo.lambda_base": "lambda_base -> [algorithm] lam",
        "vapo.alpha": "alpha -> [algorithm] length_alpha",
        "vapo.use_length_adaptive": "use_length_adaptive -> [algorithm] advantage",
        "vapo.token_level_loss": "token_level_loss -> [algorithm] loss_agg",
        "vapo.loss_reduction": "loss_reduction -> [algorithm] loss_agg",
        "vapo.group_size": "group_size -> [rollout] group_size",
        "vapo.positive_replay": "positive_replay -> no equivalent",
        "vapo.replay_ratio": "replay_ratio -> [sampling] replay_ratio",
        "training.total_steps": "total_steps -> [train] total_steps",
        "training.batch_size": "batch_size -> [train] batch_size",
        "training.learning_rate": "learning_rate -> [optim] lr",
        "training.kl_coef": "kl_coef -> [algorithm] kl_coef",
        "training.clip_range": "clip_range -> [algorithm] clip_low and clip_high",
        "eval.benchmark": "(no ascent equivalent: ascent eval reads problems from [eval]",
        "eval.eval_interval": "(did you mean [train] eval_steps?",
        "eval.save_interval": "(did you mean [train] save_steps?",
    },
    "trl_grpo_config.yaml": {
        "model_name_or_path": "(did you mean [model] name_or_path?",
        "torch_dtype": "(did you mean [model] dtype?",
        "attn_implementation": "(no ascent equivalent: ",
        "use_peft": "(did you mean [model.lora] enabled?",
        "lora_r": "(did you mean [model.lora] r?",
        "lora_alpha": "(did you mean [model.lora] alpha?",
        "lora_dropout": "(did you mean [model.lora] dropout?",
        "lora_target_modules": "(did you mean [model.lora] target_modules?",
        "dataset_name": "(did you mean [data] path?",
        "output_dir": "(did you mean [run] output_dir and name?",
        "seed": "(did you mean [run] seed?)",
        "bf16": "(did you mean [model] dtype?",
        "gradient_checkpointing": "(did you mean [model] gradient_checkpointing?)",
        "learning_rate": "(did you mean [optim] lr?",
        "lr_scheduler_type": "(did you mean [optim] schedule?",
        "warmup_ratio": "(did you mean [optim] warmup_ratio?)",
        "weight_decay": "(did you mean [optim] weight_decay?)",
        "adam_beta1": "(did you mean [optim] betas?",
        "adam_beta2": "(did you mean [optim] betas?",
        "adam_epsilon": "(did you mean [optim] eps?",
        "max_grad_norm": "(did you mean [train] max_grad_norm?)",
        "optim": "(did you mean [optim] name?",
        "per_device_train_batch_size": "(did you mean [train] batch_size and micro_batch_size?",
        "gradient_accumulation_steps": "(did you mean [train] batch_size and micro_batch_size?",
        "num_generations": "(did you mean [rollout] group_size?",
        "num_iterations": "(did you mean [train] ppo_epochs?",
        "max_prompt_length": "(no ascent equivalent: ",
        "max_completion_length": "(did you mean [rollout] max_new_tokens?",
        "temperature": "(did you mean [rollout] temperature?)",
        "top_p": "(did you mean [rollout] top_p?)",
        "top_k": "(did you mean [rollout] top_k?",
        "repetition_penalty": "(no ascent equivalent: ",
        "beta": "(did you mean [algorithm] kl_coef?",
        "epsilon": "(did you mean [algorithm] clip_low and clip_high?",
        "epsilon_high": "(did you mean [algorithm] clip_high?",
        "loss_type": "(did you mean [algorithm] loss_agg?",
        "scale_rewards": "(did you mean [algorithm] advantage?",
        "mask_truncated_completions": "(did you mean [algorithm] overlong?",
        "max_steps": "(did you mean [train] total_steps?",
        "num_train_epochs": "(no ascent equivalent: ",
        "save_steps": "(did you mean [train] save_steps?)",
        "save_total_limit": "(did you mean [train] keep_last?",
        "eval_strategy": "(did you mean [train] eval_steps?",
        "eval_steps": "(did you mean [train] eval_steps?)",
        "logging_steps": "(did you mean [logging] log_every?",
        "report_to": "(did you mean [logging] trackers?",
        "use_vllm": "(did you mean [rollout] engine?",
        "vllm_mode": "(did you mean [rollout.vllm] mode?)",
        "vllm_gpu_memory_utilization": "(did you mean [rollout.vllm] gpu_memory_utilization?)",
        "reward_weights": "(no ascent equivalent: ",
    },
}


def _leaves(node: dict[str, Any], path: tuple[str, ...] = ()):
    for key, value in node.items():
        if isinstance(value, dict):
            yield from _leaves(value, (*path, key))
        else:
            yield ".".join((*path, key)), value


def _one_key_config(tmp_path: Path, dotted: str, value: Any, classic: bool) -> Path:
    *sections, key = dotted.split(".")
    data: dict[str, Any] = {}
    node = data
    for part in sections:
        node = node.setdefault(part, {})
    node[key] = value
    if classic:
        data.setdefault("env", {}).setdefault("id", "CartPole-v1")
    path = tmp_path / "one.toml"
    path.write_text(tomli_w.dumps(data))
    return path


def _unknown_keys(name: str, tmp_path: Path) -> dict[str, str]:
    """Each key of the file, alone in a config: the error `config show` gives, if any."""
    data = read_any(SEEDS / name)
    out = {}
    for dotted, value in _leaves(data):
        path = _one_key_config(tmp_path, dotted, value, "env" in data)
        try:
            load_config(path)
        except ConfigError as err:
            out[dotted] = str(err)
    return out


@pytest.mark.parametrize("name", sorted(HINTS))
def test_config_show_names_the_ascent_key_of_each_unknown_one(tmp_path, name):
    messages = _unknown_keys(name, tmp_path)
    assert sorted(messages) == sorted(HINTS[name])  # every unknown key, and only those
    for dotted, expected in HINTS[name].items():
        message = messages[dotted]
        assert "\n" not in message
        assert expected in message, f"{dotted}: {message}"


@pytest.mark.parametrize("name", sorted(p.name for p in SEEDS.glob("*.toml")))
def test_the_unmigrated_toml_fails_in_one_line_naming_a_place(tmp_path, run_cli, name):
    code, _, err = run_cli("config", "show", str(seed(tmp_path, name, settings=False)))
    assert code == 2 and err.count("\n") == 1
    assert "did you mean [" in err or "[service]" in err


EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.mark.parametrize("example", sorted(EXAMPLES.glob("*.toml")), ids=lambda p: p.name)
def test_an_ascent_config_comes_through_as_the_same_config(tmp_path, example):
    """Migration is the identity on ascent's own configs (recipes with [[stages]], per-role
    [models.<role>] tables, a classic run's settings.json)."""
    result = migrate_file(example)
    assert result.problem is None
    assert result.left_out == [] and result.not_mapped == []
    out = tmp_path / example.name  # the same stem: the same default run name
    out.write_text(result.text)
    assert load_config(out).model_dump() == load_config(example).model_dump()

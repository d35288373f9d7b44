"""`ascent config migrate` on the configs the write-ups print, and on one written with TRL's
names: each comes out as an ascent config that loads, every mappable value in its ascent
place, every other key listed in a comment; the unmigrated files get "did you mean" hints
that name the right ascent key."""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path
from typing import Any

import pytest
import tomli_w

from ascent.config import ClassicConfig, LLMConfig, load_config
from ascent.config.loader import tomllib
from ascent.config.migrate import migrate_file, read_any
from ascent.errors import ConfigError

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
    roles = cfg.models.roles()
    assert roles["summarizer"][0] == "claude-haiku-4-20250514"
    assert roles["testgen"][0] == "claude-sonnet-4-20250514"
    assert "max_turns = 6  # from [rollout] max_turns" in text
    assert "clip_low = 0.2  # from [grpo] clip_ratio: one clip range is both bounds" in text
    rows = comment_rows(text)
    assert any(r.startswith('#   [eval] platform = "codeforces": ') for r in rows)
    assert any(r.startswith('#   [eval] problem_set = "round_1087_div2": ') for r in rows)
    assert '#   [grpo] gamma = 0.99: advantage "grpo" does not read gamma' in rows
    assert '#   [grpo] lam = 0.95: advantage "grpo" does not read lam' in rows


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
    # settings.json, folded in: runtime.device / deterministic, project, paths.log_dir
    assert cfg.run.device == "cpu" and cfg.run.deterministic
    assert cfg.logging.project == "ppo-actor-critic"
    assert cfg.run.output_dir == "./logs"
    # [service]: the log assistant's endpoint, its base URL read from a variable
    assert cfg.api.base_url_env == "TAOTOKEN_BASE_URL"
    assert cfg.api.api_key_env == "TAOTOKEN_API_KEY" and cfg.api.timeout_sec == 30
    assert cfg.models.roles()["analyst"][0] == "gpt-4o-mini"
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


def test_trl_grpo_config_names(tmp_path, run_cli):
    source = seed(tmp_path, "trl_grpo_config.yaml")
    result = migrate_file(source)
    if not HAS_VLLM:  # use_vllm: the one thing that needs an extra to load
        assert "needs the vllm extra" in (result.problem or "")
        return
    assert result.problem is None
    (tmp_path / "cli").mkdir()
    cfg, text = migrated(tmp_path / "cli", "trl_grpo_config.yaml", run_cli)
    assert (cfg.run.output_dir, cfg.run.name, cfg.run.seed) == ("runs", "qwen-grpo", 7)
    m = cfg.model
    assert (m.name_or_path, m.dtype, m.gradient_checkpointing) == (
        "Qwen/Qwen2.5-1.5B-Instruct",
        "bfloat16",
        True,
    )
    assert m.lora.enabled and (m.lora.r, m.lora.alpha, m.lora.dropout) == (32, 64, 0.1)
    assert m.lora.target_modules == ["q_proj", "v_proj"]
    assert cfg.data.path == "trl-lib/DeepMath-103K"
    r = cfg.rollout
    assert r.engine == "vllm" and r.vllm.gpu_memory_utilization == 0.3
    assert (r.group_size, r.max_new_tokens, r.temperature, r.top_p, r.top_k) == (
        8,
        1024,
        0.9,
        0.95,
        50,
    )
    alg = cfg.algorithm
    assert (alg.kl_coef, alg.clip_low, alg.clip_high) == (0.04, 0.2, 0.28)  # beta, epsilon(_high)
    assert alg.loss_agg == "token_mean"  # loss_type = dapo
    assert alg.advantage == "dr_grpo"  # scale_rewards = false
    assert alg.overlong == "mask"  # mask_truncated_completions
    t = cfg.train
    assert (t.batch_size, t.micro_batch_size, t.ppo_epochs) == (16, 4, 2)  # 4 x 4; iterations
    assert (t.total_steps, t.save_steps, t.eval_steps, t.keep_last) == (500, 100, 50, 3)
    assert t.max_grad_norm == 0.5
    o = cfg.optim
    assert (o.lr, o.schedule, o.warmup_ratio, o.weight_decay) == (3e-6, "cosine", 0.05, 0.01)
    assert (o.betas, o.eps) == ((0.9, 0.99), 1e-7)
    assert cfg.logging.log_every == 5 and cfg.logging.trackers == ["wandb"]
    rows = comment_rows(text)
    for left_out in (
        "max_prompt_length = 512",
        "num_train_epochs = 1",
        "reward_weights = [1.0, 0.5]",
        "epsilon = 0.2 as [algorithm] clip_high: epsilon_high = 0.28 sets it",
    ):
        assert any(row.startswith(f"#   {left_out}") for row in rows), left_out


@pytest.mark.parametrize("name", sorted(p.name for p in SEEDS.glob("*.to*") if p.is_file()))
def test_every_key_is_kept_moved_or_listed(tmp_path, name):
    """Nothing is lost silently: each key of the file either stays where it was or is named
    in the output (in a `from ...` comment or the header's lists)."""
    source = seed(tmp_path, name)
    result = migrate_file(source)
    data = read_any(source)

    def leaves(node: dict[str, Any], path: tuple[str, ...]):
        for key, value in node.items():
            if isinstance(value, dict) and key not in ("endpoints",):
                yield from leaves(value, (*path, key))
            else:
                yield path, key

    for path, key in leaves(data, ()):
        origin = f"[{'.'.join(path)}] {key}" if path else key
        kept = ".".join((*path, key)) in result.values
        assert kept or origin in result.text, origin


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

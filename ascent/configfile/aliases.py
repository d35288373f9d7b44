"""Keys of the write-ups, TRL's `GRPOConfig` and verl, and where each lives in ascent.

One table serves two readers: the loader, which answers an unknown key with "did you mean
[section] key" across sections, and `ascent config migrate`, which rewrites a whole file with
it. An `Alias` names the foreign key, the ascent keys it maps onto (dotted, `section.key`;
none when ascent has no equivalent), a one-line note on how the value converts, and the
conversion itself when the value is not carried over as it is. A key written under its
ascent name in the wrong section (`[grpo] group_size`) needs no entry: `home` finds it.
"""

from __future__ import annotations

import functools
import math
import posixpath
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel

Kind = Literal["llm", "classic"]
Convert = Callable[[Any, Mapping[str, Any]], dict[str, Any]]


@dataclass(frozen=True)
class Alias:
    """A foreign key and the ascent keys it maps onto."""

    key: str
    targets: tuple[str, ...]  # dotted ascent keys ("algorithm.clip_low"); () = no equivalent
    note: str  # how the value converts, or why ascent has no such key (one line)
    convert: Convert | None = None  # (value, the file's keys) -> {target: value}; raises ValueError
    within: tuple[str, ...] = ()  # sections it is written in ("" = top level); () = anywhere
    kinds: tuple[Kind, ...] = ("llm",)
    weak: tuple[str, ...] = ()  # targets only implied: a key that names them outright wins

    def values(self, value: Any, context: Mapping[str, Any]) -> dict[str, Any]:
        """The ascent keys and values for `value` (ValueError: it has no ascent form)."""
        if self.convert is not None:
            return self.convert(value, context)
        return dict.fromkeys(self.targets, value)


# -- conversions: (value, every key of the file by name) -> {ascent key: value} -------------


def _choice(target: str, table: Mapping[Any, Any], what: str) -> Convert:
    def convert(value: Any, _: Mapping[str, Any]) -> dict[str, Any]:
        key = value.lower().replace("-", "_") if isinstance(value, str) else value
        if key not in table:
            raise ValueError(f"{what} {value!r} has no ascent equivalent")
        return {} if table[key] is None else {target: table[key]}

    return convert


def _top_k(value: Any, _: Mapping[str, Any]) -> dict[str, Any]:
    if not isinstance(value, int) or value < -1:
        raise ValueError(f"top_k {value!r} is not -1, 0 or a positive count")
    return {"rollout.top_k": max(value, 0)}


def _trackers(value: Any, _: Mapping[str, Any]) -> dict[str, Any]:
    names = [value] if isinstance(value, str) else list(value or [])
    names = [n for n in names if n != "none"]
    other = [n for n in names if n not in ("tensorboard", "wandb", "swanlab")]
    if other:
        raise ValueError(f"tracker {other[0]!r} is not one of tensorboard, wandb, swanlab")
    return {"logging.trackers": names}


_NUMBER = re.compile(r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?")


def number(value: Any, what: str) -> int | float:
    """`value` as a number for arithmetic: an int or float, or a string spelling one (PyYAML
    reads `1e-5` as a string, since YAML 1.1 floats need a dot). ValueError otherwise, so the
    key is listed as not mapped rather than multiplied as text ("8" x 4 is "8888")."""
    found: Any = value
    if isinstance(value, str) and len(value) <= 40 and _NUMBER.fullmatch(value.strip()):
        text = value.strip()
        found = int(text) if re.fullmatch(r"[-+]?\d+", text) else float(text)
    if isinstance(found, int) and not isinstance(found, bool):
        return found
    if isinstance(found, float) and math.isfinite(found):
        return found
    kind = "a finite number" if isinstance(found, float) else "a number"
    raise ValueError(f"{what} is not {kind}")  # (not quoted: the row shows the value, masked)


def whole(value: Any, what: str, least: int = 0) -> int:
    """`value` as a whole number of at least `least` (`number`, then integral); ValueError
    otherwise."""
    found = number(value, what)
    if isinstance(found, float) and not found.is_integer():
        raise ValueError(f"{what} is not a whole number")
    if found < least:
        raise ValueError(f"{what} is below {least}")
    return int(found)


_PER_DEVICE, _ACCUMULATE = "per_device_train_batch_size", "gradient_accumulation_steps"


def _batch(value: Any, context: Mapping[str, Any]) -> dict[str, Any]:
    per_device = whole(context.get("per_device_train_batch_size", 8), _PER_DEVICE, 1)  # TRL's
    accumulate = whole(context.get("gradient_accumulation_steps", 1), _ACCUMULATE, 1)  # defaults
    return {"train.batch_size": per_device * accumulate, "train.micro_batch_size": per_device}


def _group(context: Mapping[str, Any]) -> int:
    for key in ("group_size", "num_generations", "n"):
        if isinstance(context.get(key), int):
            return context[key]
    return 8


def _prompts(target: str, what: str) -> Convert:
    return lambda value, context: {target: whole(value, what, 1) * _group(context)}


def _warmup_steps(value: Any, context: Mapping[str, Any]) -> dict[str, Any]:
    total = next(
        (context[k] for k in ("max_steps", "total_steps", "total_training_steps") if k in context),
        None,
    )
    if total is None:
        raise ValueError("warmup_steps needs the run's step count to become warmup_ratio")
    steps = whole(total, "the run's step count", 1)
    return {"optim.warmup_ratio": round(number(value, "warmup_steps") / steps, 6)}


def _betas(value: Any, context: Mapping[str, Any]) -> dict[str, Any]:
    beta1 = number(context.get("adam_beta1", 0.9), "adam_beta1")
    return {"optim.betas": [beta1, number(context.get("adam_beta2", 0.999), "adam_beta2")]}


# TRL's step counts: each counts optimiser steps (see `per_generation`).
TRL_STEP_KEYS = frozenset({"max_steps", "save_steps", "eval_steps", "logging_steps"})


def per_generation(key: str, value: Any, context: Mapping[str, Any]) -> tuple[int, str]:
    """TRL's step count `value` (of `key`) as ascent's: (steps, a note saying how).

    TRL counts optimiser steps, and with `num_iterations` k one generation feeds k of them;
    ascent's [train] total_steps (and save_steps, eval_steps, [logging] log_every) count RL
    steps: one rollout batch, with ppo_epochs (num_iterations) passes over it. So the count
    divides by k, rounded up: a run as long or a little longer, checkpoints no rarer.
    ValueError when either is not a count (TRL's fraction of the run, below 1, included).
    """
    k = whole(context["num_iterations"], "num_iterations", 1)
    if isinstance(value, float) and 0 < value < 1:
        raise ValueError(f"{key} below 1 is TRL's fraction of the run; give a step count")
    steps = whole(value, key)
    if k == 1:
        return steps, ""
    return -(-steps // k), (
        f"TRL counts optimiser steps, {k} per generation (num_iterations = {k}); ascent counts "
        f"rollout batches: {steps} / {k}, rounded up"
    )


def _bands(value: Any, _: Mapping[str, Any]) -> dict[str, Any]:
    if isinstance(value, list) and len(value) == 2 and all(isinstance(v, int) for v in value):
        value = [value]
    return {"eval.rating_bands": value}


def _ms(target: str) -> Convert:
    return lambda value, _: {target: round(number(value, "the time limit") * 1000)}


def _run_dir(value: Any, _: Mapping[str, Any]) -> dict[str, Any]:
    parent, name = posixpath.split(str(value).rstrip("/"))
    return {"run.output_dir": parent or ".", "run.name": name} if name else {}


def _listed(target: str) -> Convert:
    return lambda value, _: {target: value if isinstance(value, list) else [value]}


_DTYPES = {"bfloat16": "bfloat16", "bf16": "bfloat16", "float32": "float32", "fp32": "float32"}
_DTYPES |= {"auto": "auto"}
_AGG = {
    "token_mean": "token_mean",
    "seq_mean_token_mean": "seq_mean_token_mean",
    "sequence_mean": "seq_mean_token_mean",
    "seq_mean_token_sum": "seq_mean_token_sum",
    "seq_mean_token_sum_norm": "seq_mean_token_sum_norm",
}
_SCHEDULES = {"cosine": "cosine", "cosine_with_min_lr": "cosine", "linear": "linear"}
_SCHEDULES |= {"constant": "constant", "constant_with_warmup": "constant"}
_BATCH_NOTE = (
    "TRL's per_device_train_batch_size x gradient_accumulation_steps completions per GPU make "
    "one optimiser step; ascent's batch_size counts completions per step over all ranks (x the "
    "GPUs you train on); micro_batch_size = per_device_train_batch_size"
)
_VLLM_MODES = {"colocate": "colocate", "server": "server"}
_ADVANTAGES = {
    "grpo": "grpo",
    "gae": "gae",
    "dr_grpo": "dr_grpo",
    "drgrpo": "dr_grpo",
    "rloo": "rloo",
    "reinforce_plus_plus": "reinforce_pp",  # verl's adv_estimator names
    "reinforce_plus_plus_baseline": "reinforce_pp_baseline",
}


_BOTH = "llm classic"


def row(
    key: str,
    targets: str,
    note: str,
    convert: Convert | None = None,
    within: str = "",
    kinds: str = "llm",
    weak: str = "",
) -> Alias:
    """One row: `targets`, `within`, `kinds` and `weak` are space-separated ("-" = top level)."""
    return Alias(
        key,
        tuple(targets.split()),
        note,
        convert,
        tuple("" if s == "-" else s for s in within.split()),
        tuple(kinds.split()),  # type: ignore[arg-type]
        tuple(weak.split()),
    )


ALIASES: tuple[Alias, ...] = (
    # -- sampling ------------------------------------------------------------------------------
    row("num_generations", "rollout.group_size", "TRL's completions per prompt"),
    row("n", "rollout.group_size", "verl's completions per prompt", within="rollout grpo"),
    row("max_completion_length", "rollout.max_new_tokens", "TRL's longest completion"),
    row("max_response_length", "rollout.max_new_tokens", "verl's longest completion"),
    row("max_tokens", "rollout.max_new_tokens", "the longest completion, in tokens"),
    row("top_k", "rollout.top_k", "-1 (off, as in vLLM) is 0", _top_k),
    row(
        "max_prompt_length",
        "",
        "ascent keeps whole prompts; [rollout.vllm] max_model_len bounds prompt + completion",
    ),
    row("repetition_penalty", "", "ascent samples without one (1.0 is off)"),
    row("min_p", "", "ascent samples with temperature, top_p and top_k only"),
    row(
        "use_vllm",
        "rollout.engine",
        'true is engine = "vllm"',
        _choice("rollout.engine", {True: "vllm", False: "transformers"}, "use_vllm"),
    ),
    row("vllm_mode", "rollout.vllm.mode", "", _choice("rollout.vllm.mode", _VLLM_MODES, "mode")),
    row("vllm_gpu_memory_utilization", "rollout.vllm.gpu_memory_utilization", ""),
    row(
        "vllm_server_base_url",
        "rollout.vllm.urls",
        "one server's URL",
        _listed("rollout.vllm.urls"),
    ),
    row("temperature", "rollout.temperature", "sampling lives in [rollout]", within="model"),
    row("top_p", "rollout.top_p", "sampling lives in [rollout]", within="model"),
    # -- algorithm -----------------------------------------------------------------------------
    row("beta", "algorithm.kl_coef", "TRL's beta is the KL weight"),
    row("kl_loss_coef", "algorithm.kl_coef", "verl's KL weight"),
    row("init_kl_coef", "algorithm.kl_coef", "the KL weight (ascent's is fixed)"),
    *(
        row(name, "algorithm.clip_low algorithm.clip_high", "one clip range is both bounds")
        for name in ("clip_ratio", "clip_range", "cliprange", "clip_eps")
    ),
    row(
        "epsilon",
        "algorithm.clip_low algorithm.clip_high",
        "TRL's clip range; epsilon_high, when given, is clip_high",
        weak="algorithm.clip_high",
    ),
    row("epsilon_high", "algorithm.clip_high", "TRL's upper clip range (clip-higher)"),
    row("clip_ratio_high", "algorithm.clip_high", "verl's upper clip range"),
    row("clip_ratio_low", "algorithm.clip_low", "verl's lower clip range"),
    row("epsilon_low", "algorithm.clip_low", "the lower clip range"),
    row(
        "loss_type",
        "algorithm.loss_agg",
        "TRL's grpo is seq_mean_token_mean, bnpo and dapo token_mean, dr_grpo "
        "seq_mean_token_sum_norm (Dr. GRPO also drops the std: [algorithm] advantage = dr_grpo)",
        _choice(
            "algorithm.loss_agg",
            {"grpo": "seq_mean_token_mean", "bnpo": "token_mean", "dapo": "token_mean"}
            | {"dr_grpo": "seq_mean_token_sum_norm"},
            "loss_type",
        ),
    ),
    *(
        row(
            name,
            "algorithm.loss_agg",
            "the loss aggregation",
            _choice("algorithm.loss_agg", _AGG, name),
        )
        for name in ("loss_reduction", "loss_agg_mode")
    ),
    row(
        "token_level_loss",
        "algorithm.loss_agg",
        "true is loss_agg = token_mean (a token-level loss)",
        _choice("algorithm.loss_agg", {True: "token_mean", False: None}, "token_level_loss"),
        weak="algorithm.loss_agg",
    ),
    row(
        "scale_rewards",
        "algorithm.advantage",
        "TRL's true / group is advantage = grpo (divide by the group's std), false / none is "
        "dr_grpo (no std division)",
        _choice(
            "algorithm.advantage",
            {True: "grpo", "group": "grpo", False: "dr_grpo", "none": "dr_grpo"},
            "scale_rewards",
        ),
    ),
    row(
        "importance_sampling_level",
        "algorithm.policy_loss",
        "TRL's sequence is policy_loss = gspo, token ppo_clip",
        _choice("algorithm.policy_loss", {"sequence": "gspo", "token": "ppo_clip"}, "level"),
    ),
    row(
        "adv_estimator",
        "algorithm.advantage",
        "verl's advantage estimator",
        _choice("algorithm.advantage", _ADVANTAGES, "adv_estimator"),
    ),
    row(
        "use_length_adaptive",
        "algorithm.advantage",
        "true is advantage = length_adaptive_gae, false gae",
        _choice(
            "algorithm.advantage",
            {True: "length_adaptive_gae", False: "gae"},
            "use_length_adaptive",
        ),
    ),
    row(
        "lambda_base",
        "algorithm.lam",
        "VAPO's base lambda; length-adaptive GAE sets each response's own, so only gae reads lam",
    ),
    *(row(name, "algorithm.lam", "the GAE lambda") for name in ("lambda", "gae_lambda")),
    row("alpha", "algorithm.length_alpha", "VAPO's length-adaptive alpha", within="vapo algorithm"),
    row("entropy_coeff", "algorithm.entropy_coef", "the entropy bonus weight"),
    row(
        "mask_truncated_completions",
        "algorithm.overlong",
        'true is overlong = "mask"',
        _choice("algorithm.overlong", {True: "mask", False: "off"}, "mask_truncated_completions"),
    ),
    row(
        "positive_replay",
        "",
        "VAPO's positive-example replay is on when [sampling] replay_ratio > 0",
    ),
    row(
        "delta",
        "",
        "TRL's upper bound on the ratio has no ascent equivalent ([algorithm] dual_clip "
        "bounds negative advantages)",
    ),
    # -- batches, steps, optimiser ---------------------------------------------------------------
    *(
        row(name, "train.batch_size train.micro_batch_size", _BATCH_NOTE, _batch)
        for name in ("per_device_train_batch_size", "gradient_accumulation_steps")
    ),
    row(
        "train_batch_size",
        "train.batch_size",
        "verl counts prompts, ascent completions: x group_size",
        _prompts("train.batch_size", "train_batch_size"),
    ),
    row(
        "ppo_mini_batch_size",
        "train.mini_batch_size",
        "verl counts prompts, ascent completions: x group_size",
        _prompts("train.mini_batch_size", "ppo_mini_batch_size"),
    ),
    row("ppo_micro_batch_size_per_gpu", "train.micro_batch_size", "completions per pass"),
    row(
        "steps_per_generation",
        "",
        "ascent takes every optimiser step of a batch from one rollout: [train] mini_batch_size",
    ),
    row("generation_batch_size", "", "ascent's [train] batch_size is the rollout batch"),
    row("num_iterations", "train.ppo_epochs", "TRL's passes over each batch"),
    row("ppo_epochs", "train.ppo_epochs", "passes over each batch", within="algorithm grpo"),
    row("update_epochs", "train.ppo_epochs", "passes over each batch"),
    row(
        "max_steps",
        "train.total_steps",
        "optimiser steps in TRL, rollout batches in ascent (the same with one step per batch)",
    ),
    row("total_training_steps", "train.total_steps", "verl's step count"),
    *(
        row(
            name,
            "",
            "ascent counts steps: total_steps = epochs x problems x group_size / batch_size",
        )
        for name in ("num_train_epochs", "total_epochs", "epochs")
    ),
    row("learning_rate", "optim.lr", "the policy's peak learning rate"),
    row("lr", "optim.lr", "the policy's peak learning rate"),
    row("actor_lr", "optim.lr", "the policy's peak learning rate"),
    row("critic_lr", "critic.lr", "the critic's learning rate"),
    row("critic_learning_rate", "critic.lr", "the critic's learning rate"),
    row(
        "lr_scheduler_type",
        "optim.schedule",
        "cosine, linear or constant (with warmup_ratio)",
        _choice("optim.schedule", _SCHEDULES, "lr_scheduler_type"),
    ),
    row(
        "warmup_steps",
        "optim.warmup_ratio",
        "ascent warms up over a fraction of steps",
        _warmup_steps,
    ),
    row("adam_beta1", "optim.betas", "Adam's (beta1, beta2)", _betas),
    row("adam_beta2", "optim.betas", "Adam's (beta1, beta2)", _betas),
    row("adam_epsilon", "optim.eps", "Adam's epsilon"),
    row(
        "optim",
        "optim.name",
        "ascent's optimiser is AdamW",
        _choice("optim.name", {"adamw_torch": "adamw", "adamw": "adamw"}, "optim"),
        within="-",
    ),
    # -- checkpoints, evaluation, logging -----------------------------------------------------
    row("save_interval", "train.save_steps", "checkpoint every N steps"),
    row("save_total_limit", "train.keep_last", "checkpoints kept besides the best"),
    row("eval_interval", "train.eval_steps", "evaluate every N steps"),
    row(
        "eval_strategy",
        "train.eval_steps",
        'ascent evaluates every eval_steps; "no" is eval_steps = 0',
        _choice("train.eval_steps", {"no": 0, "steps": None}, "eval_strategy"),
    ),
    row("save_strategy", "", "ascent checkpoints every [train] save_steps"),
    *(
        row(name, "logging.log_every", "write metrics every N steps", kinds=_BOTH)
        for name in ("logging_steps", "log_interval", "log_freq")
    ),
    row(
        "report_to",
        "logging.trackers",
        "tensorboard, wandb, swanlab (none: [])",
        _trackers,
        kinds=_BOTH,
    ),
    row("run_name", "run.name", "the run's name (and directory)", kinds=_BOTH),
    row(
        "output_dir",
        "run.output_dir run.name",
        "TRL's output_dir is the run directory: ascent's output_dir/name",
        _run_dir,
        within="- training trainer",
        weak="run.name",
    ),
    row(
        "checkpoint_dir",
        "",
        "checkpoints go to [run] output_dir/<name>/checkpoints",
        kinds=_BOTH,
    ),
    row(
        "log_dir",
        "run.output_dir",
        "a run's logs and checkpoints go to output_dir/<run name>",
        kinds=_BOTH,
    ),
    row("project", "logging.project", "the wandb / swanlab project", within="-", kinds=_BOTH),
    # -- model --------------------------------------------------------------------------------
    *(
        row(name, "model.name_or_path", "the policy's hub id (owner/name) or directory")
        for name in ("model_name_or_path", "base_model", "model_name", "model_path")
    ),
    row(
        "name",
        "model.name_or_path",
        "the policy's hub id (owner/name) or directory",
        within="model",
    ),
    row(
        "path",
        "model.name_or_path",
        "the policy's hub id (owner/name) or directory",
        within="model",
    ),
    *(
        row(name, "model.dtype", "bfloat16, float32 or auto", _choice("model.dtype", _DTYPES, name))
        for name in ("torch_dtype", "dtype")
    ),
    row(
        "bf16",
        "model.dtype",
        'true is dtype = "bfloat16" (false leaves it auto)',
        _choice("model.dtype", {True: "bfloat16", False: None}, "bf16"),
    ),
    row(
        "fp16", "", "ascent refuses float16 compute (no loss scaling); use [model] dtype = bfloat16"
    ),
    row("attn_implementation", "", "ascent uses the model's default (SDPA) attention"),
    row("use_peft", "model.lora.enabled", "LoRA adapters"),
    row("lora_r", "model.lora.r", "LoRA rank"),
    row("lora_alpha", "model.lora.alpha", "LoRA alpha"),
    row("lora_dropout", "model.lora.dropout", "LoRA dropout"),
    row(
        "lora_target_modules", "model.lora.target_modules", "", _listed("model.lora.target_modules")
    ),
    # -- data and rewards ---------------------------------------------------------------------
    row("dataset_name", "data.path", "a hub id or a file"),
    row("dataset_train_split", "data.split", "the split trained on"),
    row("dataset_test_split", "data.eval_split", "the split evaluated on"),
    row("reward_weights", "", "set [reward] functions and weights together, one weight each"),
    row(
        "type",
        "",
        "ascent's math and code rewards are rule-based: [reward] functions",
        within="reward",
    ),
    row("compile_pass", "reward.code.compile_reward", "the code reward's compile tier"),
    row("sample_pass", "reward.code.sample_reward", "the code reward's sample-tests tier"),
    row("hidden_pass", "reward.code.pass_reward", "the code reward's all-tests tier"),
    row("correct_reward", "reward.code.pass_reward", "passing every test", within="reward.code"),
    row(
        "wrong_reward",
        "reward.code.compile_error_reward reward.code.compile_reward reward.code.sample_reward",
        "a binary code reward: every tier below passing gets it",
        within="reward.code",
    ),
    row(
        "test_timeout",
        "sandbox.time_limit_ms",
        "seconds become CPU milliseconds per run",
        _ms("sandbox.time_limit_ms"),
    ),
    # -- API, evaluation ------------------------------------------------------------------------
    *(
        row(name, "api.timeout_sec", "seconds per answer", within="api service", kinds=_BOTH)
        for name in ("timeout_seconds", "timeout")
    ),
    row("base_url_env", "api.base_url_env", "its variable", within="service", kinds=_BOTH),
    row("base_url", "api.base_url", "the API root", within="service", kinds=_BOTH),
    row("api_key_env", "api.api_key_env", "the key's variable", within="service", kinds=_BOTH),
    row(
        "model", "models.analyst_model", "the log assistant's model", within="service", kinds=_BOTH
    ),
    row("provider", "", "ascent needs only the URL and the key", within="service", kinds=_BOTH),
    row(
        "endpoints",
        "",
        "ascent requests base_url + /chat/completions and /models (a base_url without a "
        "version gets /v1 first: [api] append_v1)",
        within="service",
        kinds=_BOTH,
    ),
    row("rating_band", "eval.rating_bands", "a list of [low, high) bands", _bands),
    *(
        row(
            name,
            "",
            "ascent eval reads problems from [eval] problems (a JSONL file or "
            "ascent:code_contests_sample, ascent:humaneval, ascent:gsm8k_test)",
            within="eval",
        )
        for name in ("platform", "problem_set", "benchmark")
    ),
    # -- classic PPO ---------------------------------------------------------------------------
    row("name", "env.id", "the gymnasium id", within="env", kinds="classic"),
    row("env_id", "env.id", "the gymnasium id", kinds="classic"),
    row(
        "max_episode_steps",
        "",
        "the environment's registered limit applies (500 for CartPole-v1)",
        kinds="classic",
    ),
    row("n_envs", "env.num_envs", "environments stepped together", kinds="classic"),
    row("n_steps", "train.rollout_steps", "steps per env per rollout (SB3)", kinds="classic"),
    row("num_steps", "train.rollout_steps", "steps per env per rollout (CleanRL)", kinds="classic"),
    row("n_epochs", "train.update_epochs", "passes over each rollout (SB3)", kinds="classic"),
    row("clip_coef", "train.clip_range", "the PPO clip (CleanRL)", kinds="classic"),
    row("ent_coef", "train.entropy_coef", "the entropy bonus weight", kinds="classic"),
    row("vf_coef", "train.value_coef", "the value loss weight", kinds="classic"),
    row("norm_adv", "train.normalize_advantages", "", kinds="classic"),
    row("save_interval", "train.save_every", "checkpoint every N updates", kinds="classic"),
    row(
        "learning_rate",
        "optim.lr_actor optim.lr_critic",
        "one learning rate for both networks",
        kinds="classic",
    ),
    row("weight_decay", "", "classic PPO's Adam has no weight decay", kinds="classic"),
    row(
        "num_workers",
        "",
        "classic PPO steps its envs here ([env] vectorization = async: one process each)",
        kinds="classic",
    ),
    row("version", "", "a project's version is not a run setting", within="-", kinds="classic"),
    row("config", "", "the config is the file ascent reads", within="paths", kinds=_BOTH),
    row(
        "tensorboard",
        "",
        'TensorBoard logs go to the run directory with [logging] trackers = ["tensorboard"]',
        within="paths",
        kinds=_BOTH,
    ),
)

SECTIONS: dict[str, str] = {
    "grpo": "GRPO settings live in [rollout] (sampling), [algorithm] (clip, KL) and [agentic]",
    "vapo": "VAPO is [algorithm] advantage = length_adaptive_gae with [critic] and [sampling]",
    "ppo": "PPO settings live in [algorithm] and [train]",
    "dapo": "DAPO settings live in [algorithm] and [sampling]",
    "training": "training settings live in [train] (steps, batches) and [optim] (learning rate)",
    "trainer": "training settings live in [train] (steps, batches) and [optim] (learning rate)",
    "optimizer": "the optimiser is [optim]",
    "generation": "sampling settings are [rollout]'s",
    "service": "an API endpoint is [api] (base_url or base_url_env, api_key_env), its model "
    "[models]",
    "evaluation": "evaluation is [eval] and [train] eval_steps",
}
# Names too generic to move by name alone: written in a foreign section they are not guessed.
_NOT_BY_NAME = frozenset(
    "name enabled path format split mode role id r alpha dropout extra prompt answer urls "  # noqa: SIM905
    "servers model functions weights".split()
)


def root_model(kind: Kind) -> type[BaseModel]:
    """The config model of a kind of run (its fields are the top-level keys)."""
    from ascent.rules import ClassicConfig, LLMConfig

    return LLMConfig if kind == "llm" else ClassicConfig


@functools.cache
def sections(kind: Kind) -> dict[str, type[BaseModel]]:
    """Every `[section]` of a kind of run (dotted for sub-tables) -> its model, in file order."""
    root = root_model(kind)
    out: dict[str, type[BaseModel]] = {}

    def walk(prefix: str, model: type[BaseModel]) -> None:
        for name, field in model.model_fields.items():
            sub = field.annotation
            if isinstance(sub, type) and issubclass(sub, BaseModel):
                out[prefix + name] = sub
                walk(f"{prefix}{name}.", sub)

    walk("", root)
    return out


def keys_of(model: type[BaseModel]) -> set[str]:
    """The keys a section takes: field names and their aliases (`async`)."""
    return {n for n, f in model.model_fields.items()} | {
        f.alias for f in model.model_fields.values() if f.alias
    }


def is_key(dotted: str, kind: Kind) -> bool:
    section, _, key = dotted.rpartition(".")
    model = sections(kind).get(section)
    return model is not None and key in keys_of(model)


def find(key: str, section: str, kind: Kind) -> Alias | None:
    """The alias of `key` written in `section` ("" at the top level) of a `kind` run."""
    rows = [a for a in ALIASES if a.key == key and kind in a.kinds]
    return next((a for a in rows if section in a.within), None) or next(
        (a for a in rows if not a.within), None
    )


def home(key: str, kind: Kind, near: str = "") -> str | None:
    """Where a key spelled as ascent spells it lives, e.g. `group_size` -> `rollout.group_size`:
    the first section holding it under `near`, else in file order (sampling before eval)."""
    if key in _NOT_BY_NAME:
        return None
    found = [s for s, model in sections(kind).items() if key in keys_of(model)]
    inside = [s for s in found if near and s.startswith(near + ".")]
    where = (inside or found or [None])[0]
    return f"{where}.{key}" if where else None


def label(dotted: str) -> str:
    """`algorithm.clip_low` -> `[algorithm] clip_low`."""
    section, _, key = dotted.rpartition(".")
    return f"[{section}] {key}"


def labels(targets: Iterable[str]) -> str:
    """`[algorithm] clip_low and clip_high`: keys grouped under their section."""
    grouped: dict[str, list[str]] = {}
    for target in targets:
        section, _, key = target.rpartition(".")
        grouped.setdefault(section, []).append(key)
    return " and ".join(f"[{s}] {' and '.join(keys)}" for s, keys in grouped.items())


def resolve(key: str, section: str, kind: Kind) -> tuple[str, ...] | Alias | None:
    """Where an unknown key goes: an alias, the ascent key of the same name elsewhere, or None."""
    alias = find(key, section, kind)
    if alias is not None:
        return alias
    found = home(key, kind, near=section)
    return (found,) if found and found != f"{section}.{key}" else None


def section_note(name: str) -> str | None:
    """What ascent does with a section the write-ups have and ascent has not, or None."""
    return SECTIONS.get(name)

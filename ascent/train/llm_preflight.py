"""What an LLM run is refused for before any weight loads or any file is written.

`ascent train` builds the run directory (its config.toml) before the trainer loads models, so
the mistakes a user makes most often are checked first, each in one line that names the fix:
a model directory without a tokenizer, `[data] chat_template = "on"` for a tokenizer that has
none, and a run whose peak memory (estimated from config.json: `ascent.models.memory`) is more
than this machine has. `build_run` repeats the memory check for callers that do not come
through `run_training` (and for each stage of a staged run).
"""

from __future__ import annotations

import sys
from typing import Any

import torch
from transformers.tokenization_utils_base import PreTrainedTokenizerBase

from ascent.data import (
    Problem,
    PromptFormatter,
    TaskData,
    first_of_each_source,
    load_task,
    prompt_bytes,
    uses_chat_template,
)
from ascent.errors import AscentError, one_line
from ascent.models import load_tokenizer, resolve_dtype, resolve_model_path
from ascent.models.lean import LEAN_MODEL_TYPES
from ascent.models.loading import cpu_bf16_native
from ascent.models.memory import (
    MemoryEstimate,
    RunShape,
    available_mib,
    estimate_memory,
)
from ascent.rules import LLMConfig
from ascent.train.distributed import Dist
from ascent.train.forward import FUSED_HEAD_TYPES
from ascent.train.parts import algorithm_parts

PROMPTS_MEASURED = 256  # of each split: the longest of them stands for the longest prompt


def preflight(cfg: LLMConfig, dist: Dist) -> None:
    """Refuse (one line) a run that cannot start, before the run directory is created; warn
    about a compute dtype this CPU runs slowly."""
    bf16 = resolve_dtype(cfg.model.dtype, dist.device) == torch.bfloat16
    if dist.main and bf16 and dist.device.type == "cpu" and cpu_bf16_native() is False:
        print(
            'warning: [model] dtype = "bfloat16" on a CPU without native bf16 (no AMX or '
            "AVX512-BF16): its matrix products are emulated, slower than float32; set "
            '[model] dtype = "float32"',
            file=sys.stderr,
        )
    for stage in [c for _, c in cfg.stage_configs()] if cfg.stages else [cfg]:
        tokenizer = load_tokenizer(stage.model)
        chat = uses_chat_template(stage.data.chat_template, tokenizer)
        task = load_task(stage.data, stage.run.seed)
        check_prompts(stage, tokenizer, task, chat)
        check_memory(stage, dist, tokenizer, task, chat)


def measured_prompts(task: TaskData) -> list[Problem]:
    """The problems whose prompts stand for all: the first PROMPTS_MEASURED of each split and
    source."""
    return [
        *first_of_each_source(task.train, PROMPTS_MEASURED),
        *first_of_each_source(task.eval, PROMPTS_MEASURED),
    ]


def longest_prompt(task: TaskData, formatter: PromptFormatter) -> int:
    """Tokens of the longest prompt among the first PROMPTS_MEASURED of each split (of each
    source's), as the policy reads it (chat template included)."""
    problems: list[Problem] = measured_prompts(task)
    return max((len(ids) for ids in formatter.encode(problems)), default=1)


def run_shape(
    cfg: LLMConfig,
    dist: Dist,
    prompt_tokens: int,
    model_type: str = "",
    compute_dtype: torch.dtype | None = None,
) -> RunShape:
    """The settings of `cfg` the memory estimate reads, for one rank of `dist` (computing in
    `compute_dtype`; None: what [model] dtype resolves to on dist's device)."""
    parts = algorithm_parts(cfg)
    # response_logprobs' fused head: Llama-family models, unsharded, entropy not in the loss
    fused = model_type in FUSED_HEAD_TYPES and not dist.distributed and not parts.entropy_coef
    model, rollout = cfg.model, cfg.rollout
    local_engine = rollout.engine == "transformers" and not (
        cfg.cluster.backend == "ray" and cfg.cluster.rollout_replicas
    )
    return RunShape(
        micro_batch_size=cfg.train.micro_batch_size,
        rollout_rows=max(1, cfg.train.batch_size // dist.world_size),
        prompt_tokens=prompt_tokens,
        max_new_tokens=rollout.max_new_tokens,
        compute_bytes=(compute_dtype or resolve_dtype(model.dtype, dist.device)).itemsize,
        gradient_checkpointing=model.gradient_checkpointing,
        lora_rank=model.lora.r if model.lora.enabled else 0,
        lora_targets=tuple(model.lora.target_modules),
        reference=parts.kl is not None and not (model.lora.enabled and model.ref_model is None),
        critic=parts.needs_values and cfg.critic.architecture == "separate",
        engine_copies=(2 if rollout.async_ else 1) if local_engine else 0,
        overlap=rollout.async_,
        world_size=dist.world_size,
        max_micro_tokens=cfg.train.max_tokens_per_micro_batch,
        fused_head=fused,
        lean_layers=model_type in LEAN_MODEL_TYPES,
        # train/forward.py runs a group's prompt once (not on sharded ranks or when
        # checkpointing recomputes layers)
        shared_prefix_group=rollout.group_size
        if not dist.distributed and not model.gradient_checkpointing
        else 1,
    )


def model_config(cfg: LLMConfig) -> Any | None:
    """The policy's transformers config, read from disk only (no download); None when it is
    not there (a hub id not cached yet: the loader will fetch or refuse it)."""
    from transformers import AutoConfig

    try:
        return AutoConfig.from_pretrained(
            resolve_model_path(cfg.model.name_or_path),
            local_files_only=True,
            trust_remote_code=cfg.model.trust_remote_code,
        )
    except (OSError, ValueError):
        return None


def check_memory(
    cfg: LLMConfig,
    dist: Dist,
    tokenizer: PreTrainedTokenizerBase,
    task: TaskData,
    chat: bool,
) -> MemoryEstimate | None:
    """Refuse a run whose estimated peak memory exceeds what this machine has; return the
    estimate (None when it cannot be made: an agentic run, whose rows grow with the episode,
    or a model whose config is not on disk yet)."""
    if cfg.agentic.enabled:
        return None
    config = model_config(cfg)
    if config is None:
        return None
    formatter = PromptFormatter(cfg.data.prompt_template, tokenizer, chat)
    shape = run_shape(cfg, dist, longest_prompt(task, formatter), config.model_type)
    estimate = estimate_memory(config, shape)
    available = available_mib(dist.device)
    # ranks on one CPU share its memory; on GPUs each rank has its own device
    sharing = dist.world_size if dist.device.type == "cpu" else 1
    need = estimate.total * sharing
    if available is not None and need > available:
        raise AscentError(refusal(cfg, estimate, need, available, dist.device, sharing))
    return estimate


def check_prompts(
    cfg: LLMConfig, tokenizer: PreTrainedTokenizerBase, task: TaskData, chat: bool
) -> None:
    """`check_prompt_lengths` against the policy's context (when its config.json is on disk;
    agentic runs build their prompts turn by turn and are checked as they play)."""
    config = None if cfg.agentic.enabled else model_config(cfg)
    if config is not None:
        formatter = PromptFormatter(cfg.data.prompt_template, tokenizer, chat)
        check_prompt_lengths(cfg, config, tokenizer, formatter, task)


def check_prompt_lengths(
    cfg: LLMConfig,
    config: Any,
    tokenizer: PreTrainedTokenizerBase,
    formatter: PromptFormatter,
    task: TaskData,
) -> None:
    """Refuse (one line, with a count) data whose prompts cannot fit the model's context
    beside max_new_tokens: such a prompt would otherwise be found mid-run, by a KV cache or
    an attention matrix sized for it (a 5 MB line asked for 53 GB). Only prompts long enough
    to be in doubt are tokenized; one longer than the context times the longest token in the
    vocabulary cannot fit whatever it holds and is not tokenized at all (a tokenizer can abort
    on a 50 MB string)."""
    context = getattr(config, "max_position_embeddings", None)
    if not isinstance(context, int) or context <= 0:
        return
    limit = context - cfg.rollout.max_new_tokens
    if limit <= 0:
        raise AscentError(
            f"[rollout] max_new_tokens: {cfg.rollout.max_new_tokens:,} leaves no room for a "
            f"prompt in the model's context ({context:,} tokens); set it below that"
        )
    widest = max((len(token) for token in tokenizer.get_vocab()), default=1) + 1
    problems = [*task.train, *task.eval]
    over: list[tuple[int, Problem]] = []  # (tokens, or a lower bound), problem
    for problem in problems:
        size = prompt_bytes(problem)  # a verifiers problem's system prompt counts too
        if size <= limit // 2:
            continue  # fits, template and all
        if size > limit * widest:
            over.append((size // widest, problem))
            continue
        tokens = len(formatter.encode([problem])[0])
        if tokens > limit:
            over.append((tokens, problem))
    if over:
        tokens, worst = max(over, key=lambda item: item[0])
        raise AscentError(
            f"[data] {len(over):,} of {len(problems):,} prompts are longer than the model's "
            f"context allows: {context:,} tokens less [rollout] max_new_tokens "
            f"({cfg.rollout.max_new_tokens:,}) leaves {limit:,}, and the longest ('"
            f"{one_line(worst.key)[:40]}') has {tokens:,} or more; shorten or drop them, or "
            "use a model with a longer context"
        )


def refusal(
    cfg: LLMConfig,
    estimate: MemoryEstimate,
    need: float,
    available: float,
    device: torch.device,
    ranks: int,
) -> str:
    """The one-line refusal: the estimate by part, what is available, and the settings that
    shrink the largest part."""
    per_rank = f" ({ranks} ranks x {estimate.total:,.0f})" if ranks > 1 else ""
    where = (
        f"{device} has {available:,.0f} MiB"
        if device.type == "cuda"
        else f"this machine has {available:,.0f} MiB available"
    )
    update = estimate.activations + estimate.logits
    if estimate.kv_cache > update and not estimate.overlap:
        fixes = ["lower [train] batch_size or [rollout] max_new_tokens"]
    else:
        fixes = ["lower [train] micro_batch_size or [rollout] max_new_tokens"]
        if not cfg.model.gradient_checkpointing:
            fixes.append("enable [model] gradient_checkpointing")
    if estimate.trained_state > update and not cfg.model.lora.enabled:
        fixes.append("train LoRA adapters ([model.lora] enabled)")
    return (
        f"the run needs about {need:,.0f} MiB{per_rank} ({estimate.breakdown()}) but {where}; "
        + ", or ".join(fixes)
        + " (`ascent plan CONFIG` shows the same estimate on other devices)"
    )

"""Policy, reference model and tokenizer from `[model]`: any Hugging Face causal LM.

`name_or_path` is a local directory, a hub id (where the hub is reachable) or a built-in
name (`ascent:tiny`, `ascent:tiny-arithmetic`), which resolves to a save_pretrained
directory and is then loaded by the same `from_pretrained` calls as any other model.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel
from transformers.tokenization_utils_base import PreTrainedTokenizerBase

from ascent.config.llm import CriticSection, LoraSection, ModelSection
from ascent.errors import AscentError, UnknownNameError, did_you_mean
from ascent.models.tiny import BUILTIN_MODELS, BUILTIN_PREFIX
from ascent.models.value import ValueModel, separate_critic, value_head

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def resolve_model_path(name_or_path: str) -> str:
    """A built-in name -> its directory; anything else is returned unchanged."""
    if not name_or_path.startswith(BUILTIN_PREFIX):
        return name_or_path
    if name_or_path not in BUILTIN_MODELS:
        valid = ", ".join(sorted(BUILTIN_MODELS))
        hint = did_you_mean(name_or_path, BUILTIN_MODELS)
        raise UnknownNameError(f"unknown built-in model '{name_or_path}'{hint}; valid: {valid}")
    path = BUILTIN_MODELS[name_or_path]()
    if not (path / "config.json").is_file():
        raise AscentError(
            f"built-in model {name_or_path} is missing from {path}; reinstall ascent "
            "(or run scripts/make_warm_start.py to rebuild it)"
        )
    return str(path)


def resolve_dtype(name: str, device: torch.device) -> torch.dtype:
    """`auto` is bfloat16 on a GPU that supports it, else float32 (CPU bf16 loses PPO ratios)."""
    if name != "auto":
        return _DTYPES[name]
    if device.type == "cuda" and torch.cuda.is_bf16_supported():
        return torch.bfloat16
    return torch.float32


def load_tokenizer(cfg: ModelSection) -> PreTrainedTokenizerBase:
    """The tokenizer, left-padding (prompts end where generation starts), with a pad token."""
    source = resolve_model_path(cfg.tokenizer or cfg.name_or_path)
    try:
        tokenizer = AutoTokenizer.from_pretrained(source, trust_remote_code=cfg.trust_remote_code)
    except (OSError, ValueError) as err:
        raise AscentError(_load_hint("tokenizer", source, err)) from None
    if tokenizer.eos_token_id is None:
        raise AscentError(
            f"tokenizer of {source} defines no eos_token, so completions could never end; "
            "choose a tokenizer with one or set [model] tokenizer"
        )
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side = "left"
    return tokenizer


def _from_pretrained(source: str, cfg: ModelSection, device: torch.device) -> PreTrainedModel:
    try:
        model = AutoModelForCausalLM.from_pretrained(
            source, dtype=resolve_dtype(cfg.dtype, device), trust_remote_code=cfg.trust_remote_code
        )
    except (OSError, ValueError) as err:
        raise AscentError(_load_hint("model", source, err)) from None
    return model.to(device)


def _load_hint(what: str, source: str, err: Exception) -> str:
    first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
    where = "no such local directory" if not Path(source).exists() else "the directory is there"
    return (
        f"could not load {what} from '{source}' ({where}): {first}; pass a local "
        "save_pretrained directory, a reachable hub id, or a built-in name such as ascent:tiny"
    )


def load_policy(cfg: ModelSection, device: torch.device) -> PreTrainedModel:
    """The policy to train: weights from `name_or_path`, in train mode, with optional LoRA."""
    model = _from_pretrained(resolve_model_path(cfg.name_or_path), cfg, device)
    if cfg.gradient_checkpointing:
        model.gradient_checkpointing_enable()
    if cfg.lora.enabled:
        model = _add_lora(model, cfg.lora)
    model.train()
    return model


def load_reference(cfg: ModelSection, device: torch.device) -> PreTrainedModel:
    """The frozen reference policy for KL: `ref_model`, or the initial policy's weights.

    It is loaded from disk rather than copied from the policy, so that a resumed run still
    measures KL against the policy the run started from, not against its checkpoint.
    """
    source = resolve_model_path(cfg.ref_model or cfg.name_or_path)
    model = _from_pretrained(source, cfg, device)
    model.eval()
    model.requires_grad_(False)
    return model


def load_critic(
    cfg: CriticSection, model_cfg: ModelSection, policy: nn.Module, device: torch.device
) -> ValueModel:
    """The value model `[critic]` asks for: a head on `policy`'s trunk, or a separate critic
    loaded from `[critic] name_or_path` (unset: the policy's initial weights)."""
    if cfg.architecture == "head":
        return value_head(policy)
    source = resolve_model_path(cfg.name_or_path or model_cfg.name_or_path)
    critic = separate_critic(_from_pretrained(source, model_cfg, device))
    if model_cfg.gradient_checkpointing:
        critic.trunk.gradient_checkpointing_enable()
    return critic


def _add_lora(model: PreTrainedModel, lora: LoraSection) -> PreTrainedModel:
    try:
        from peft import LoraConfig, get_peft_model
    except ImportError:
        raise AscentError(
            "[model.lora] enabled = true needs peft; install it with pip install 'ascent[lora]'"
        ) from None
    config = LoraConfig(
        r=lora.r,
        lora_alpha=lora.alpha,
        lora_dropout=lora.dropout,
        target_modules=list(lora.target_modules),
        task_type="CAUSAL_LM",
    )
    return get_peft_model(model, config)

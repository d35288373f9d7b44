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

from ascent.config.llm_sections import CriticSection, LoraSection, ModelSection
from ascent.errors import AscentError, UnknownNameError, did_you_mean
from ascent.hub_ids import hub_id_hint
from ascent.models.builtin import BUILTIN_MODELS, BUILTIN_PREFIX
from ascent.models.lean import lean_activations
from ascent.models.value import ValueModel, separate_critic, value_head
from ascent.models.weight_files import check_weight_files

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def resolve_model_path(name_or_path: str) -> str:
    """A built-in name -> its directory; anything else is returned unchanged, except a loose
    name that is neither a directory nor a hub id and that `hub_id_hint` can place
    (`qwen-32b`): refused at once with the id it means, before any download is tried."""
    if not name_or_path.startswith(BUILTIN_PREFIX):
        hint = None if Path(name_or_path).exists() else hub_id_hint(name_or_path)
        if hint is not None:
            raise AscentError(
                f"model '{name_or_path}' is neither a local directory nor a hub id (owner/name); "
                f"did you mean '{hint}'?"
            )
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
    """The compute dtype: `auto` is bfloat16 on a GPU that supports it, else float32 (CPU
    bf16 loses PPO ratios). Trained parameters stay float32 whatever this is."""
    if name != "auto":
        return _DTYPES[name]
    if device.type == "cuda" and torch.cuda.is_bf16_supported():
        return torch.bfloat16
    return torch.float32


# Files a save_pretrained tokenizer is read from; a directory with none of them has none.
TOKENIZER_FILES = (
    "tokenizer_config.json",
    "tokenizer.json",
    "tokenizer.model",
    "vocab.json",
    "vocab.txt",
)


def has_tokenizer_files(directory: Path) -> bool:
    return any((directory / name).is_file() for name in TOKENIZER_FILES)


def cpu_bf16_native() -> bool | None:
    """Whether this CPU multiplies bf16 matrices in hardware (AMX or AVX512-BF16: there bf16
    products ran 4-7x faster than float32, measured on a Sapphire Rapids core), from
    /proc/cpuinfo; None where that file is not there (not Linux)."""
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as info:
            flags = next((line for line in info if line.startswith("flags")), "").split()
    except OSError:
        return None
    return "amx_bf16" in flags or "avx512_bf16" in flags


def load_tokenizer(cfg: ModelSection) -> PreTrainedTokenizerBase:
    """The tokenizer, left-padding (prompts end where generation starts), with a pad token."""
    source = resolve_model_path(cfg.tokenizer or cfg.name_or_path)
    if Path(source).is_dir() and not has_tokenizer_files(Path(source)):
        # transformers would fail on it with a message about converting slow tokenizers
        raise AscentError(
            f"{source} has no tokenizer (none of {', '.join(TOKENIZER_FILES)}); set [model] "
            "tokenizer to a directory or hub id that has one, or add the tokenizer files to "
            "the directory"
        )
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


def _from_pretrained(
    source: str, cfg: ModelSection, device: torch.device, dtype: torch.dtype
) -> PreTrainedModel:
    if Path(source).is_dir():
        check_weight_files(Path(source))  # damaged or pickled weights: one line, not a trace
    try:
        model = AutoModelForCausalLM.from_pretrained(
            source, dtype=dtype, trust_remote_code=cfg.trust_remote_code
        )
    except (OSError, ValueError) as err:
        raise AscentError(_load_hint("model", source, err)) from None
    disable_dropout(model)
    return model.to(device)


DROPOUT_SETTINGS = (
    "attention_dropout",
    "hidden_dropout",
    "resid_pdrop",
    "embd_pdrop",
    "attn_pdrop",
    "dropout",
    "activation_dropout",
    "classifier_dropout",
)


def disable_dropout(model: nn.Module) -> None:
    """No dropout anywhere in RL: sampling runs in eval mode, so a training forward with
    dropout would give other log-probs for the same tokens (the PPO ratio would not be 1
    where it must be). Covers dropout modules (LoRA's included) and the attention dropout
    transformers reads from the config."""
    for module in model.modules():
        if isinstance(module, nn.Dropout):
            module.p = 0.0
    config = getattr(model, "config", None)
    for key in DROPOUT_SETTINGS:
        if isinstance(getattr(config, key, None), float):
            setattr(config, key, 0.0)


def _load_hint(what: str, source: str, err: Exception) -> str:
    first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
    where = "no such local directory" if not Path(source).exists() else "the directory is there"
    return (
        f"could not load {what} from '{source}' ({where}): {first}; pass a local "
        "save_pretrained directory, a reachable hub id, or a built-in name such as ascent:tiny"
    )


def load_policy(cfg: ModelSection, device: torch.device, seed: int = 0) -> PreTrainedModel:
    """The policy to train: float32 weights from `name_or_path` (the master copy; the forward
    runs in the compute dtype), in train mode without dropout, with optional LoRA (its
    adapters drawn from `seed`); a Llama block's MLP and norms keep less for the backward
    (lean.py)."""
    model = _from_pretrained(resolve_model_path(cfg.name_or_path), cfg, device, torch.float32)
    lean_activations(model)
    if cfg.gradient_checkpointing:
        model.gradient_checkpointing_enable()
    if cfg.lora.enabled:
        model = add_lora(model, cfg.lora, seed)
    model.train()
    return model


def load_reference(
    cfg: ModelSection, device: torch.device, dtype: torch.dtype | None = None
) -> PreTrainedModel:
    """The frozen reference policy for KL: `ref_model`, or the initial policy's weights, in
    `dtype` (default: the compute dtype; it never trains).

    It is loaded from disk rather than copied from the policy, so that a resumed run still
    measures KL against the policy the run started from, not against its checkpoint.
    """
    return load_frozen(cfg.ref_model or cfg.name_or_path, cfg, device, dtype)


def load_frozen(
    name_or_path: str, cfg: ModelSection, device: torch.device, dtype: torch.dtype | None = None
) -> PreTrainedModel:
    """A plain causal LM (no LoRA) that never trains, in eval mode: a reference, an engine's
    own copy of the policy, or the shell `final-model/` is written from."""
    source = resolve_model_path(name_or_path)
    model = _from_pretrained(source, cfg, device, dtype or resolve_dtype(cfg.dtype, device))
    model.eval()
    model.requires_grad_(False)
    return model


def load_critic(
    cfg: CriticSection, model_cfg: ModelSection, policy: nn.Module | None, device: torch.device
) -> ValueModel:
    """The value model `[critic]` asks for: a head on `policy`'s trunk, or a separate critic
    with float32 weights loaded from `[critic] name_or_path` (unset: the policy's initial
    weights)."""
    if cfg.architecture == "head":
        assert policy is not None
        return value_head(policy)
    source = resolve_model_path(cfg.name_or_path or model_cfg.name_or_path)
    critic = separate_critic(_from_pretrained(source, model_cfg, device, torch.float32))
    lean_activations(critic)
    if model_cfg.gradient_checkpointing:
        critic.trunk.gradient_checkpointing_enable()
    return critic


def add_lora(model: PreTrainedModel, lora: LoraSection, seed: int = 0) -> PreTrainedModel:
    """`model` wrapped in fresh LoRA adapters as `[model.lora]` says (dropout off: RL needs
    the sampler's log-probs).

    The adapters' random start is drawn from `seed` alone, whatever the process drew before:
    ranks that shard one policy must start from the same adapters (each keeps its shard of
    its own draw), and a run must not depend on what loading consumed."""
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
    device = next(model.parameters()).device
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
        torch.manual_seed(seed)
        wrapped = get_peft_model(model, config)
    disable_dropout(wrapped)
    return wrapped

"""The built-in tiny model: a standard Llama architecture small enough to train on a laptop CPU.

`ascent:tiny` is built here from a config in code (seeded, so every machine gets the same
weights), written with `save_pretrained` to a cache directory, and from then on loaded with
`AutoModelForCausalLM` / `AutoTokenizer.from_pretrained` exactly like a downloaded model.
`ascent:tiny-arithmetic` is the same architecture after a short supervised warm-up on the
built-in arithmetic task (shipped in `ascent/assets/`, made by `scripts/make_warm_start.py`).
"""

from __future__ import annotations

import os
import shutil
from importlib import resources
from pathlib import Path

import torch
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast
from transformers.utils import logging as hf_logging

from ascent.models.tokenizer import build_char_tokenizer

TINY = "ascent:tiny"
TINY_ARITHMETIC = "ascent:tiny-arithmetic"
TINY_VERSION = 1  # bump when the architecture or the init changes, so old caches are not reused
TINY_SEED = 0


def tiny_config(tokenizer: PreTrainedTokenizerFast) -> LlamaConfig:
    """About 1.06 M parameters: 4 layers, width 128, 4 heads, MLP 512, tied embeddings."""
    return LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=128,
        intermediate_size=512,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=4,
        max_position_embeddings=256,
        tie_word_embeddings=True,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=None,
    )


def build_tiny_model(seed: int = TINY_SEED) -> tuple[LlamaForCausalLM, PreTrainedTokenizerFast]:
    """A freshly initialised tiny model and its character tokenizer (global RNG untouched)."""
    tokenizer = build_char_tokenizer()
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = LlamaForCausalLM(tiny_config(tokenizer))
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    return model, tokenizer


def cache_dir() -> Path:
    """Where built-in models are written: $ASCENT_CACHE, else ~/.cache/ascent."""
    root = os.environ.get("ASCENT_CACHE") or Path.home() / ".cache" / "ascent"
    return Path(root)


def ensure_tiny(directory: Path | None = None) -> Path:
    """The save_pretrained directory of `ascent:tiny`, created on first use.

    Written to a temporary sibling and renamed into place, so two processes starting at once
    (parallel tests) never see a half-written model.
    """
    target = directory or cache_dir() / "models" / f"tiny-v{TINY_VERSION}"
    if (target / "config.json").is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    model, tokenizer = build_tiny_model()
    # transformers draws a progress bar for each save; for a 4 MB model it is only noise on
    # stderr, in front of whatever the command prints (a one-line refusal included)
    bars = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
    finally:
        if bars:
            hf_logging.enable_progress_bar()
    try:
        os.replace(tmp, target)
    except OSError:  # another process won the race; its copy is identical
        shutil.rmtree(tmp, ignore_errors=True)
    return target


def asset_dir(name: str) -> Path:
    """A model directory shipped inside the package (`ascent/assets/<name>`)."""
    return Path(str(resources.files("ascent").joinpath("assets", name)))

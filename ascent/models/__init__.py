"""Models: the policy, reference and critic from any Hugging Face causal LM, and the built-in
tiny model."""

from ascent.models.loading import (
    add_lora,
    load_critic,
    load_frozen,
    load_policy,
    load_reference,
    load_tokenizer,
    resolve_dtype,
    resolve_model_path,
)
from ascent.models.tiny import TINY, TINY_ARITHMETIC, build_tiny_model, ensure_tiny
from ascent.models.tokenizer import build_char_tokenizer
from ascent.models.value import ValueModel, separate_critic, trunk_of, value_head

__all__ = [
    "TINY",
    "TINY_ARITHMETIC",
    "ValueModel",
    "add_lora",
    "build_char_tokenizer",
    "build_tiny_model",
    "ensure_tiny",
    "load_critic",
    "load_frozen",
    "load_policy",
    "load_reference",
    "load_tokenizer",
    "resolve_dtype",
    "resolve_model_path",
    "separate_critic",
    "trunk_of",
    "value_head",
]

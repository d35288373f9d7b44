"""Typed configuration: one pydantic model per TOML section; the only place defaults live."""

from ascent.config.base import Section
from ascent.config.classic import ClassicConfig
from ascent.config.llm import LLMConfig
from ascent.config.loader import BUILTIN_SOURCE, AnyConfig, dump_config, load_config

__all__ = [
    "BUILTIN_SOURCE",
    "AnyConfig",
    "ClassicConfig",
    "LLMConfig",
    "Section",
    "dump_config",
    "load_config",
]

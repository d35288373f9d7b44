"""Typed configuration: one pydantic model per TOML section; the only place defaults live.

Reading a file into these types (TOML or YAML, old names, settings.json, `config migrate`) is
ascent.configfile's job, one layer up.
"""

from ascent.config.base import Section
from ascent.config.classic import ClassicConfig
from ascent.config.llm import LLMConfig

__all__ = ["ClassicConfig", "LLMConfig", "Section"]

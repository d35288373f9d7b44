"""Typed configuration: one pydantic model per TOML section and its field-level checks; the
only place defaults live.

The root models that combine the sections with the rules between them (`LLMConfig`,
`ClassicConfig`) are ascent.rules', one layer up; reading a file into them (TOML or YAML, old
names, settings.json, `config migrate`) is ascent.configfile's, the layer above that.
"""

from ascent.config.base import Section

__all__ = ["Section"]

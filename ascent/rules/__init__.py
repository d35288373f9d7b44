"""The root configs of a run: the typed sections of ascent.config combined, with the rules
between them (what the trainers and engines can honour together). A config that breaks one
fails at load time with one line naming the key and the fix.
"""

from ascent.rules.classic import ClassicConfig
from ascent.rules.llm import LLMConfig

__all__ = ["ClassicConfig", "LLMConfig"]

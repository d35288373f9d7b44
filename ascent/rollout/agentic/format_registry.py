"""The agentic task formats by name (`[agentic] format`): code, and arithmetic posed as
code. A module of its own so that the formats themselves need not know each other."""

from __future__ import annotations

from ascent.registry import Registry
from ascent.rollout.agentic.arithmetic import ArithmeticFormat
from ascent.rollout.agentic.formats import CodeFormat

FORMATS: Registry[CodeFormat] = Registry("agentic task format")
FORMATS.register("code")(CodeFormat())
FORMATS.register("arithmetic")(ArithmeticFormat())

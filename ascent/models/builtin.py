"""Built-in model names (`ascent:...`), each resolving to a save_pretrained directory that is
then loaded by the same `from_pretrained` calls as any other model.

    ascent:tiny              1.06 M-parameter Llama built in code (tiny.py)
    ascent:tiny-arithmetic   the same after a supervised warm-up, shipped in ascent/assets/
    ascent:smollm2-135m      SmolLM2-135M-Instruct, converted from a PyPI package (smollm2.py)
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from ascent.models.smollm2 import SMOLLM2, ensure_smollm2
from ascent.models.tiny import TINY, TINY_ARITHMETIC, asset_dir, cache_dir, ensure_tiny

BUILTIN_PREFIX = "ascent:"

BUILTIN_MODELS: dict[str, Callable[[], Path]] = {
    TINY: lambda: ensure_tiny(),
    TINY_ARITHMETIC: lambda: asset_dir("tiny-arithmetic"),
    SMOLLM2: lambda: ensure_smollm2(cache_dir()),
}

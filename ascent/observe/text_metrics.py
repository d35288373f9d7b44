"""What the completions say, as the SRPO write-up watches it: reflection words ("wait",
"let me verify", ...) and code blocks, per step and on evaluation samples.

    reflection/rate   fraction of completions with at least one reflection word
    reflection/per_completion   reflection words per completion, on average
    code_block/rate   fraction of completions containing a fenced code block (```)
"""

from __future__ import annotations

import re
from collections.abc import Sequence

FENCE = re.compile(r"```")


def reflection_pattern(words: Sequence[str]) -> re.Pattern[str] | None:
    """One case-insensitive pattern matching any of `words` as whole words."""
    cleaned = [w.strip() for w in words if w.strip()]
    if not cleaned:
        return None
    alternatives = "|".join(re.escape(w).replace(r"\ ", r"\s+") for w in cleaned)
    return re.compile(rf"(?<!\w)(?:{alternatives})(?!\w)", re.IGNORECASE)


def text_metrics(completions: Sequence[str], pattern: re.Pattern[str] | None) -> dict[str, float]:
    """The rates above over `completions` (empty when there are none)."""
    if not completions:
        return {}
    n = len(completions)
    metrics = {"code_block/rate": sum(bool(FENCE.search(c)) for c in completions) / n}
    if pattern is not None:
        counts = [len(pattern.findall(c)) for c in completions]
        metrics["reflection/rate"] = sum(c > 0 for c in counts) / n
        metrics["reflection/per_completion"] = sum(counts) / n
    return metrics

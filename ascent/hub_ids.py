"""Hub ids of the models the write-ups and recipes name, for a did-you-mean.

Write-ups name models loosely (`qwen-32b`, `Qwen2.5-32B-Instruct`, `deepseek-r1-7b`); the hub
wants `owner/name`. `hub_id_hint` turns such a name into the id it most likely means: the same
name under its owner, else the first listed model of the same family and size (the list is in
order of preference: the instruct model a recipe would start from). A name it cannot place
gets no hint: a guess that is wrong is worse than none.
"""

from __future__ import annotations

import re

_SIZES = {
    "Qwen/Qwen2.5-{}-Instruct": ("0.5B", "1.5B", "3B", "7B", "14B", "32B", "72B"),
    "Qwen/Qwen2.5-Math-{}-Instruct": ("1.5B", "7B", "72B"),
    "Qwen/Qwen2.5-Coder-{}-Instruct": ("0.5B", "1.5B", "3B", "7B", "14B", "32B"),
    "Qwen/Qwen3-{}": ("0.6B", "1.7B", "4B", "8B", "14B", "32B"),
    "deepseek-ai/DeepSeek-R1-Distill-Qwen-{}": ("1.5B", "7B", "14B", "32B"),
    "deepseek-ai/DeepSeek-R1-Distill-Llama-{}": ("8B", "70B"),
    "meta-llama/Llama-3.2-{}-Instruct": ("1B", "3B"),
    "meta-llama/Llama-3.1-{}-Instruct": ("8B", "70B"),
    "HuggingFaceTB/SmolLM2-{}-Instruct": ("135M", "360M", "1.7B"),
    "google/gemma-2-{}-it": ("2b", "9b", "27b"),
}
KNOWN_HUB_IDS: tuple[str, ...] = (
    *(pattern.format(size) for pattern, sizes in _SIZES.items() for size in sizes),
    "Qwen/QwQ-32B",
    "meta-llama/Llama-3.3-70B-Instruct",
    "deepseek-ai/deepseek-math-7b-instruct",
    "mistralai/Mistral-7B-Instruct-v0.3",
    "microsoft/Phi-3-mini-4k-instruct",
)
FAMILIES = ("qwq", "qwen", "llama", "deepseek", "mistral", "smollm", "gemma", "phi")
_SIZE = re.compile(r"(?<![a-z0-9.])(\d+(?:\.\d+)?)([bm])(?![a-z])")


def _family(name: str) -> str | None:
    low = name.lower()
    found = [(low.find(f), f) for f in FAMILIES if f in low]
    return min(found)[1] if found else None


def _size(name: str) -> str | None:
    found = _SIZE.findall(name.lower().replace("_", "-"))
    return "".join(found[-1]) if found else None


def is_hub_id(name: str) -> bool:
    """`owner/name`: the shape of a model id on the hub."""
    return re.fullmatch(r"[A-Za-z0-9][\w.\-]*/[\w.\-]+", name) is not None


def hub_id_hint(name: str) -> str | None:
    """The hub id `name` most likely means, or None when it is one already or cannot be
    placed: `Qwen2.5-32B-Instruct` and `qwen-32b` -> `Qwen/Qwen2.5-32B-Instruct`."""
    if is_hub_id(name) or not name.strip():
        return None
    bare = name.strip().lower()
    for hub_id in KNOWN_HUB_IDS:
        if hub_id.partition("/")[2].lower() == bare:
            return hub_id
    family, size = _family(bare), _size(bare)
    if family is None or size is None:
        return None
    same = [h for h in KNOWN_HUB_IDS if _family(h.partition("/")[2]) == family and _size(h) == size]
    words = _words(bare)
    # the most words in common (math, coder, r1...), then the order of preference
    return max(same, key=lambda h: len(words & _words(h)), default=None)


def _words(name: str) -> set[str]:
    return {w for w in re.split(r"[-_./\s]+", name.lower().partition("/")[2] or name.lower()) if w}

"""A custom reward that fails on rank 1 only, for tests/train/test_distributed.py."""

from __future__ import annotations

import os


def fails_on_rank_1(prompts, completions, **columns):
    if os.environ.get("RANK") == "1":
        raise RuntimeError("the reward failed on rank 1")
    return [0.0] * len(completions)

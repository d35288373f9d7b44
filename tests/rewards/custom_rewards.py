"""Custom reward functions the tests name by import path (tests.rewards.custom_rewards:NAME)."""

from __future__ import annotations


def length_reward(prompts, completions, **columns):
    """0.1 per character: a TRL-style function with no idea of ascent."""
    return [0.1 * len(c) for c in completions]


def first_only(prompts, completions, **columns):
    """Applies to the first sample only (None elsewhere)."""
    return [1.0] + [None] * (len(completions) - 1)


def first_only_negative(prompts, completions, **columns):
    """-1 for the first sample only (None elsewhere)."""
    return [-1.0] + [None] * (len(completions) - 1)


def uses_a_column(prompts, completions, target, **columns):
    return [float(c == t) for c, t in zip(completions, target, strict=True)]


def too_few(prompts, completions, **columns):
    return [1.0]


def not_a_number(prompts, completions, **columns):
    return ["high"] * len(completions)


NOT_CALLABLE = 3

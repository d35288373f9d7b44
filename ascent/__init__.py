"""ascent: reinforcement-learning post-training for reasoning and code language models."""

__version__ = "0.1.0"

"""Observing a run: metrics to JSONL and trackers, the progress bar, failure diagnosis."""

"""Data: built-in tasks (arithmetic, countdown) with a held-out split, and the prompt sampler."""

from ascent.data.problems import Problem, is_held_out, render_prompt, reward_columns
from ascent.data.sampler import DrawnPrompt, PromptSampler
from ascent.data.tasks import TASKS, TaskData, load_task

__all__ = [
    "TASKS",
    "DrawnPrompt",
    "Problem",
    "PromptSampler",
    "TaskData",
    "is_held_out",
    "load_task",
    "render_prompt",
    "reward_columns",
]

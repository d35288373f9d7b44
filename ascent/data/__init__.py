"""Data: built-in tasks (arithmetic, countdown) and data files with a held-out split, prompt
formatting, the prompt sampler and the reward history of History Resampling."""

from ascent.data.history import ResampleReport, RewardHistory
from ascent.data.problems import (
    Problem,
    first_of_each_source,
    is_held_out,
    prompt_bytes,
    render_prompt,
    reward_columns,
)
from ascent.data.prompts import PromptFormatter, uses_chat_template
from ascent.data.sampler import DrawnPrompt, PromptSampler
from ascent.data.tasks import TASKS, TaskData, load_task

__all__ = [
    "TASKS",
    "DrawnPrompt",
    "Problem",
    "PromptFormatter",
    "PromptSampler",
    "ResampleReport",
    "RewardHistory",
    "TaskData",
    "first_of_each_source",
    "is_held_out",
    "load_task",
    "prompt_bytes",
    "render_prompt",
    "reward_columns",
    "uses_chat_template",
]

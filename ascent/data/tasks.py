"""Built-in tasks by name: `[data] task = "arithmetic"` -> training and held-out problems."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ascent.config.llm import DataSection
from ascent.data.arithmetic import sample_arithmetic
from ascent.data.countdown import sample_countdown
from ascent.data.problems import Problem, render_prompt
from ascent.errors import ConfigError
from ascent.registry import Registry

EVAL_SEED = 1234  # the held-out set is the same for every run, whatever its seed

# fn(data_cfg, n, held_out=..., seed=..., distinct=...) -> list[Problem]
TaskSampler = Callable[..., list[Problem]]
TASKS: Registry[TaskSampler] = Registry("task")


@TASKS.register("arithmetic")
def _arithmetic(cfg: DataSection, n: int, **kw: object) -> list[Problem]:
    return sample_arithmetic(cfg.arithmetic, n, **kw)  # type: ignore[arg-type]


@TASKS.register("countdown")
def _countdown(cfg: DataSection, n: int, **kw: object) -> list[Problem]:
    return sample_countdown(cfg.countdown, n, **kw)  # type: ignore[arg-type]


@dataclass(frozen=True)
class TaskData:
    train: list[Problem]  # training problems (repeats possible on small problem spaces)
    eval: list[Problem]  # distinct held-out problems, disjoint from any training set


def load_task(cfg: DataSection, seed: int) -> TaskData:
    """The training split drawn with the run's seed and the fixed held-out split."""
    sample = TASKS.get(cfg.task)
    try:
        train = sample(cfg, cfg.train_size, held_out=False, seed=seed, distinct=False)
        held_out = sample(cfg, cfg.eval_size, held_out=True, seed=EVAL_SEED, distinct=True)
        render_prompt(cfg.prompt_template, held_out[0])  # a bad template fails here, not mid-run
    except ValueError as err:
        raise ConfigError(f"[data] {err}") from None
    return TaskData(train=train, eval=held_out)

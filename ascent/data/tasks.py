"""Training and held-out problems from `[data]`: a built-in task by name, or a data file."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ascent.config.data import DataSection, DataSourceSection, ProblemSource
from ascent.data.arithmetic import sample_arithmetic
from ascent.data.countdown import sample_countdown
from ascent.data.files import load_problems
from ascent.data.openenv import load_openenv
from ascent.data.problems import Problem, held_out_split, render_prompt
from ascent.data.reasoning_gym import load_reasoning_gym
from ascent.data.verifiers import load_verifiers
from ascent.errors import AscentError, ConfigError
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
    weights: dict[str, float] | None = None  # [[data.sources]]: each source's share of prompts


def _from_builtin(cfg: ProblemSource, seed: int) -> TaskData:
    sample = TASKS.get(cfg.task)
    train = sample(cfg, cfg.builtin_train_size, held_out=False, seed=seed, distinct=False)
    held_out = sample(cfg, cfg.eval_size, held_out=True, seed=EVAL_SEED, distinct=True)
    return TaskData(train=train, eval=held_out)


def _from_files(cfg: ProblemSource, seed: int) -> TaskData:
    """The file's rows in a seeded order; the held-out set is drawn with EVAL_SEED, so it
    does not move with the run's seed, and no training problem shares its key. `[data]
    difficulty` filters both splits: a run is validated on the buckets it trains on."""
    rows = load_problems(cfg.path, cfg.format, cfg.split, cfg.columns, cfg.difficulty)
    held_rows = None
    if cfg.eval_path is not None or cfg.eval_split is not None:
        source = cfg.eval_path or cfg.path
        split = cfg.eval_split or cfg.split
        held_rows = load_problems(source, cfg.format, split, cfg.columns, cfg.difficulty)
    elif len(rows) <= cfg.eval_size:
        kept = f" of difficulty {', '.join(cfg.difficulty)}" if cfg.difficulty else ""
        raise ValueError(
            f"{cfg.path} has {len(rows)} problems{kept}, and holding out eval_size = "
            f"{cfg.eval_size} leaves none to train on; lower eval_size or set eval_path"
        )
    train, held = held_out_split(rows, held_rows, cfg.eval_size, seed, EVAL_SEED)
    if not train:
        raise ValueError(f"every training problem of {cfg.path} is also a validation problem")
    return TaskData(train=train[: cfg.train_size or len(train)], eval=held)


def _load_one(cfg: ProblemSource, seed: int) -> TaskData:
    data_seed = seed if cfg.seed is None else cfg.seed
    if cfg.path is None:
        task = _from_builtin(cfg, data_seed)
    elif cfg.reasoning_gym_name is not None:
        task = TaskData(*load_reasoning_gym(cfg, data_seed, EVAL_SEED))
    elif cfg.openenv_target is not None:
        task = TaskData(*load_openenv(cfg, data_seed, EVAL_SEED))
    elif cfg.verifiers_env is not None:
        task = TaskData(*load_verifiers(cfg, data_seed, EVAL_SEED))
    else:
        task = _from_files(cfg, data_seed)
    render_prompt(cfg.prompt_template, task.eval[0])  # a bad template fails here, not mid-run
    return task


def _tagged(problem: Problem, source: DataSourceSection) -> Problem:
    """A source's problem as the run sees it: its own template applied (the run's is
    "{prompt}"), its key prefixed with the source so two sources never share one."""
    return Problem(
        key=f"{source.name}/{problem.key}",
        prompt=render_prompt(source.prompt_template, problem),
        answer=problem.answer,
        columns=problem.columns,
        source=source.name,
    )


def load_task(cfg: DataSection, seed: int) -> TaskData:
    """The training split (drawn or shuffled with `[data] seed`, else the run's seed) and the
    held-out split, which is the same for every seed. With `[[data.sources]]`: every source's
    splits together, each problem tagged with its source, and the sources' weights."""
    where = "[data]"
    try:
        if not cfg.sources:
            return _load_one(cfg, seed)
        train: list[Problem] = []
        held: list[Problem] = []
        for source in cfg.sources:
            where = f"[[data.sources]] {source.name}:"
            part = _load_one(source, seed)
            train += [_tagged(p, source) for p in part.train]
            held += [_tagged(p, source) for p in part.eval]
        return TaskData(train, held, weights={s.name: s.weight for s in cfg.sources})
    except (ValueError, AscentError) as err:
        raise ConfigError(f"{where} {err}") from None

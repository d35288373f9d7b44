"""Problems from a reasoning-gym generator: `[data] path = "reasoning_gym:NAME"`.

reasoning-gym (PyPI `reasoning-gym`) makes procedural problems, each with its own scorer, from
a name, a config and a seed. The training set is `train_size` entries drawn with the run's
seed (or `[data] seed`); the held-out set is `eval_size` distinct entries drawn with a fixed
seed, the same for every run, and a training problem with a held-out question is dropped. A
problem's prompt is the entry's question, its key the question too, and its columns are the
entry's scalar metadata (usable in `prompt_template`, e.g. `{expression}=`) plus `rg_spec`
and `rg_index`, from which the `reasoning_gym` reward rebuilds the entry to score it.
"""

from __future__ import annotations

import dataclasses
import inspect
import re
from typing import Any

from ascent.config.data import ProblemSource
from ascent.data.problems import Problem, generated_splits
from ascent.errors import AscentError, did_you_mean
from ascent.rewards.reasoning_gym import build_dataset, dataset_spec, import_reasoning_gym

# Columns the reward reads; a metadata field of the same name would be shadowed.
RESERVED = ("prompt", "answer", "rg_spec", "rg_index")
# What, in a generator's module, can run an answer as Python: eval / exec, and sympy, whose
# string parsing evaluates its input (spiral_matrix's scorer calls eval on the model's reply,
# countdown's sympy's parse_expr).
_EVALUATES = re.compile(
    r"\b(?:eval|exec|parse_expr|sympify|parse_latex)\s*\(|^\s*(?:from|import) sympy\b", re.M
)


def scorer_runs_answers(dataset_class: type) -> str | None:
    """The file of a generator whose own scorer may run the model's answer as code (its
    score_answer comes from a module that calls eval, exec or sympy's parsers), else None.
    A coarse test on purpose: ascent runs model-written code only inside its sandbox, and a
    scorer in this process is not one."""
    owner = next(k for k in dataset_class.__mro__ if "score_answer" in k.__dict__)
    if owner.__module__ == "reasoning_gym.dataset":
        return None  # the base class's exact-match scorer
    module = inspect.getmodule(owner)
    try:
        source = inspect.getsource(module)
    except (OSError, TypeError):
        return getattr(module, "__file__", dataset_class.__name__)  # cannot tell: refuse
    return module.__file__ if _EVALUATES.search(source) else None


def _check_settings(name: str, options: dict[str, Any]) -> None:
    """An unknown generator or setting is one line naming the valid ones."""
    rg = import_reasoning_gym()
    known = sorted(rg.factory.DATASETS)
    if name not in known:
        raise AscentError(
            f"no reasoning-gym generator '{name}'{did_you_mean(name, known)} (there are "
            f"{len(known)}: {', '.join(known[:6])}, ...)"
        )
    dataset_class, config_class = rg.factory.DATASETS[name]
    runs = scorer_runs_answers(dataset_class)
    if runs is not None:
        where = runs.split("reasoning_gym/")[-1]
        raise AscentError(
            f"reasoning_gym:{name}: its scorer may run the model's answer as Python (eval or "
            f"sympy parsing in reasoning_gym/{where}), and ascent runs model-written code only "
            "inside its sandbox; choose another generator, or score it with a reward of your own"
        )
    fields = {f.name for f in dataclasses.fields(config_class)} - {"size", "seed"}
    unknown = sorted(set(options) - fields)
    if unknown:
        raise AscentError(
            f"[data] reasoning_gym: reasoning_gym:{name} has no setting "
            f"{', '.join(unknown)}{did_you_mean(unknown[0], sorted(fields))}; its settings: "
            f"{', '.join(sorted(fields))}"
        )


def _problem(entry: dict[str, Any], spec: str, index: int) -> Problem:
    metadata = entry.get("metadata") or {}
    columns = {
        key: value
        for key, value in metadata.items()
        if key not in RESERVED and isinstance(value, (str, int, float, bool))
    }
    columns.update(rg_spec=spec, rg_index=index)
    answer = entry.get("answer")
    return Problem(
        key=str(entry["question"]),
        prompt=str(entry["question"]),
        answer="" if answer is None else str(answer),
        columns=columns,
    )


def _draw(name: str, options: dict[str, Any], seed: int, size: int) -> list[Problem]:
    spec = dataset_spec(name, options, seed, size)
    dataset = build_dataset(spec)
    problems = []
    for i in range(size):
        try:
            entry = dataset[i]
        except Exception as err:  # a generator that breaks on its settings while drawing
            raise AscentError(
                f"reasoning_gym:{name} failed to generate problem {i} with settings {options}: "
                f"{type(err).__name__}: {err}; change [data] reasoning_gym"
            ) from None
        problems.append(_problem(entry, spec, i))
    return problems


def load_reasoning_gym(
    cfg: ProblemSource, seed: int, eval_seed: int
) -> tuple[list[Problem], list[Problem]]:
    """(training problems, held-out problems) of the generator `cfg.path` names."""
    name = cfg.reasoning_gym_name
    assert name, "load_reasoning_gym needs a reasoning_gym:NAME path"
    options = dict(cfg.reasoning_gym)
    _check_settings(name, options)
    return generated_splits(
        lambda draw_seed, size: _draw(name, options, draw_seed, size),
        seed,
        eval_seed,
        (cfg.builtin_train_size, cfg.eval_size),
        f"reasoning_gym:{name}",
        "widen the generator's settings or lower eval_size",
    )

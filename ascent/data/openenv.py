"""Problems from an OpenEnv environment: `[data] path = "openenv:MODULE:APP"` or a server's URL.

An OpenEnv environment makes its problem at reset, from a seed. A problem here is a seed and
what reset(seed) showed: the prompt is the observation's `[data.openenv] prompt_field`, its
key the prompt too, and its columns the observation's other scalar fields (usable in
`prompt_template`) plus `oe_spec` and `oe_seed`, from which the `openenv` reward resets a
session of its own to the same problem to score a completion. The training set is
`train_size` seeds drawn with the run's seed (or `[data] seed`); the held-out set is
`eval_size` seeds drawn with a fixed seed, the same for every run, distinct by prompt; a
training problem whose prompt is a held-out one is dropped.
"""

from __future__ import annotations

import dataclasses
import json
import os
import random
import sys
from typing import Any

from ascent.config.data import ProblemSource
from ascent.data.problems import Problem, generated_splits
from ascent.errors import AscentError
from ascent.rewards.openenv import RESERVED, EnvSpec, action_fields, play, server_url

SEED_RANGE = 2**31


def _seeds(seed: int, size: int) -> list[int]:
    rng = random.Random(seed)
    return [rng.randrange(SEED_RANGE) for _ in range(size)]


def _problems(spec: EnvSpec, prompt_field: str, seeds: list[int]) -> list[Problem]:
    out = []
    for seed, episode in zip(seeds, play(spec, seeds, None), strict=True):
        observation = episode.observation
        prompt = observation.get(prompt_field)
        if not isinstance(prompt, str):
            have = ", ".join(sorted(observation)) or "none"
            raise AscentError(
                f"openenv:{spec.target}: reset() gave no text field '{prompt_field}' (its "
                f"fields: {have}); set [data.openenv] prompt_field to the one with the prompt"
            )
        columns: dict[str, Any] = {
            key: value
            for key, value in observation.items()
            if key not in RESERVED
            and key != prompt_field
            and isinstance(value, (str, int, float, bool))
        }
        columns.update(oe_spec=spec.to_json(), oe_seed=seed)
        out.append(Problem(key=prompt, prompt=prompt, answer="", columns=columns))
    return out


def _check_action_field(spec: EnvSpec) -> None:
    """The completion goes into the action's `action_field`: one the action has."""
    fields = action_fields(server_url(spec))
    if fields is not None and spec.action_field not in fields:
        raise AscentError(
            f"openenv:{spec.target}: its action has no field '{spec.action_field}' (its "
            f"fields: {', '.join(fields) or 'none'}); set [data.openenv] action_field to the "
            "one that takes the text"
        )


def _warn_if_options_do_nothing(spec: EnvSpec, prompt_field: str) -> None:
    """openenv's server drops reset keywords the environment's reset() does not take, and a
    reset() with **kwargs may ignore them too: when the first observations of a few seeds
    are the same with and without the options, say so (they may still act later)."""
    seeds = _seeds(0, 4)
    plain = dataclasses.replace(spec, reset_options="{}")
    first = [e.observation for e in play(spec, seeds, None)]
    if first == [e.observation for e in play(plain, seeds, None)]:
        print(
            f"warning: openenv:{spec.target}: [data.openenv] reset = {spec.reset_options} "
            "changed nothing reset() shows for 4 seeds; check the names reset() takes "
            "(openenv drops the others)",
            file=sys.stderr,
        )


def load_openenv(
    cfg: ProblemSource, seed: int, eval_seed: int
) -> tuple[list[Problem], list[Problem]]:
    """(training problems, held-out problems) of the environment `cfg.path` names."""
    target = cfg.openenv_target
    assert target, "load_openenv needs an openenv:... path"
    settings = cfg.openenv
    options = json.dumps(settings.reset, sort_keys=True)
    spec = EnvSpec(target, settings.action_field, settings.sessions, options, os.getcwd())
    _check_action_field(spec)
    if settings.reset:
        _warn_if_options_do_nothing(spec, settings.prompt_field)
    return generated_splits(
        lambda draw_seed, size: _problems(spec, settings.prompt_field, _seeds(draw_seed, size)),
        seed,
        eval_seed,
        (cfg.builtin_train_size, cfg.eval_size),
        f"openenv:{target}",
        "does its reset() use the seed? Lower eval_size if it has few problems",
    )

"""A gradient that is not finite stops the run before any weight takes it: a NaN never reaches
the weights, so no checkpoint, best model or final model can hold one."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from ascent.configfile import load_config
from ascent.errors import AscentError
from ascent.train.llm_setup import build_run
from tests.train.test_llm_loop import SHORT


@pytest.mark.parametrize("poison", [float("nan"), float("inf")])
def test_a_non_finite_gradient_stops_the_update_and_leaves_the_weights_alone(tmp_path, poison):
    run = build_run(
        load_config(None, [*SHORT, f'run.output_dir="{tmp_path}"']), torch.device("cpu")
    )
    try:
        batch, _ = run.train_batch(run.rollouts.score(*run.rollouts.collect()))
        before = {k: v.clone() for k, v in run.actor.weights()}
        poisoned = dataclasses.replace(batch, advantages=torch.full_like(batch.advantages, poison))
        with pytest.raises(AscentError, match=r"the gradient is not finite .* stops before it"):
            run.actor.update(poisoned, step=1)
        after = dict(run.actor.weights())
        assert all(torch.equal(before[k], after[k]) for k in before)
        run.actor.update(batch, step=1)  # a finite batch still trains
        assert any(not torch.equal(before[k], v) for k, v in run.actor.weights())
    finally:
        run.close()

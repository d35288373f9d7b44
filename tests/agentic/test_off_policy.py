"""Stale rollouts: the capped off-policy weight keeps the update bounded; without the
correction the same setting drifts.

Episodes are sampled by the policy being trained, then made stale by declaring that the
policy which generated the failed ones (advantage < 0) was `staleness` times less likely to
produce their tokens: behaviour log-probs lowered by log(staleness), as after many updates
that moved probability onto those tokens. Plain PPO anchored at the behaviour policy
(off_policy_correction = false) then multiplies those tokens' negative advantages by the
ratio pi_theta / pi_behaviour = staleness, without bound. The decoupled objective (true)
anchors the clip at the current policy and caps the weight at correction_clip (5), so however
stale the data, no token counts more than 5 x (1 + clip_high) times its advantage. Gradient
clipping is off, to show it is the objective that bounds the update.
"""

from __future__ import annotations

import math

import pytest
import torch

from ascent.configfile import load_config
from ascent.rewards import RewardOutput
from ascent.rollout.agentic.rows import build_rows
from ascent.rollout.agentic.transcript import Episode, PolicyThread, Turn
from ascent.train.agentic_source import turns_of
from ascent.train.llm_rollout import Scored
from ascent.train.llm_setup import build_run

GROUP = 4


def episodes(run, staleness: float) -> list[Episode]:
    """Half of each group solved (delayed 1), half failed, whose tokens are made stale."""
    tok = run.tokenizer
    problems = run.task.train[:8]
    prompts = [tok(p.prompt)["input_ids"] for p in problems]
    gen = torch.Generator().manual_seed(0)
    sampling = run.rollouts.sampling
    batch = run.engine.generate(prompts, list(range(len(prompts))), GROUP, sampling, gen)
    out = []
    for i in range(len(batch)):
        n, g, solved = int(batch.response_mask[i].sum()), i // GROUP, i % 2 == 0
        behaviour = batch.logprobs[i, :n] - (0.0 if solved else math.log(staleness))
        ep = Episode(problems[g], None, g)  # type: ignore[arg-type]
        ep.turns.append(Turn("solver", "policy", 0, "", reward=0.1, version=0))
        thread = PolicyThread("solver", prompts[g])
        thread.act(batch.response_ids[i, :n].tolist(), behaviour.tolist(), 0, True)
        ep.threads.append(thread)
        ep.delayed = 1.0 if solved else 0.0
        out.append(ep)
    return out


def one_update(tmp_path, *, correction: bool, staleness: float) -> dict[str, float]:
    """One optimiser step on stale rows; its gradient norm and how far the policy moved."""
    cfg = load_config(
        "examples/agentic_tiny.toml",
        [
            f'run.output_dir="{tmp_path}"',
            "data.eval_size=10",
            f"agentic.off_policy_correction={str(correction).lower()}",
            "train.max_grad_norm=1e9",
        ],
    )
    torch.manual_seed(0)
    run = build_run(cfg, torch.device("cpu"))
    rows = build_rows(episodes(run, staleness), run.tokenizer.pad_token_id, torch.device("cpu"))
    before = run.actor.logprobs(rows.rollout)
    run.actor.optimizer = torch.optim.SGD(run.actor.model.parameters(), lr=1e-3)
    run.actor.scheduler = torch.optim.lr_scheduler.LambdaLR(run.actor.optimizer, lambda _: 1.0)
    n = len(rows.row_episode)
    unscored = RewardOutput([None] * n, {}, [{}] * n)  # the credit reads the turns
    scored = Scored(rows.rollout, [], [""] * n, unscored, turns=turns_of(rows))
    batch, _ = run.train_batch(scored)
    metrics = run.actor.update(batch, 1)
    moved = (run.actor.logprobs(rows.rollout) - before).abs()
    metrics["drift"] = float(moved[rows.rollout.response_mask.bool()].mean())
    return metrics


@pytest.mark.parametrize("correction", [True, False])
def test_stale_rows_get_their_weight_from_the_right_policy(tmp_path, correction):
    m = one_update(tmp_path, correction=correction, staleness=50.0)
    if correction:  # raw weights show the staleness, the cap tames them
        assert m["is_weight_max"] == pytest.approx(50.0, rel=1e-3)
        assert m["is_clip_frac"] > 0.2
    else:  # plain PPO: no behaviour weight, the ratio to the behaviour policy is the weight
        assert "is_weight_max" not in m


def test_capped_weights_keep_the_update_bounded_while_uncorrected_ones_drift(tmp_path):
    runs = {
        (c, s): one_update(tmp_path / f"{c}-{s}", correction=c, staleness=s)
        for c in (True, False)
        for s in (10.0, 1000.0)
    }
    on_10, on_1000 = runs[(True, 10.0)], runs[(True, 1000.0)]
    off_10, off_1000 = runs[(False, 10.0)], runs[(False, 1000.0)]
    # With the correction, 100x staler data gives the same update: the weight is capped.
    assert on_1000["grad_norm"] == pytest.approx(on_10["grad_norm"], rel=1e-3)
    assert on_1000["drift"] == pytest.approx(on_10["drift"], rel=1e-3)
    # Without it, the update grows with the staleness, and the policy is thrown off.
    assert off_1000["grad_norm"] > 50 * off_10["grad_norm"]
    assert off_1000["grad_norm"] > 50 * on_1000["grad_norm"]
    assert off_1000["drift"] > 10 * on_1000["drift"]

"""Policy losses against hand computations and autograd identities."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from ascent.algos import POLICY_LOSSES, PolicyLossInput, PolicyLossParams

F64 = torch.float64
LN = math.log


def t(rows) -> torch.Tensor:
    return torch.tensor(rows, dtype=F64)


def inputs(ratios, advantages, mask=None, behaviour_weights=None) -> PolicyLossInput:
    """Build logp/old_logp so that exp(logp - old_logp) equals the given ratios."""
    old = t([[-1.0] * len(row) for row in ratios])
    logp = (old + t([[LN(r) for r in row] for row in ratios])).requires_grad_(True)
    behaviour = None
    if behaviour_weights is not None:
        behaviour = old - t([[LN(w) for w in row] for row in behaviour_weights])
    mask = t(mask) if mask is not None else torch.ones_like(old)
    return PolicyLossInput(logp, old, t(advantages), mask, behaviour)


def test_ppo_clip_matches_hand_computation_inside_above_and_below_the_range():
    # clip-higher: ratio clipped to [0.8, 1.28]. Columns: ratio 1.1 (inside), 1.5 (above),
    # 0.5 (below); row 0 has A = +1, row 1 has A = -1.
    inp = inputs([[1.1, 1.5, 0.5], [1.1, 1.5, 0.5]], [[1, 1, 1], [-1, -1, -1]])
    loss, metrics = POLICY_LOSSES.get("ppo_clip")(inp, PolicyLossParams(0.2, 0.28))
    # A > 0: max(-r, -clip(r)) = (-1.1, max(-1.5, -1.28) = -1.28, max(-0.5, -0.8) = -0.5).
    # A < 0: max(r, clip(r)) = (1.1, max(1.5, 1.28) = 1.5, max(0.5, 0.8) = 0.8).
    torch.testing.assert_close(loss, t([[-1.1, -1.28, -0.5], [1.1, 1.5, 0.8]]))
    # Only (A>0, r=1.5) hits the high clip and (A<0, r=0.5) the low clip.
    assert metrics["clip_ratio/high"].item() == pytest.approx(1 / 6)
    assert metrics["clip_ratio/low"].item() == pytest.approx(1 / 6)
    assert metrics["clip_ratio"].item() == pytest.approx(2 / 6)
    assert metrics["ratio_mean"].item() == pytest.approx((1.1 + 1.5 + 0.5) / 3)
    # approx_kl: k3 of old vs new, (r - 1) - log r, averaged.
    k3 = [(r - 1) - LN(r) for r in (1.1, 1.5, 0.5)]
    assert metrics["approx_kl"].item() == pytest.approx(sum(k3) / 3)
    # Clipped tokens carry no gradient; the others carry -A * r (d(-A r)/d logp = -A r).
    loss.sum().backward()
    torch.testing.assert_close(inp.logp.grad, t([[-1.1, 0, -0.5], [1.1, 1.5, 0]]))


def test_ppo_clip_ignores_masked_tokens():
    inp = inputs([[1.1, 9.0]], [[1, 1]], mask=[[1, 0]])
    loss, metrics = POLICY_LOSSES.get("ppo_clip")(inp, PolicyLossParams())
    torch.testing.assert_close(loss, t([[-1.1, 0.0]]))
    assert metrics["clip_ratio"].item() == 0.0


def test_dual_clip_bounds_the_loss_of_negative_advantages():
    # c = 3, clip 0.2. (A=-1, r=5): max(5, 1.2) = 5 -> min(5, 3) = 3.
    # (A=-1, r=2): 2 < 3, kept. (A=+1, r=5): -1.2, dual clip does not apply to A > 0.
    # (A=-2, r=4): max(8, 2.4) = 8 -> min(8, 6) = 6.
    inp = inputs([[5.0, 2.0, 5.0, 4.0]], [[-1, -1, 1, -2]])
    loss, metrics = POLICY_LOSSES.get("ppo_clip")(inp, PolicyLossParams(dual_clip=3.0))
    torch.testing.assert_close(loss, t([[3.0, 2.0, -1.2, 6.0]]))
    assert metrics["dual_clip_frac"].item() == pytest.approx(2 / 4)
    loss.sum().backward()
    # The dual-clipped tokens have a constant loss: no gradient.
    torch.testing.assert_close(inp.logp.grad, t([[0.0, 2.0, 0.0, 0.0]]))


def test_truncated_importance_weights_scale_the_decoupled_loss():
    # Ratios 1 (pi_theta = pi_old); behaviour weights pi_old / pi_behaviour = 2, 8, 0.5;
    # cap 5 -> weights 2, 5, 0.5. Per-token loss -A * r * w with A = 1.
    inp = inputs([[1.0, 1.0, 1.0]], [[1, 1, 1]], behaviour_weights=[[2.0, 8.0, 0.5]])
    loss, metrics = POLICY_LOSSES.get("ppo_clip")(inp, PolicyLossParams(is_cap=5.0))
    torch.testing.assert_close(loss, t([[-2.0, -5.0, -0.5]]))
    assert metrics["is_weight_mean"].item() == pytest.approx((2 + 8 + 0.5) / 3)
    assert metrics["is_weight_max"].item() == pytest.approx(8.0)
    assert metrics["is_clip_frac"].item() == pytest.approx(1 / 3)
    # The weight is a constant: the gradient is w * (-A) * r and nothing flows into it.
    loss.sum().backward()
    torch.testing.assert_close(inp.logp.grad, t([[-2.0, -5.0, -0.5]]))


def test_importance_weights_do_not_move_the_clip_anchor():
    # The clip is around pi_old, not pi_behaviour: a ratio of 1.5 is clipped to 1.2 whatever
    # the behaviour weight (2), then weighted: -1.2 * 2.
    inp = inputs([[1.5]], [[1]], behaviour_weights=[[2.0]])
    loss, _ = POLICY_LOSSES.get("ppo_clip")(inp, PolicyLossParams(is_cap=5.0))
    torch.testing.assert_close(loss, t([[-2.4]]))


def test_is_cap_without_behaviour_logp_is_refused():
    with pytest.raises(ValueError, match="behaviour_logp is None"):
        POLICY_LOSSES.get("ppo_clip")(inputs([[1.0]], [[1]]), PolicyLossParams(is_cap=2.0))


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.floats(-3, 3), min_size=1, max_size=6),
    st.lists(st.floats(-5, 0), min_size=6, max_size=6),
    st.floats(0.01, 0.5),
    st.floats(0.01, 0.5),
)
def test_ppo_clip_gradient_is_the_vanilla_policy_gradient_at_ratio_one(adv, logp, low, high):
    n = len(adv)
    logp = t([logp[:n]]).requires_grad_(True)
    inp = PolicyLossInput(logp, logp.detach().clone(), t([adv]), torch.ones(1, n, dtype=F64))
    loss, _ = POLICY_LOSSES.get("ppo_clip")(inp, PolicyLossParams(low, high))
    loss.sum().backward()
    # d/dlogp of -A * pi/pi_old at pi = pi_old is -A: the REINFORCE gradient -A grad log pi.
    torch.testing.assert_close(logp.grad, -t([adv]))


def test_gspo_clips_the_sequence_ratio_and_broadcasts_it():
    # Row 0: token ratios 2, 0.5, 1 -> geometric mean 1 -> s = 1, unclipped: loss -A * 1.
    # Row 1: token ratios e^0.3, e^0.3 (third token masked, ratio 9 ignored) -> s = e^0.3 =
    # 1.34986 > 1.28 with A > 0: clipped to 1.28 on every masked token.
    e3 = math.exp(0.3)
    inp = inputs([[2.0, 0.5, 1.0], [e3, e3, 9.0]], [[2, 2, 2], [1, 1, 1]], [[1, 1, 1], [1, 1, 0]])
    loss, metrics = POLICY_LOSSES.get("gspo")(inp, PolicyLossParams(0.2, 0.28))
    torch.testing.assert_close(loss, t([[-2.0, -2.0, -2.0], [-1.28, -1.28, 0.0]]))
    assert metrics["clip_ratio/high"].item() == pytest.approx(2 / 5)
    loss.sum().backward()
    # Token form: d s_{i,t} / d logp_t = s_i (= 1 in row 0); the clipped row has no gradient.
    torch.testing.assert_close(inp.logp.grad, t([[-2.0, -2.0, -2.0], [0.0, 0.0, 0.0]]))


def test_gspo_token_form_has_the_gradient_of_the_sequence_objective():
    logp = t([[-1.0, -2.0, -0.5, -3.0], [-0.7, -1.1, -9.0, -9.0]])
    old = t([[-1.05, -1.9, -0.55, -3.0], [-0.75, -1.0, 0.0, 0.0]])
    mask = t([[1, 1, 1, 1], [1, 1, 0, 0]])
    adv = t([[0.7] * 4, [-1.3] * 4])
    token_logp = logp.clone().requires_grad_(True)
    inp = PolicyLossInput(token_logp, old, adv, mask)
    loss, _ = POLICY_LOSSES.get("gspo")(inp, PolicyLossParams(0.5, 0.5))  # nothing clipped
    lengths = [4, 2]
    (sum(loss[i].sum() / lengths[i] for i in range(2))).backward()
    # The paper's sequence objective, written directly: -A_i * exp(mean_t(logp - old)).
    seq_logp = logp.clone().requires_grad_(True)
    objective = 0.0
    for i in range(2):
        n = lengths[i]
        s = torch.exp((seq_logp[i, :n] - old[i, :n]).sum() / n)
        objective = objective - adv[i, 0] * s
    objective.backward()
    torch.testing.assert_close(token_logp.grad, seq_logp.grad)


def test_gspo_uses_sequence_level_behaviour_weights():
    # Behaviour weights 2 and 0.5 per token: the sequence weight is their geometric mean, 1.
    inp = inputs([[1.0, 1.0]], [[1, 1]], behaviour_weights=[[2.0, 0.5]])
    loss, _ = POLICY_LOSSES.get("gspo")(inp, PolicyLossParams(is_cap=5.0))
    torch.testing.assert_close(loss, t([[-1.0, -1.0]]))


def test_cispo_clips_the_weight_and_keeps_every_tokens_gradient():
    # ratios 1.1 (inside), 1.5 (above 1.28), 0.5 (below 0.8); A = +1 then -1.
    inp = inputs([[1.1, 1.5, 0.5], [1.1, 1.5, 0.5]], [[1, 1, 1], [-1, -1, -1]])
    loss, metrics = POLICY_LOSSES.get("cispo")(inp, PolicyLossParams(0.2, 0.28))
    weights = t([[1.1, 1.28, 0.8], [1.1, 1.28, 0.8]])
    torch.testing.assert_close(loss, -weights * inp.advantages * inp.logp.detach())
    loss.sum().backward()
    # d/dlogp of -sg(w) A logp is -w A on every token, the clipped ones included (ppo_clip
    # gives them 0)
    torch.testing.assert_close(inp.logp.grad, -weights * inp.advantages)
    assert float(metrics["clip_ratio"]) == pytest.approx(4 / 6)


def test_sapo_gate_is_the_policy_gradient_at_ratio_one_and_fades_away_from_it():
    ratios = [[1.0, 1.5, 3.0], [1.0, 1.5, 3.0]]
    inp = inputs(ratios, [[2, 2, 2], [-2, -2, -2]])
    params = PolicyLossParams(sapo_tau_pos=1.0, sapo_tau_neg=2.0)
    loss, _ = POLICY_LOSSES.get("sapo")(inp, params)
    loss.sum().backward()
    for row, tau, a in ((0, 1.0, 2.0), (1, 2.0, -2.0)):
        for col, r in enumerate(ratios[row]):
            s = 1 / (1 + math.exp(-tau * (r - 1)))
            assert float(loss[row, col].detach()) == pytest.approx(-(4 / tau) * s * a)
            # d/dlogp = -A * 4 s (1 - s) * dr/dlogp, and dr/dlogp = r
            assert float(inp.logp.grad[row, col]) == pytest.approx(-a * 4 * s * (1 - s) * r)
    assert float(inp.logp.grad[0, 0]) == pytest.approx(-2.0)  # r = 1: the policy gradient
    # the negative side fades faster (tau_neg > tau_pos), relative to its value at r = 1
    fade_pos = float(inp.logp.grad[0, 2] / inp.logp.grad[0, 0])
    fade_neg = float(inp.logp.grad[1, 2] / inp.logp.grad[1, 0])
    assert fade_neg < fade_pos


@pytest.mark.parametrize("name", ["cispo", "sapo"])
def test_new_losses_vanish_at_zero_advantage_and_take_behaviour_weights(name):
    from ascent.train.parts import vanishes_at_zero_advantage

    assert vanishes_at_zero_advantage(POLICY_LOSSES.get(name), PolicyLossParams())
    plain = inputs([[1.2, 0.9]], [[1.0, -1.0]])
    weighted = inputs([[1.2, 0.9]], [[1.0, -1.0]], behaviour_weights=[[3.0, 0.5]])
    params = PolicyLossParams(is_cap=2.0)
    base, _ = POLICY_LOSSES.get(name)(plain, params.__class__())
    loss, metrics = POLICY_LOSSES.get(name)(weighted, params)
    torch.testing.assert_close(loss, base.detach() * t([[2.0, 0.5]]))
    assert float(metrics["is_clip_frac"]) == pytest.approx(0.5)


def test_vanilla_pg_is_minus_a_r_unclipped_with_the_actor_critic_gradient():
    # ratios far outside any clip range still carry their whole gradient -A r
    inp = inputs([[1.0, 3.0, 0.2]], [[2.0, -1.0, 0.5]], mask=[[1, 1, 0]])
    loss, metrics = POLICY_LOSSES.get("vanilla_pg")(inp, PolicyLossParams())
    torch.testing.assert_close(loss, t([[-2.0, 3.0, 0.0]]))
    assert metrics["clip_ratio"].item() == 0.0
    loss.sum().backward()
    # d(-A r)/d logp = -A r; at r = 1 that is the actor-critic step -A (grad of log pi)
    torch.testing.assert_close(inp.logp.grad, t([[-2.0, 3.0, 0.0]]))

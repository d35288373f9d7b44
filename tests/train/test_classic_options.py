"""Classic PPO's progression options (the actor-critic -> PPO write-up): the plain
actor-critic objective, gradient clipping per network, advantages whitened per rollout."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from ascent.algos import PolicyLossParams
from ascent.configfile import load_config
from ascent.errors import ConfigError
from ascent.models.actor_critic import ActorCritic
from ascent.train import classic
from ascent.train.classic import make_optimizer, ppo_loss, ppo_update
from ascent.train.classic_rollout import Samples

CARTPOLE = Path(__file__).resolve().parents[2] / "examples" / "ppo_cartpole.toml"


def batch(agent: ActorCritic, n: int = 64, advantages: torch.Tensor | None = None) -> Samples:
    torch.manual_seed(1)
    obs = torch.randn(n, 4)
    actions, logp = agent.sample(obs)
    adv = torch.randn(n) * 3 + 2 if advantages is None else advantages
    mask = torch.ones(n, dtype=torch.bool)
    return Samples(
        obs, actions, logp.detach(), agent.value(obs).detach(), adv, torch.randn(n), mask
    )


def agent() -> ActorCritic:
    torch.manual_seed(0)
    return ActorCritic(4, 2, continuous=False, hidden_sizes=(16,), activation="tanh")


def test_the_actor_critic_objective_is_minus_a_log_pi_and_never_clips():
    cfg = load_config(
        CARTPOLE, ['train.objective="actor_critic"', "train.normalize_advantages=false"]
    )
    net = agent()
    data = batch(net)
    # move the policy far from the sampling one: PPO would clip, the actor-critic step not
    with torch.no_grad():
        data.logp.add_(torch.linspace(-1.0, 1.0, len(data)))
    _loss, metrics = ppo_loss(net, data, cfg.train, PolicyLossParams())
    logp, _ = net.evaluate(data.obs, data.actions)
    expected = -(data.advantages * torch.exp(logp - data.logp)).mean()
    assert float(metrics["loss/policy"]) == pytest.approx(float(expected), rel=1e-5)
    assert float(metrics["policy/clip_frac"]) == 0.0


def test_per_network_clipping_bounds_each_network_on_its_own():
    per = load_config(CARTPOLE, ['train.grad_clip="per_network"', "train.max_grad_norm=0.01"])
    net = agent()
    optimizer = make_optimizer(net, per.optim)
    metrics = ppo_update(net, optimizer, batch(net), per.train.model_copy(
        update={"update_epochs": 1, "batch_size": 64}), PolicyLossParams(0.2, 0.2))  # fmt: skip
    a, c = metrics["optim/grad_norm_actor"], metrics["optim/grad_norm_critic"]
    assert a > 0.01 and c > 0.01  # both were over the limit before clipping
    assert metrics["optim/grad_norm"] == pytest.approx((a**2 + c**2) ** 0.5, rel=1e-5)
    # after clipping each network's gradient has norm 0.01: check on a fresh backward
    net2 = agent()
    loss, _ = ppo_loss(net2, batch(net2), per.train, PolicyLossParams(0.2, 0.2))
    loss.backward()
    from ascent.train.classic import _clip_gradients

    _clip_gradients(net2, per.train)
    actor_norm = torch.linalg.vector_norm(
        torch.stack([p.grad.norm() for p in net2.actor_parameters()])
    )
    critic_norm = torch.linalg.vector_norm(
        torch.stack([p.grad.norm() for p in net2.critic.parameters()])
    )
    assert float(actor_norm) == pytest.approx(0.01, rel=1e-3)
    assert float(critic_norm) == pytest.approx(0.01, rel=1e-3)


@pytest.mark.parametrize("scope", ["rollout", "minibatch"])
def test_rollout_whitening_hands_the_minibatches_the_rollouts_whitened_advantages(
    monkeypatch, scope
):
    cfg = load_config(CARTPOLE, [f'train.advantage_norm="{scope}"'])
    train = cfg.train.model_copy(update={"update_epochs": 1, "batch_size": 16})
    seen = []
    original = classic.ppo_loss

    def spy(net, minibatch, *args):
        seen.append(minibatch.advantages.clone())
        return original(net, minibatch, *args)

    monkeypatch.setattr(classic, "ppo_loss", spy)
    net = agent()
    adv = torch.cat([torch.full((32,), 5.0), torch.full((32,), -5.0)]) + torch.randn(64) * 0.1
    ppo_update(net, make_optimizer(net, cfg.optim), batch(net, advantages=adv), train,
               PolicyLossParams(0.2, 0.2))  # fmt: skip
    handed = torch.sort(torch.cat(seen)).values
    whole = (adv - adv.mean()) / adv.std(unbiased=False)
    expected = torch.sort(whole if scope == "rollout" else adv).values
    torch.testing.assert_close(handed, expected, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize(
    ("sets", "message"),
    [
        (['train.objective="actor_critic"', "train.clip_range=0.1"], "clips nothing"),
        (['train.objective="actor_critic"', "train.anneal_clip_range=true"], "clips nothing"),
        (
            ["train.normalize_advantages=false", 'train.advantage_norm="rollout"'],
            "nothing is whitened",
        ),
    ],
)
def test_settings_that_cannot_act_are_refused(sets, message):
    with pytest.raises(ConfigError, match=message):
        load_config(CARTPOLE, sets)

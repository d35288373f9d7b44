"""The role workers keep to their interfaces: a LoRA run's reference is the actor with its
adapters off (no second copy), and the actor's weight stream is the plain model's."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForCausalLM

from ascent.models import build_tiny_model
from ascent.train.forward import response_logprobs
from ascent.train.llm_setup import build_run
from ascent.train.reference import AdapterReference
from tests.train.test_llm_loop import config


@pytest.fixture
def lora_run(tmp_path):
    pytest.importorskip("peft")
    model, tok = build_tiny_model()
    model.save_pretrained(tmp_path / "m")
    tok.save_pretrained(tmp_path / "m")
    cfg = config(
        tmp_path,
        f'model.name_or_path="{tmp_path / "m"}"',
        "model.lora={enabled=true, r=4, alpha=8}",
        "algorithm.kl_coef=0.01",
        "optim.lr=0.05",
        # a random model gets every answer wrong: rewards that differ, so there is a gradient
        'reward.functions=["tests.rewards.custom_rewards:length_reward"]',
    )
    run = build_run(cfg, torch.device("cpu"))
    yield run, AutoModelForCausalLM.from_pretrained(tmp_path / "m"), cfg
    run.close()


def test_a_lora_reference_is_the_base_model_under_the_adapters_not_a_copy(lora_run):
    run, base, _ = lora_run
    assert isinstance(run.reference, AdapterReference)
    batch, _ = run.train_batch(run.rollouts.score(*run.rollouts.collect()))
    run.actor.update(batch, step=1)  # the adapters move away from zero
    rollout, _ = run.rollouts.collect()
    with torch.no_grad():
        expected = response_logprobs(base, rollout, run.credit.parts.temperature)[0]
    mask = rollout.response_mask.bool()
    reference = run.reference.logprobs(rollout)
    assert torch.allclose(reference[mask], expected[mask], atol=1e-5)
    assert not torch.allclose(run.actor.logprobs(rollout)[mask], expected[mask], atol=1e-3)


def test_the_weight_stream_is_the_plain_model_with_the_adapters_merged(lora_run):
    run, base, _ = lora_run
    batch, _ = run.train_batch(run.rollouts.score(*run.rollouts.collect()))
    run.actor.update(batch, step=1)
    merged = dict(run.actor.weights())
    assert set(merged) == {n for n, _ in base.named_parameters(remove_duplicate=False)}
    base.load_state_dict(merged, strict=False)
    rollout, _ = run.rollouts.collect()
    with torch.no_grad():
        plain = response_logprobs(base, rollout, run.credit.parts.temperature)[0]
    mask = rollout.response_mask.bool()
    assert torch.allclose(plain[mask], run.actor.logprobs(rollout)[mask], atol=1e-5)


def test_an_engine_with_its_own_lora_copy_is_synced_with_the_adapters_alone(lora_run):
    """An own-copy engine (async rollouts) of a LoRA run holds the base weights once and
    takes only the adapters after each update, then samples what the actor's module would."""
    from ascent.rollout import SamplingParams
    from ascent.train.llm_setup import make_engine

    run, _, cfg = lora_run
    own = make_engine(cfg, run.actor, run.tokenizer, own_copy=True)
    assert own.takes_adapters and not run.engine.takes_adapters
    batch, _ = run.train_batch(run.rollouts.score(*run.rollouts.collect()))
    run.actor.update(batch, step=1)
    sent = dict(run.actor.weights(own.takes_adapters))
    assert sent and all(".lora_" in name for name in sent)
    sent_bytes = sum(t.numel() * t.element_size() for t in sent.values())
    full_bytes = sum(t.numel() * t.element_size() for _, t in run.actor.weights())
    assert sent_bytes < full_bytes / 5
    prompts = [run.tokenizer(p)["input_ids"] for p in ("12+34=", "9+9=")]
    params = SamplingParams(6, greedy=True)
    stale = own.generate(prompts, [0, 1], 1, params)  # still the initial adapters
    own.sync_weights(sent.items(), version=1)
    run.engine.sync_weights(run.actor.weights(), version=1)
    a = own.generate(prompts, [0, 1], 1, params)
    b = run.engine.generate(prompts, [0, 1], 1, params)
    assert not torch.allclose(stale.logprobs, b.logprobs, atol=1e-3)
    assert torch.equal(a.response_ids, b.response_ids) and a.versions.tolist() == [1, 1]
    assert torch.allclose(a.logprobs, b.logprobs, atol=1e-5)

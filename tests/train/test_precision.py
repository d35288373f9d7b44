"""Mixed precision done right: float32 master weights under bf16 compute, no float16 without
loss scaling, no dropout in RL, and log-probs that match the sampler's."""

from __future__ import annotations

import pytest
import torch

from ascent.configfile import load_config
from ascent.errors import ConfigError
from ascent.models import build_tiny_model
from ascent.train.forward import response_logprobs
from ascent.train.llm_setup import build_run
from tests.train.test_llm_loop import config


def test_float16_compute_is_refused_at_load_time():
    with pytest.raises(ConfigError, match=r'float16 compute needs loss scaling.*"bfloat16"'):
        load_config(None, ['model.dtype="float16"'])


def test_bf16_compute_keeps_float32_master_weights_that_a_tiny_update_moves(tmp_path):
    # An Adam step moves each weight by about lr = 1e-6; a bf16 weight of ~0.02 has a
    # spacing of 2^-13 ~ 1.2e-4 near it, so pure-bf16 training rounds the step away.
    cfg = config(tmp_path, 'model.dtype="bfloat16"', "optim.lr=1e-6", "optim.warmup_ratio=0")
    run = build_run(cfg, torch.device("cpu"))
    assert run.actor.compute_dtype == torch.bfloat16
    params = dict(run.actor.model.named_parameters())
    assert {p.dtype for p in params.values()} == {torch.float32}
    start = {n: p.detach().clone() for n, p in params.items()}
    batch, _ = run.train_batch(run.rollouts.score(*run.rollouts.collect()))
    run.actor.update(batch, step=1)
    moved = sum(int((p.detach() != start[n]).sum()) for n, p in params.items())
    assert moved > 0.5 * sum(p.numel() for p in params.values())

    # The same step applied to bf16 parameters: almost nothing survives the rounding.
    bf16 = {n: w.to(torch.bfloat16) for n, w in start.items()}
    stepped = {n: (bf16[n].float() + (params[n].detach() - start[n])).to(torch.bfloat16)
               for n in bf16}  # fmt: skip
    changed = sum(int((stepped[n] != bf16[n]).sum()) for n in bf16)
    assert changed < 0.05 * sum(w.numel() for w in bf16.values())
    run.close()


def test_bf16_compute_runs_the_forward_in_bf16(tmp_path):
    cfg = config(tmp_path, 'model.dtype="bfloat16"')
    run = build_run(cfg, torch.device("cpu"))
    seen = []
    layer = run.actor.model.model.layers[0].mlp.down_proj
    hook = layer.register_forward_hook(lambda m, i, o: seen.append(o.dtype))
    run.actor.logprobs(run.rollouts.collect()[0])
    hook.remove()
    assert seen and set(seen) == {torch.bfloat16}
    run.close()


def test_lora_dropout_is_off_so_training_log_probs_equal_the_samplers(tmp_path):
    pytest.importorskip("peft")
    model, tok = build_tiny_model()
    model.save_pretrained(tmp_path / "m")
    tok.save_pretrained(tmp_path / "m")
    lora = ["model.lora={enabled=true, r=4, alpha=8, dropout=0.3}", "optim.lr=0.05"]
    cfg = config(tmp_path, f'model.name_or_path="{tmp_path / "m"}"', *lora)
    run = build_run(cfg, torch.device("cpu"))
    dropouts = [m.p for m in run.actor.model.modules() if isinstance(m, torch.nn.Dropout)]
    assert dropouts and set(dropouts) == {0.0}
    batch, _ = run.train_batch(run.rollouts.score(*run.rollouts.collect()))
    run.actor.update(batch, step=1)  # the adapters are no longer zero: dropout would show
    rollout, _ = run.rollouts.collect()  # sampled in eval mode
    run.actor.model.train()
    with torch.no_grad():  # the train-mode forward the loss uses
        again = response_logprobs(run.actor.model, rollout, run.credit.parts.temperature)[0]
    mask = rollout.response_mask.bool()
    assert torch.allclose(again[mask], rollout.logprobs[mask], atol=1e-5)
    run.close()

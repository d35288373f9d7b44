"""The lean MLP and RMSNorm: numerically the gradients of their formulas (finite
differences), equal to transformers' own modules in the forward and to rounding in the
backward, and they keep what the module docstring says and no more."""

from __future__ import annotations

import copy

import pytest
import torch
from transformers import (
    GPT2Config,
    GPT2LMHeadModel,
    LlamaConfig,
    LlamaForCausalLM,
    Qwen2Config,
    Qwen2ForCausalLM,
)

from ascent.models.lean import _GatedMLP, _RMSNorm, lean_activations

H, INTER = 32, 80  # hidden and intermediate sizes of the small models below


def small_llama(seed: int = 0, layers: int = 2) -> LlamaForCausalLM:
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=61, hidden_size=H, intermediate_size=INTER, num_hidden_layers=layers,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
    )  # fmt: skip
    return LlamaForCausalLM(config)


def test_gradients_are_those_of_the_formulas():
    torch.manual_seed(0)
    x = torch.randn(2, 3, 6, dtype=torch.float64, requires_grad=True)
    wg, wu = (torch.randn(5, 6, dtype=torch.float64, requires_grad=True) for _ in range(2))
    wd = torch.randn(6, 5, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda *t: _GatedMLP.apply(*t, torch.float64), (x, wg, wu, wd))
    w = torch.randn(6, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda a, b: _RMSNorm.apply(a, b, 1e-6), (x, w))
    # and the forward is the textbook one
    silu = lambda z: z / (1 + torch.exp(-z))  # noqa: E731
    want = (silu(x @ wg.T) * (x @ wu.T)) @ wd.T
    assert torch.allclose(_GatedMLP.apply(x, wg, wu, wd, torch.float64), want)
    rms = (x.pow(2).mean(-1, keepdim=True) + 1e-6).sqrt()
    assert torch.allclose(_RMSNorm.apply(x, w, 1e-6), w * x / rms)


@pytest.mark.parametrize("autocast", [False, True], ids=["float32", "bf16-autocast"])
def test_a_llama_gives_transformers_outputs_and_gradients(autocast):
    plain = small_llama()
    lean = copy.deepcopy(plain)
    assert lean_activations(lean) == 3 * 2  # an MLP and two norms a layer
    ids = torch.randint(0, 61, (3, 17))
    results = []
    for model in (plain, lean):
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            logits = model(input_ids=ids).logits
        (logits.float().logsumexp(-1) * torch.linspace(-1, 1, 17)).sum().backward()
        results.append((logits.detach(), {n: p.grad for n, p in model.named_parameters()}))
    (want, want_grads), (got, got_grads) = results
    assert torch.equal(got, want)  # the same operations in the same dtypes
    for name, grad in want_grads.items():
        scale = grad.abs().max()
        assert (got_grads[name] - grad).abs().max() <= 1e-5 * scale, name


def saved_bytes(fn, model) -> int:
    """Bytes of the distinct tensors autograd saves while `fn` runs, `model`'s parameters
    left out (they are kept anyway)."""
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    storages: dict[int, int] = {}

    def pack(t):
        storages[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn()
    return sum(n for ptr, n in storages.items() if ptr not in params)


def test_the_mlp_keeps_its_input_and_two_projections():
    model = small_llama(layers=1)
    mlp = model.model.layers[0].mlp
    plain = copy.deepcopy(mlp)
    lean_activations(model)
    x = torch.randn(4, 10, H, requires_grad=True)
    tokens = 4 * 10
    with torch.autocast("cpu", dtype=torch.bfloat16):
        before = saved_bytes(lambda: plain(x), plain)
        after = saved_bytes(lambda: mlp(x), mlp)
    assert after == tokens * (H + 2 * INTER) * 2  # x, gate and up in bf16
    assert before >= tokens * 4 * INTER * 2  # transformers: gate, up, silu and product besides


def test_a_lean_model_keeps_well_under_two_thirds():
    plain = small_llama()
    lean = copy.deepcopy(plain)
    lean_activations(lean)
    ids = torch.randint(0, 61, (4, 40))

    def forward(model):
        def run():
            with torch.autocast("cpu", dtype=torch.bfloat16):
                model.model(input_ids=ids)

        return run

    # 0.63 here, 0.54 for SmolLM2-135M, whose MLP is a larger share of a layer
    assert saved_bytes(forward(lean), lean) < 0.66 * saved_bytes(forward(plain), plain)


def test_lora_projections_keep_transformers_forward_and_train():
    from peft import LoraConfig, get_peft_model

    plain = small_llama()
    lean = copy.deepcopy(plain)
    lean_activations(lean)  # before the adapters, as load_policy does
    config = LoraConfig(r=4, target_modules=["gate_proj", "q_proj"], init_lora_weights=False)
    torch.manual_seed(1)
    plain = get_peft_model(plain, config)
    torch.manual_seed(1)
    lean = get_peft_model(lean, config)
    ids = torch.randint(0, 61, (2, 9))
    outs = []
    for model in (plain, lean):
        logits = model(input_ids=ids).logits
        logits.square().mean().backward()
        grad = next(p.grad for n, p in model.named_parameters() if "gate_proj.lora_A" in n)
        outs.append((logits.detach(), grad))
    assert torch.allclose(outs[0][0], outs[1][0], atol=1e-6)
    assert outs[1][1] is not None and torch.allclose(outs[0][1], outs[1][1], atol=1e-6)


def test_qwen2_blocks_are_lean_and_other_architectures_left_alone():
    config = Qwen2Config(
        vocab_size=61, hidden_size=H, intermediate_size=INTER, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2,
    )  # fmt: skip
    assert lean_activations(Qwen2ForCausalLM(config)) == 6
    gpt2 = GPT2LMHeadModel(GPT2Config(vocab_size=61, n_embd=H, n_layer=2, n_head=4))
    assert lean_activations(gpt2) == 0


def test_without_gradients_the_modules_run_their_own_forward():
    model = small_llama()
    lean_activations(model)
    seen = []
    hook = lambda module, args, out: seen.append(out.grad_fn)  # noqa: E731
    model.model.layers[0].mlp.register_forward_hook(hook)
    ids = torch.randint(0, 61, (1, 5))
    with torch.no_grad():
        model(input_ids=ids)
    model(input_ids=ids)
    assert seen[0] is None
    assert type(seen[1]).__name__ == "_GatedMLPBackward"

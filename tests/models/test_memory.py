"""The peak-memory estimate, part by part, against numbers worked out by hand for a small
made-up Llama, and the parameter count against real models built from the same configs."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from transformers import AutoConfig, LlamaConfig, LlamaForCausalLM

from ascent.models.memory import (
    MIB,
    RUNTIME_MIB,
    RunShape,
    available_mib,
    estimate_memory,
    lora_parameter_count,
    parameter_count,
)

# vocab 100, hidden 16, 2 layers, 4 query heads and 2 key/value heads of 4 dims, MLP 32
SMALL = {
    "vocab_size": 100,
    "hidden_size": 16,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 4,
    "intermediate_size": 32,
    "tie_word_embeddings": True,
}
# By hand: embeddings 100*16 = 1600; a layer: q 16*16 + k 16*8 + v 16*8 + o 16*16 = 768,
# MLP 3*16*32 = 1536, two norms 32 -> 2336, twice = 4672; final norm 16.
SMALL_PARAMS = 1600 + 4672 + 16  # 6288


def small(**changes) -> LlamaConfig:
    return LlamaConfig(**(SMALL | changes))


def real_count(config) -> int:
    with torch.device("meta"):
        return sum(p.numel() for p in LlamaForCausalLM(config).parameters())


def test_parameter_count_of_a_tiny_llama_matches_the_hand_count_and_the_real_model():
    assert parameter_count(small()) == SMALL_PARAMS == real_count(small())


@pytest.mark.parametrize(
    "changes, extra",
    [
        ({"tie_word_embeddings": False}, 100 * 16),  # a separate LM head
        ({"attention_bias": True}, 2 * (16 + 8 + 8 + 16)),  # q, k, v, o biases per layer
        ({"mlp_bias": True}, 2 * (32 + 32 + 16)),  # gate, up, down biases per layer
    ],
)
def test_parameter_count_follows_the_configs_options(changes, extra):
    config = small(**changes)
    assert parameter_count(config) == SMALL_PARAMS + extra == real_count(config)


def test_smollm2_has_134_515_008_parameters(smollm2_dir):
    # by hand: 49152*576 embeddings + 30 layers * (2*576*576 + 2*576*192 + 3*576*1536 + 2*576)
    # + 576 final norm; the LM head is tied
    config = AutoConfig.from_pretrained(smollm2_dir)
    assert parameter_count(config) == 134_515_008 == real_count(config)


def test_an_architecture_outside_the_llama_family_is_counted_on_the_meta_device():
    from transformers import GPT2Config, GPT2LMHeadModel

    config = GPT2Config(vocab_size=100, n_embd=16, n_layer=2, n_head=4, n_positions=32)
    with torch.device("meta"):
        expected = sum(p.numel() for p in GPT2LMHeadModel(config).parameters())
    assert parameter_count(config) == expected


def test_lora_adapters_are_rank_times_in_plus_out_per_targeted_layer():
    # r 2 on q (16 -> 16) and v (16 -> 8) of 2 layers: 2 * (2*(16+16) + 2*(16+8)) = 224
    assert lora_parameter_count(small(), 2, ("q_proj", "v_proj")) == 224
    peft = pytest.importorskip("peft")
    model = peft.get_peft_model(
        LlamaForCausalLM(small()),
        peft.LoraConfig(r=2, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM"),
    )
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    assert trainable == 224


SHAPE = RunShape(micro_batch_size=2, rollout_rows=4, prompt_tokens=3, max_new_tokens=5)
# 16 tokens in a micro-batch (2 rows x 8). Saved per token: a layer 6*16 + 5*16 + 4*32 = 304
# values, 2 layers 608, embedding and final norm 4*16 = 64 -> 672 float32 = 2688 bytes.
ACTIVATIONS = 16 * 2688
LOGITS = 3 * 16 * 100 * 4  # three float32 copies of 16 tokens x 100 logits
KV = 4 * 8 * 2 * 2 * 8 * 4  # 4 rows x 8 tokens x (K, V) x 2 layers x 8 values x float32
TRAINED = 20 * SMALL_PARAMS  # weights, grads, 2 Adam moments, Adam's sqrt buffer: float32
PACKED = 4 * SMALL_PARAMS  # the rollout engine's float32 copy


def test_every_part_matches_the_hand_computation():
    est = estimate_memory(small(), SHAPE)
    assert est.parameters == SMALL_PARAMS
    assert est.trained_state * MIB == pytest.approx(TRAINED)
    assert est.activations * MIB == pytest.approx(ACTIVATIONS)
    assert est.logits * MIB == pytest.approx(LOGITS)
    assert est.kv_cache * MIB == pytest.approx(KV)
    assert est.engine_weights * MIB == pytest.approx(PACKED)
    assert est.reference == est.critic == 0
    # rollouts and updates take turns: the larger of the two phases counts
    phases = max(KV, ACTIVATIONS + LOGITS)
    assert est.total == pytest.approx(RUNTIME_MIB + (TRAINED + PACKED + phases) / MIB)


def test_gradient_checkpointing_keeps_layer_inputs_and_one_layer():
    est = estimate_memory(small(), replace(SHAPE, gradient_checkpointing=True))
    # per token: 2 layer inputs (32) + one layer recomputed (304) + 64 = 400 values
    assert est.activations * MIB == pytest.approx(16 * 400 * 4)
    assert est.logits * MIB == pytest.approx(LOGITS)  # unchanged


def test_bf16_halves_activations_kv_and_frozen_copies_but_not_the_float32_parts():
    shape = replace(SHAPE, compute_bytes=2, reference=True)
    est = estimate_memory(small(), shape)
    assert est.activations * MIB == pytest.approx(ACTIVATIONS / 2)
    assert est.kv_cache * MIB == pytest.approx(KV / 2)
    assert est.reference * MIB == pytest.approx(2 * SMALL_PARAMS)
    assert est.engine_weights * MIB == pytest.approx(PACKED / 2)
    assert est.trained_state * MIB == pytest.approx(TRAINED)
    assert est.logits * MIB == pytest.approx(LOGITS)


def test_lean_layers_keep_norm_inputs_in_float32_and_three_mlp_vectors():
    lean = replace(SHAPE, lean_layers=True)
    # per layer (hidden 16, q 16, kv 8, intermediate 32): the norms' float32 inputs 2*16*4 =
    # 128 bytes; attention: the norm output 16 + q 2*16 + k/v 2*8 = 64 values; MLP input,
    # gate and up 16 + 2*32 = 80 values -> 144 float32 values = 576 bytes; 2 layers 1408
    # bytes, embedding and final norm 64 float32 -> 1664 bytes a token
    assert estimate_memory(small(), lean).activations * MIB == pytest.approx(16 * 1664)
    # bf16: the norm output a copy for each of q, k and v (16 values more), the rest halves
    bf16 = replace(lean, compute_bytes=2)
    per_layer = 128 + (3 * 16 + 32 + 16 + 80) * 2
    want = 16 * (2 * per_layer + 64 * 2)
    assert estimate_memory(small(), bf16).activations * MIB == pytest.approx(want)
    # LoRA on an MLP projection: transformers' MLP (2 input copies, 4 intermediate vectors)
    lora = replace(lean, lora_rank=2, lora_targets=("q_proj", "up_proj"))
    per_layer = 128 + (16 + 32 + 16 + 2 * 16 + 4 * 32) * 4
    assert estimate_memory(small(), lora).activations * MIB == pytest.approx(
        16 * (2 * per_layer + 64 * 4)
    )


def test_lora_a_critic_ranks_and_async_rollouts():
    lora = replace(SHAPE, lora_rank=2, lora_targets=("q_proj", "v_proj"))
    assert estimate_memory(small(), lora).trained_state * MIB == pytest.approx(
        4 * SMALL_PARAMS + 20 * 224  # the frozen float32 base, the adapters' full state
    )
    critic = estimate_memory(small(), replace(SHAPE, critic=True))
    # the critic is the trunk (tied: the embeddings stay) plus a 16 -> 1 value head
    assert critic.critic * MIB == pytest.approx(20 * (SMALL_PARAMS + 17))
    sharded = estimate_memory(small(), replace(SHAPE, world_size=2))
    assert sharded.trained_state * MIB == pytest.approx(TRAINED / 2)
    both = estimate_memory(small(), replace(SHAPE, overlap=True))
    assert both.total == pytest.approx(
        RUNTIME_MIB + (TRAINED + PACKED + KV + ACTIVATIONS + LOGITS) / MIB
    )


def test_available_memory_on_this_cpu_is_positive_and_below_the_total():
    with open("/proc/meminfo") as f:
        total_kb = int(next(line for line in f if line.startswith("MemTotal:")).split()[1])
    available = available_mib(torch.device("cpu"))
    assert available is not None and 0 < available <= total_kb / 1024

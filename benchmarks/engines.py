"""Rollout engines side by side: ascent's transformers engine against vLLM (colocated, in this
process) on the same model and batch shape, and the time to load new weights into each.

    .venv/bin/python benchmarks/engines.py [--rounds 5]

Models: the built-in tiny model (1 M parameters, head size 32) and a wider random
Llama-architecture model (27 M parameters: hidden 512, 8 layers, 8 heads of 64), both with
ascent's character tokenizer, float32, on the CPU. Batch: 8 prompts x 8 completions of at most
32 new tokens, counted as generated (both engines sample the same policy, so their lengths
agree in expectation). One torch thread for both. Figures: generated tokens per second
(median of the rounds, after a warm-up round) and the seconds a weight sync takes (vLLM:
reload_weights into the model runner; the transformers engine: copying into its own model,
the path agentic rollouts use).

On a GPU, vLLM's paged attention, CUDA graphs and continuous batching are what make it the
engine to use; this CPU comparison says what the CPU build costs and that both engines
produce the same policy's samples. Last line: one JSON object.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import torch
from transformers import LlamaConfig, LlamaForCausalLM

from ascent.models import build_tiny_model
from ascent.models.tokenizer import build_char_tokenizer
from ascent.rollout import SamplingParams, TransformersEngine, VLLMEngine
from ascent.train.sharding import full_weights

SHAPE = {"prompts": 8, "n": 8, "new_tokens": 32}


def wide_model() -> tuple[LlamaForCausalLM, object]:
    tok = build_char_tokenizer()
    config = LlamaConfig(
        vocab_size=len(tok), hidden_size=512, intermediate_size=1536, num_hidden_layers=8,
        num_attention_heads=8, num_key_value_heads=8, max_position_embeddings=256,
        pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id,
        bos_token_id=tok.bos_token_id, tie_word_embeddings=True,
    )  # fmt: skip
    torch.manual_seed(0)
    return LlamaForCausalLM(config), tok


def tokens_per_s(engine, prompts, rounds: int) -> float:
    params = SamplingParams(SHAPE["new_tokens"], temperature=1.0)
    rates = []
    for r in range(rounds + 1):
        start = time.perf_counter()
        batch = engine.generate(prompts, list(range(len(prompts))), SHAPE["n"], params,
                                torch.Generator().manual_seed(r))  # fmt: skip
        if r:  # the first round warms up
            rates.append(batch.num_tokens / (time.perf_counter() - start))
    return statistics.median(rates)


def sync_s(engine, model, rounds: int) -> float:
    times = []
    for version in range(1, rounds + 1):
        start = time.perf_counter()
        engine.sync_weights(full_weights(model), version)
        if isinstance(engine, TransformersEngine):  # staged: applied by the next generate
            engine._apply_staged()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def compare(name: str, model, tok, root: Path, rounds: int) -> dict[str, float]:
    path = root / name
    model.save_pretrained(path)
    tok.save_pretrained(path)
    eos = [tok.eos_token_id]
    prompts = [tok(f"{i}+{7 * i}=")["input_ids"] for i in range(SHAPE["prompts"])]
    own = LlamaForCausalLM(model.config)
    own.load_state_dict(model.state_dict())
    hf = TransformersEngine(own.eval(), pad_id=tok.pad_token_id, eos_ids=eos)
    vllm = VLLMEngine(str(path), pad_id=tok.pad_token_id, eos_ids=eos, dtype=torch.float32,
                      device=torch.device("cpu"))  # fmt: skip
    try:
        out = {
            f"{name}_transformers_tok_s": tokens_per_s(hf, prompts, rounds),
            f"{name}_vllm_tok_s": tokens_per_s(vllm, prompts, rounds),
            f"{name}_transformers_sync_s": sync_s(hf, model, rounds),
            f"{name}_vllm_sync_s": sync_s(vllm, model, rounds),
        }
    finally:
        vllm.close()
    out[f"{name}_vllm_over_transformers"] = (
        out[f"{name}_vllm_tok_s"] / out[f"{name}_transformers_tok_s"]
    )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    torch.set_num_threads(1)
    result: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        tiny, tok = build_tiny_model()
        result |= compare("tiny", tiny, tok, root, args.rounds)
        wide, tok = wide_model()
        result |= compare("wide", wide, tok, root, args.rounds)
        params = sum(p.numel() for p in wide.parameters())
    for key, value in result.items():
        print(f"{key}: {value:.4g}")
    print(json.dumps({k: round(v, 4) for k, v in result.items()} | {"wide_params": params}))


if __name__ == "__main__":
    main()

"""GPU check: the GRPO recipe on two models, bf16 compute, FSDP2 over every visible GPU, 20
steps each: a ~0.5 B-parameter Qwen2-architecture model at random, and the shipped real model
`ascent:smollm2-135m` (SmolLM2-135M-Instruct's weights, its BPE tokenizer and chat template, on
the SmolLM2 recipe's task: examples/smollm2_grpo.toml's prompts, 128 new tokens).

    .venv/bin/python benchmarks/gpu_check.py                  # on a CUDA machine
    .venv/bin/python benchmarks/gpu_check.py --cpu --small    # the same script, tiny, on CPU

The model is initialised at random from a Qwen2.5-0.5B-shaped config (hidden 896, 24 layers,
14 heads, 2 key/value heads, vocab 151,936: 494 M parameters) and saved with ascent's
character tokenizer: no hub is needed, and the tokens it samples are random but cost what
real ones cost. The reward is the fraction of digits in a completion (it differs between
completions, so no group is skipped and every update does full work). One rank per GPU
(`ascent train --nproc N`); on one GPU it runs in this process.

Each model runs once with the transformers engine and, when the vllm extra is installed, once
with vLLM (colocated, sleep mode on). Last line: one JSON object with, per model and engine,
tokens_per_s (generated tokens per second, all GPUs) and per GPU, step_s (mean over the steps
after the first 2), peak_memory_gib_per_gpu and the trainer-engine log-prob gap.
`--models random` or `--models smollm2` runs one of the two.

With two GPUs or more and vLLM, the real model also runs on one trainer GPU against a vLLM
server on the next GPU, once per weight sync (`server_disk`: safetensors on disk,
`server_nccl`: GPU to GPU through vLLM's weight-transfer engine), with the seconds each sync
took (`weight_sync_s`); the NCCL path has not run anywhere else.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import sys
import tempfile
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent


def digit_fraction(prompts, completions, **columns):
    """Reward: the share of digits in the completion (never equal across a whole group)."""
    return [sum(c.isdigit() for c in text) / max(1, len(text)) for text in completions]


def build_model(path: Path, small: bool) -> int:
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from ascent.models.tokenizer import build_char_tokenizer

    tokenizer = build_char_tokenizer()
    shape = (
        dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=2,
             num_key_value_heads=1, vocab_size=151_936)
        if small
        else dict(hidden_size=896, intermediate_size=4864, num_hidden_layers=24,
                  num_attention_heads=14, num_key_value_heads=2, vocab_size=151_936)
    )  # fmt: skip
    config = Qwen2Config(
        **shape,
        max_position_embeddings=4096,
        tie_word_embeddings=True,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=tokenizer.bos_token_id,
    )
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(config)
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return sum(p.numel() for p in model.parameters())


SMOLLM2_TASK = {  # examples/smollm2_grpo.toml's task, through the chat template
    "data.prompt_template": '"What is {a} + {b}? Reply with just the number."',
    "data.chat_template": '"on"',
}


def run_recipe(
    root: Path, model: str, engine: str, args: argparse.Namespace, gpus: int, extra: dict
) -> dict:
    """20 GRPO steps of `model` with `engine`; tokens/s, step time and peak memory per GPU."""
    from ascent.cli import main as ascent

    tag = engine + "".join(f"-{v.strip(chr(34))}" for k, v in extra.items() if "vllm." in k)
    name = f"gpu-check-{Path(model).name.replace(':', '-')}-{tag}"
    overrides = {
        "model.name_or_path": f'"{model}"',
        "model.dtype": '"float32"' if args.cpu else '"bfloat16"',
        "run.device": '"cpu"' if args.cpu else '"cuda"',
        "run.output_dir": f'"{root / "runs"}"',
        "run.name": name,
        "rollout.engine": f'"{engine}"',
        "reward.functions": '["gpu_check:digit_fraction"]',
        "train.total_steps": str(args.steps),
        "train.batch_size": "64",
        "train.micro_batch_size": "8",
        "train.eval_steps": "0",
        "train.save_steps": "0",
        "data.eval_size": str(max(8, gpus)),
        "rollout.max_new_tokens": str(args.max_new_tokens),
        "logging.progress": "false",
        **extra,
    }
    cli = ["train", *[a for k, v in overrides.items() for a in ("--set", f"{k}={v}")]]
    if gpus > 1:
        cli += ["--nproc", str(gpus)]
    try:
        ascent(cli)
    except SystemExit as exit_:
        if exit_.code:
            raise
    rows = [json.loads(line) for line in (root / "runs" / name / "metrics.jsonl").open()]
    timed = rows[2:] or rows
    return {
        "tokens_per_s": round(statistics.mean(r["tokens_per_s"] for r in timed), 1),
        "tokens_per_s_per_gpu": round(
            statistics.mean(r["tokens_per_s"] for r in timed) / max(1, gpus), 1
        ),
        "step_s": round(statistics.mean(r["time/rollout"] + r["time/update"] for r in timed), 3),
        "peak_memory_gib_per_gpu": timed[-1].get("memory/peak_gib"),
        "engine_logprob_gap": timed[-1].get("engine/logprob_gap"),
        "weight_sync_s": round(statistics.mean(r.get("time/weight_sync", 0.0) for r in timed), 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--cpu", action="store_true", help="run on the CPU (a smoke test)")
    parser.add_argument("--small", action="store_true", help="a tiny model of the same family")
    parser.add_argument("--max-new-tokens", type=int, default=256)
    parser.add_argument("--models", choices=["both", "random", "smollm2"], default="both")
    args = parser.parse_args()
    gpus = 0 if args.cpu else torch.cuda.device_count()
    if not args.cpu and gpus == 0:
        print("no CUDA GPU visible: run this on a GPU machine, or pass --cpu --small")
        sys.exit(2)
    sys.path.insert(0, str(HERE))  # the reward below is named by import path
    engines = ["transformers"] + (["vllm"] if importlib.util.find_spec("vllm") else [])
    result: dict = {}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        if args.models in ("both", "random"):
            params = build_model(root / "model", args.small)
            result["qwen2_random"] = {"parameters": params} | {
                e: run_recipe(root, str(root / "model"), e, args, gpus, {}) for e in engines
            }
        if args.models in ("both", "smollm2"):
            extra = SMOLLM2_TASK | {"rollout.max_new_tokens": "128"}
            result["smollm2_135m"] = {
                e: run_recipe(root, "ascent:smollm2-135m", e, args, gpus, extra) for e in engines
            }
            if "vllm" in engines and gpus >= 2:  # the trainer on GPU 0, a server on GPU 1
                for sync in ("disk", "nccl"):
                    server = {
                        "rollout.vllm.mode": '"server"',
                        "rollout.vllm.weight_sync": f'"{sync}"',
                    }
                    result["smollm2_135m"][f"server_{sync}"] = run_recipe(
                        root, "ascent:smollm2-135m", "vllm", args, 1, extra | server
                    )
    result |= {
        "device": "cpu" if args.cpu else torch.cuda.get_device_name(0),
        "gpus": gpus,
        "steps": args.steps,
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()

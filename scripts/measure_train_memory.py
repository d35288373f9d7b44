"""Check `ascent.models.memory` against reality: the peak RSS of one forward + backward +
AdamW step of a real model on the CPU, next to the estimate for the same shape.

    .venv/bin/python scripts/measure_train_memory.py [--model ascent:smollm2-135m]
        [--rows 8] [--prompt 32] [--new 32] [--checkpointing]

The step runs in a child process (a fresh one, so its peak RSS is the step's alone): the
policy loaded as the trainer loads it (float32), `response_logprobs` on a micro-batch of
`rows` distinct random prompts and responses, a policy-gradient-shaped loss, backward, and
AdamW's step (which allocates its two moments). No rollout engine or reference model is
built, so the estimate is made without them. Prints one JSON line.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys

CHILD = """
import resource, sys, json
import torch
torch.set_num_threads(1)
from transformers import AutoConfig
from ascent.config.llm_sections import ModelSection
from ascent.models import load_policy
from ascent.train.forward import response_logprobs
from ascent.rollout.batch import RolloutBatch
model_name, rows, p, r, ckpt, steps = sys.argv[1], *map(int, sys.argv[2:7])
def peak():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
runtime = peak()
cfg = ModelSection(name_or_path=model_name, gradient_checkpointing=bool(ckpt))
policy = load_policy(cfg, torch.device("cpu"))
loaded = peak()
vocab = policy.config.vocab_size
g = torch.Generator().manual_seed(0)
batch = RolloutBatch(
    prompt_ids=torch.randint(3, vocab, (rows, p), generator=g),
    prompt_mask=torch.ones(rows, p),
    response_ids=torch.randint(3, vocab, (rows, r), generator=g),
    response_mask=torch.ones(rows, r),
    logprobs=torch.zeros(rows, r),
    group_ids=torch.arange(rows),
    finished=torch.ones(rows, dtype=torch.bool),
    versions=torch.zeros(rows, dtype=torch.long),
)
optimizer = torch.optim.AdamW(policy.parameters(), lr=1e-6)
peaks = []
for _ in range(steps):
    logp, _ = response_logprobs(policy, batch)
    loss = -(logp * torch.randn(rows, 1, generator=g)).mean()
    loss.backward()
    peaks.append(peak())
    optimizer.step()
    optimizer.zero_grad(set_to_none=False)
    peaks.append(peak())
print(json.dumps({"runtime_mib": runtime, "after_load_mib": loaded, "peaks_mib": peaks}))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="ascent:smollm2-135m")
    parser.add_argument("--rows", type=int, default=8)
    parser.add_argument("--prompt", type=int, default=32)
    parser.add_argument("--new", type=int, default=32)
    parser.add_argument("--checkpointing", action="store_true")
    parser.add_argument("--steps", type=int, default=2, help="optimiser steps (peak over all)")
    args = parser.parse_args()

    from transformers import AutoConfig

    from ascent.models import resolve_model_path
    from ascent.models.lean import LEAN_MODEL_TYPES
    from ascent.models.memory import RunShape, estimate_memory
    from ascent.train.forward import FUSED_HEAD_TYPES

    argv = [args.model, args.rows, args.prompt, args.new, int(args.checkpointing), args.steps]
    out = subprocess.run(
        [sys.executable, "-c", CHILD, *map(str, argv)], check=True, capture_output=True, text=True
    )
    measured = json.loads(out.stdout.strip().splitlines()[-1])
    config = AutoConfig.from_pretrained(resolve_model_path(args.model))
    shape = RunShape(
        micro_batch_size=args.rows,
        rollout_rows=args.rows,
        prompt_tokens=args.prompt,
        max_new_tokens=args.new,
        gradient_checkpointing=args.checkpointing,
        engine_copies=0,
        fused_head=config.model_type in FUSED_HEAD_TYPES,  # as the trainer's preflight says
        lean_layers=config.model_type in LEAN_MODEL_TYPES,
    )
    estimate = estimate_memory(config, shape)
    measured["peak_mib"] = max(measured["peaks_mib"])
    ratio = estimate.total / measured["peak_mib"]
    print(
        json.dumps(
            {
                **measured,
                "estimate_mib": round(estimate.total),
                "estimate_parts": estimate.breakdown(),
                "estimate_over_measured": round(ratio, 3),
                "this_process_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            }
        )
    )


if __name__ == "__main__":
    main()

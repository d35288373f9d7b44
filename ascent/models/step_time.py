"""Time of one RL step, predicted from the model's sizes, the run's batch and a device's rates.

A step generates (prefill each prompt once for its group, then one decode step per new token
for every row), scores, then trains: the extra forward passes the algorithm needs (the
trainer's own log-probs where the engine's cannot anchor the clip, the reference's, the
critic's values) and forward + backward over every micro-batch, then the optimiser step. The
training passes cost their arithmetic (2 FLOPs a parameter a token forward, 4 more backward,
2 more when gradient checkpointing recomputes the forward) at the device's matrix rate, over
the tokens they run (a group's prompt once, where the trainer shares it); a
decode step the larger of its arithmetic and the bytes it reads at the device's bandwidth;
the optimiser its bytes. Each adds a fixed cost per operation (a kernel launch and the Python
around it), which is what small models spend most of their time on:

    decode step     max(2 N rows / F_decode, weight + KV-cache bytes / bandwidth)
                    + (OPS_PER_LAYER x layers + OPS_PER_DECODE_STEP) x op
    forward         2 N tokens / F + OPS_PER_LAYER x layers x op, per micro-batch (twice
                    where a group's prompt runs once: the prompts, then the responses)
    forward+backward 3x the forward's (4x with checkpointing)
    optimiser       3 passes over 20 bytes a trained parameter / bandwidth, per update

N counts the LM head's products even where its weights are tied to the embeddings. Rewards,
evaluations and weight syncs are left out: `ascent plan` predicts the training step.
"""

from __future__ import annotations

from dataclasses import dataclass

from ascent.models.hardware import Hardware
from ascent.models.memory import ADAM_BYTES, Dims

OPS_PER_LAYER = 30  # operations one decoder layer's forward runs (lean Llama block, counted)
OPS_PER_DECODE_STEP = 40  # embedding, final norm, head, sampling, stop checks, bookkeeping
BACKWARD_FACTOR = 3  # forward + backward = 3 forwards (2 for the gradients)


@dataclass(frozen=True)
class StepShape:
    """What one rank does in one step, for the time model."""

    rows: int  # completions this rank generates and trains on
    prompts: int  # distinct prompts among them (a group shares its prompt's prefill)
    prompt_tokens: float  # mean prompt length
    new_tokens: int  # decode steps (max_new_tokens: the longest completion sets the pace)
    micro_batch_size: int
    epochs: int  # passes over the batch
    updates: int  # optimiser steps per batch (mini-batches x epochs)
    compute_bytes: int
    checkpointing: bool
    extra_forwards: int  # policy-sized forward passes besides the update (old log-probs, ref)
    critic: bool  # a separate critic: one forward for values, one update
    trained_parameters: int  # parameters the optimiser updates (LoRA: the adapters)
    shared_prefix: bool = False  # the trainer runs each distinct prompt once per micro-batch

    @property
    def trained_tokens(self) -> float:
        """Tokens one pass over the batch runs: every row's prompt and response, or, where
        the completions of a prompt share its forward (train/forward.py), each distinct
        prompt once per micro-batch it appears in, plus every row's response."""
        micro = max(1, -(-self.rows // self.micro_batch_size))
        prompt_rows = min(self.rows, max(self.prompts, micro)) if self.shared_prefix else self.rows
        return prompt_rows * self.prompt_tokens + self.rows * self.new_tokens


@dataclass(frozen=True)
class StepTime:
    """Predicted seconds per part of one step."""

    generate: float
    forwards: float  # old log-probs, reference, critic values
    update: float  # forward + backward over the micro-batches, optimiser steps
    critic: float

    @property
    def total(self) -> float:
        return self.generate + self.forwards + self.update + self.critic


def compute_parameters(d: Dims, parameters: int) -> int:
    """Parameters whose products a token pays for: the embedding lookup is free, the LM head
    is not (tied or not)."""
    return parameters if d.tied else parameters - d.vocab * d.hidden


def predict_step(d: Dims, parameters: int, shape: StepShape, hw: Hardware) -> StepTime:
    """Seconds one step of `shape` takes on `hw` (see the module docstring)."""
    n = compute_parameters(d, parameters)
    cb = shape.compute_bytes
    op = hw.op_s
    layer_ops = OPS_PER_LAYER * d.layers * op
    flops, decode_flops = hw.flops(cb), hw.flops(cb, decode=True)

    prefill = 2 * n * shape.prompts * shape.prompt_tokens / flops + layer_ops
    kv_per_token = 2 * d.layers * d.kv * cb
    mean_context = shape.prompt_tokens + shape.new_tokens / 2
    decode_bytes = parameters * cb + shape.rows * mean_context * kv_per_token
    decode = max(2 * n * shape.rows / decode_flops, decode_bytes / hw.bandwidth)
    decode += layer_ops + OPS_PER_DECODE_STEP * op
    generate = prefill + shape.new_tokens * decode

    tokens = shape.trained_tokens
    micro = max(1, -(-shape.rows // shape.micro_batch_size))

    passes = micro * (2 if shape.shared_prefix else 1)  # the prompts', then the responses'

    def forward(param_count: int) -> float:
        return 2 * param_count * tokens / flops + passes * layer_ops

    backward = BACKWARD_FACTOR + (1 if shape.checkpointing else 0)
    optimiser = 3 * ADAM_BYTES * shape.trained_parameters / hw.bandwidth
    update = backward * forward(n) * shape.epochs + shape.updates * optimiser
    critic_n = n - d.vocab * d.hidden  # no LM head, a one-output value head
    critic = 0.0
    if shape.critic:  # trains every weight, whatever the policy does
        critic_optimiser = 3 * ADAM_BYTES * critic_n / hw.bandwidth
        critic = BACKWARD_FACTOR * forward(critic_n) * shape.epochs
        critic += shape.updates * critic_optimiser
    forwards = shape.extra_forwards * forward(n) + (forward(critic_n) if shape.critic else 0.0)
    return StepTime(generate=generate, forwards=forwards, update=update, critic=critic)

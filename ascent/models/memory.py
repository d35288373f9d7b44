"""Peak memory of an RL run, estimated from the model's config.json before any weight loads.

A run that cannot fit should be refused in one line at start, not killed by the kernel (or a
CUDA out-of-memory error) after minutes of loading and the first rollout. The estimate adds
what one process holds at its peak:

- the trained state: float32 master weights, their gradients, AdamW's two moments and the
  buffer of square roots its step allocates (20 bytes a parameter); with LoRA the frozen
  float32 base weights and 20 bytes per adapter parameter; divided over the ranks FSDP2
  shards them across;
- a frozen reference copy in the compute dtype (`kl_coef > 0`, unless LoRA's adapters-off
  policy serves as one), a separate critic's trained state;
- the rollout engine's packed copy of the weights in the compute dtype (two with async
  rollouts, which keep a model of their own) and its KV cache: every row of this rank's batch
  x (prompt + max_new_tokens) x 2 (K, V) x layers x kv_heads x head_dim (an upper bound
  for ascent's own engine, which holds each prompt's part once for its group);
- for one micro-batch (micro_batch_size rows x (prompt + max_new_tokens) tokens, or where
  the rows of a group share their prompt's forward (train/forward.py), the prompt once per
  group plus every row's new tokens and its own gathered copy of the prompt's K/V): the
  activations autograd saves (per token and layer, for transformers' Llama block: 6
  hidden-size vectors around the two RMSNorms and residuals, 5 query-size ones for attention
  with K/V expanded to every head, 4 intermediate-size ones for the gated MLP; for the lean
  block the trainer runs (lean.py) the norms' float32 inputs, the norm output, q and K/V
  twice for attention, the MLP's input, gate and up; with gradient checkpointing each
  layer's input plus one layer's recomputation), and the logits, B x T x vocab in float32,
  LOGIT_COPIES times (the logits, the log-softmax's gradient and the gradient of the full
  logits live together during the backward): with gradient checkpointing they dominate for a
  large vocabulary (SmolLM2's 49k: 590 KB a token, against 1 KB of layer inputs a layer).
  Where the trainer computes log-probs with the fused head (Llama-family models on one
  rank), only a chunk of CHUNK_ELEMENTS float32 logits and its softmax are alive at once;
- the runtime itself (the interpreter, torch and transformers' code): RUNTIME_MIB.

Rollouts and updates take turns, so only the larger of the KV cache and the micro-batch's
activations + logits counts, unless rollouts run beside the trainer (async).

Attention is assumed to be memory-efficient (SDPA / flash: no T x T matrix is kept), as it is
with transformers' default; an eager attention would add B x heads x T^2 per layer.

Checked against measurements (scripts/measure_train_memory.py: SmolLM2-135M, float32 on a
CPU, 8 rows, lean layers and the fused head as the trainer runs them, the peak RSS over two
forward + backward + AdamW steps, the second being the first with Adam's moments in place):

    tokens a row   checkpointing   measured     estimated
    64             no              3,569        3,587 MiB   (+0.5%)
    256            no              5,578        4,880 MiB   (-12.5%)
    256            yes             3,855        3,449 MiB   (-10.5%)

The shortfall at 256 tokens is memory the C allocator keeps after tensors are freed (the
activations themselves measure as estimated with saved-tensor hooks), which grows with the
size and number of a step's temporaries; it is not modelled.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ascent.models.fused_head import CHUNK_ELEMENTS

MIB = 1 << 20
RUNTIME_MIB = 420  # RSS of a process that has imported torch and transformers (measured)
# float32 weights, gradients, AdamW's two moments, and the square roots of the second moments
# its (foreach) step allocates: a buffer the size of the parameters, which the allocator keeps
ADAM_BYTES = 20
LOGIT_COPIES = 3  # B x T x vocab float32 tensors alive at once in the backward (see above)
LLAMA_LIKE = ("llama", "mistral", "qwen2")  # decoder blocks parameter_count counts exactly
MLP_PROJECTIONS = ("gate_proj", "up_proj", "down_proj")  # LoRA on one: transformers' MLP
# Linear layers of a Llama block: name -> (input size, output size) of one, as a function of
# (hidden, query size, key/value size, intermediate); for LoRA adapter sizes.
_LINEARS = {
    "q_proj": lambda h, q, k, i: (h, q),
    "k_proj": lambda h, q, k, i: (h, k),
    "v_proj": lambda h, q, k, i: (h, k),
    "o_proj": lambda h, q, k, i: (q, h),
    "gate_proj": lambda h, q, k, i: (h, i),
    "up_proj": lambda h, q, k, i: (h, i),
    "down_proj": lambda h, q, k, i: (i, h),
}


@dataclass(frozen=True)
class Dims:
    """The sizes of a decoder-only transformer the estimate needs."""

    vocab: int
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    tied: bool

    @property
    def q(self) -> int:
        return self.heads * self.head_dim

    @property
    def kv(self) -> int:
        return self.kv_heads * self.head_dim


def dims(config: Any) -> Dims:
    """The sizes from a transformers config (names other than Llama's are mapped by the
    config's own `attribute_map`: GPT-2's n_embd reads as hidden_size)."""
    hidden = int(config.hidden_size)
    heads = int(config.num_attention_heads)
    return Dims(
        vocab=int(config.vocab_size),
        hidden=hidden,
        layers=int(config.num_hidden_layers),
        heads=heads,
        kv_heads=int(getattr(config, "num_key_value_heads", None) or heads),
        head_dim=int(getattr(config, "head_dim", None) or hidden // heads),
        intermediate=int(getattr(config, "intermediate_size", None) or 4 * hidden),
        tied=bool(getattr(config, "tie_word_embeddings", True)),
    )


def llama_parameter_count(config: Any) -> int:
    """Parameters of a Llama-family causal LM, by hand from its config: embeddings, per layer
    the q/k/v/o projections (and their biases: `attention_bias`, or Qwen2's on q/k/v), the
    gated MLP and two RMSNorms, the final norm, and an untied LM head."""
    d = dims(config)
    h, q, kv, i = d.hidden, d.q, d.kv, d.intermediate
    attention = 2 * h * q + 2 * h * kv
    if getattr(config, "attention_bias", False):
        attention += q + 2 * kv + h
    elif getattr(config, "model_type", "") == "qwen2":
        attention += q + 2 * kv
    mlp = 3 * h * i + (2 * i + h if getattr(config, "mlp_bias", False) else 0)
    per_layer = attention + mlp + 2 * h
    head = 0 if d.tied else d.vocab * h
    return d.vocab * h + d.layers * per_layer + h + head


def parameter_count(config: Any) -> int:
    """Parameters of the model `config` describes, without loading weights: by hand for the
    Llama family; otherwise the model built on the meta device (no memory) and counted; for
    a model transformers cannot build, 12 x layers x hidden^2 plus the embeddings."""
    if getattr(config, "model_type", None) in LLAMA_LIKE:
        return llama_parameter_count(config)
    try:
        import torch
        from transformers import AutoModelForCausalLM

        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(config)
        return sum(p.numel() for p in model.parameters())
    except Exception:  # any model transformers cannot build (custom code): the rough form
        d = dims(config)
        return 12 * d.layers * d.hidden**2 + d.vocab * d.hidden * (1 if d.tied else 2)


def lora_parameter_count(config: Any, rank: int, targets: tuple[str, ...]) -> int:
    """Adapter parameters: rank x (in + out) for every targeted linear layer of every block
    (names Llama's blocks do not have add nothing)."""
    d = dims(config)
    sizes = [_LINEARS[t](d.hidden, d.q, d.kv, d.intermediate) for t in targets if t in _LINEARS]
    return d.layers * sum(rank * (n_in + n_out) for n_in, n_out in sizes)


@dataclass(frozen=True)
class RunShape:
    """What the run asks of the model: the settings the estimate reads (from [train],
    [rollout], [model], [algorithm] and [critic]), for one rank."""

    micro_batch_size: int  # rows of one forward/backward
    rollout_rows: int  # rows one generate call decodes at once (this rank's batch)
    prompt_tokens: int  # the longest prompt
    max_new_tokens: int
    compute_bytes: int = 4  # bytes of the compute dtype: 4 float32, 2 bfloat16 / float16
    gradient_checkpointing: bool = False
    lora_rank: int = 0  # 0: every weight trains
    lora_targets: tuple[str, ...] = ()
    reference: bool = False  # a frozen reference model in the compute dtype
    critic: bool = False  # a separate critic of the policy's architecture
    engine_copies: int = 1  # weight copies the rollout engine holds (0: it runs elsewhere)
    overlap: bool = False  # rollouts run beside the updates (async): their peaks add up
    world_size: int = 1  # ranks the trained state is sharded over
    max_micro_tokens: int | None = None  # [train] max_tokens_per_micro_batch
    fused_head: bool = False  # log-probs from hidden states chunk by chunk (fused_head.py)
    lean_layers: bool = False  # a Llama block's MLP and norms keep less (lean.py)
    shared_prefix_group: int = 1  # rows that share one prompt's forward (1: none share)


@dataclass(frozen=True)
class MemoryEstimate:
    """Each part of the peak, in MiB."""

    parameters: int
    trained_state: float  # weights + grads + Adam (LoRA: frozen base + adapters' state)
    reference: float
    critic: float
    engine_weights: float
    kv_cache: float
    activations: float
    logits: float
    overlap: bool
    runtime: float = RUNTIME_MIB

    @property
    def total(self) -> float:
        fixed = self.trained_state + self.reference + self.critic + self.engine_weights
        update = self.activations + self.logits
        rollout_or_update = self.kv_cache + update if self.overlap else max(self.kv_cache, update)
        return self.runtime + fixed + rollout_or_update

    def breakdown(self) -> str:
        parts = [
            ("weights+grads+Adam", self.trained_state),
            ("reference", self.reference),
            ("critic", self.critic),
            ("rollout weights", self.engine_weights),
            ("KV cache", self.kv_cache),
            ("activations", self.activations),
            ("logits", self.logits),
            ("runtime", self.runtime),
        ]
        return ", ".join(f"{name} {mib:,.0f}" for name, mib in parts if mib >= 0.5)


def layer_bytes_per_token(d: Dims, compute_bytes: int, lean: bool, lean_mlp: bool) -> float:
    """Bytes one layer keeps per token. transformers' own Llama block (see the module
    docstring): 6 hidden + 5 query + 4 intermediate vectors in the compute dtype. With the
    lean MLP and norms (lean.py, measured within 1% on SmolLM2 in float32 and bf16): each
    norm's float32 input; for attention, the norm's output (under autocast a copy for each
    of q, k, v), q and k/v twice; for the MLP its input, gate and up (transformers' MLP,
    where LoRA wraps its projections: two input copies and four intermediate vectors)."""
    if not lean:
        return (6 * d.hidden + 5 * d.q + 4 * d.intermediate) * compute_bytes
    norm_outputs = (3 if compute_bytes < 4 else 1) * d.hidden
    attention = norm_outputs + 2 * d.q + 2 * d.kv
    mlp = d.hidden + 2 * d.intermediate if lean_mlp else 2 * d.hidden + 4 * d.intermediate
    return 2 * d.hidden * 4 + (attention + mlp) * compute_bytes


def activation_bytes_per_token(
    d: Dims, compute_bytes: int, checkpointing: bool, lean: bool = False, lean_mlp: bool = True
) -> float:
    """Bytes autograd keeps per token of a micro-batch for the backward: every layer's, or
    with gradient checkpointing each layer's input plus one layer recomputed; the embedding
    output and the final norm's 3 hidden vectors besides."""
    layer = layer_bytes_per_token(d, compute_bytes, lean, lean_mlp)
    inputs = d.layers * d.hidden * compute_bytes
    kept = inputs + layer if checkpointing else d.layers * layer
    return kept + 4 * d.hidden * compute_bytes


def estimate_memory(config: Any, shape: RunShape) -> MemoryEstimate:
    """The peak memory of training `config` as `shape` says, part by part (MiB)."""
    d = dims(config)
    n = parameter_count(config)
    world = max(1, shape.world_size)
    if shape.lora_rank:
        adapters = lora_parameter_count(config, shape.lora_rank, shape.lora_targets)
        trained = (4 * n + ADAM_BYTES * adapters) / world
    else:
        trained = ADAM_BYTES * n / world
    frozen = n * shape.compute_bytes
    critic_params = n - (0 if d.tied else d.vocab * d.hidden) + d.hidden + 1  # no LM head
    tokens = shape.prompt_tokens + shape.max_new_tokens
    micro_tokens = shape.micro_batch_size * tokens
    if shape.max_micro_tokens is not None:
        micro_tokens = min(micro_tokens, max(shape.max_micro_tokens, tokens))
    if shape.fused_head:  # a chunk's float32 logits and their softmax, whatever the batch
        logits = 2 * min(micro_tokens * d.vocab, CHUNK_ELEMENTS) * 4
    else:
        logits = LOGIT_COPIES * micro_tokens * d.vocab * 4
    kv_per_token = 2 * d.layers * d.kv * shape.compute_bytes
    lean_mlp = not (shape.lora_rank and set(shape.lora_targets) & set(MLP_PROJECTIONS))
    per_token = activation_bytes_per_token(
        d, shape.compute_bytes, shape.gradient_checkpointing, shape.lean_layers, lean_mlp
    )
    activations = micro_tokens * per_token
    if shape.shared_prefix_group > 1:  # each prompt's layers once, its K/V gathered per row
        rows = max(1, micro_tokens // tokens)
        prompts = -(-rows // shape.shared_prefix_group)
        kept = prompts * shape.prompt_tokens + rows * shape.max_new_tokens
        activations = kept * per_token + rows * shape.prompt_tokens * kv_per_token
    return MemoryEstimate(
        parameters=n,
        trained_state=trained / MIB,
        reference=(frozen / world if shape.reference else 0) / MIB,
        critic=(ADAM_BYTES * critic_params / world if shape.critic else 0) / MIB,
        engine_weights=shape.engine_copies * frozen / MIB,
        kv_cache=(shape.rollout_rows * tokens * kv_per_token if shape.engine_copies else 0) / MIB,
        activations=activations / MIB,
        logits=logits / MIB,
        overlap=shape.overlap,
    )


def available_mib(device: Any) -> float | None:
    """Memory this process may use on `device` (a torch.device): the GPU's total memory, or
    on a CPU the kernel's MemAvailable (free memory plus what it can reclaim); None when
    unknown (not Linux)."""
    if getattr(device, "type", "cpu") == "cuda":
        import torch

        index = device.index if device.index is not None else torch.cuda.current_device()
        return torch.cuda.get_device_properties(index).total_memory / MIB
    try:
        with open("/proc/meminfo", encoding="ascii") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) / 1024  # kB
    except OSError:
        return None
    return None

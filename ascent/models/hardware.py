"""What a device can do, for `ascent plan`: memory, matrix-product rate, memory bandwidth, and
the fixed cost of one operation.

Named GPUs are declared from their published data-sheet figures (dense, no sparsity), scaled
by the share of peak that training and decoding typically reach (MATMUL_EFFICIENCY,
BANDWIDTH_EFFICIENCY: a plan, not a promise). This CPU is measured on the spot, at the shapes
of the model being planned (shrunk where they are large) in its compute dtype, in about a
second: the rates a run will actually see.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

import torch

from ascent.models.memory import MIB, available_mib

MATMUL_EFFICIENCY = 0.4  # share of a GPU's peak matrix rate a training step reaches (MFU)
BANDWIDTH_EFFICIENCY = 0.6  # share of its memory bandwidth decoding reaches
GPU_OP_S = 12e-6  # a kernel launch and the Python around it, per operation


@dataclass(frozen=True)
class Hardware:
    """Rates of one device. `matmul_flops` maps bytes per element of the compute dtype (4:
    float32, 2: bfloat16) to floating-point operations per second for the training step's
    products; `decode_flops` the same for the thin products of decoding."""

    name: str
    memory_mib: float
    matmul_flops: dict[int, float]
    decode_flops: dict[int, float]
    bandwidth: float  # bytes per second
    op_s: float  # seconds of fixed cost per operation
    measured: bool  # measured here (True) or declared from a data sheet

    def flops(self, compute_bytes: int, decode: bool = False) -> float:
        rates = self.decode_flops if decode else self.matmul_flops
        return rates.get(compute_bytes) or next(iter(rates.values()))


def _gpu(name: str, memory_gb: float, bf16_tflops: float, tf32_tflops: float, tb_s: float):
    bf16, fp32 = bf16_tflops * 1e12 * MATMUL_EFFICIENCY, tf32_tflops * 1e12 * MATMUL_EFFICIENCY
    rates = {2: bf16, 4: fp32}
    return Hardware(
        name, memory_gb * 1e9 / MIB, rates, rates, tb_s * 1e12 * BANDWIDTH_EFFICIENCY, GPU_OP_S,
        measured=False,
    )  # fmt: skip


# Dense tensor-core rates (TF32 for float32 matmuls, as torch allows on Ampere and later with
# `allow_tf32`) and HBM bandwidth, SXM parts: NVIDIA's data sheets.
GPUS: dict[str, Hardware] = {
    "h100": _gpu("NVIDIA H100 SXM 80GB", 80, 989, 494, 3.35),
    "h200": _gpu("NVIDIA H200 SXM 141GB", 141, 989, 494, 4.8),
    "a100": _gpu("NVIDIA A100 SXM 80GB", 80, 312, 156, 2.039),
}
HARDWARE_NAMES = ("cpu", *GPUS)


# A large model's shapes are shrunk for measuring, so that measuring takes about a second even
# where bfloat16 is emulated: the widest side, and the most arithmetic in one product.
MEASURED_SIDE = 2048
MEASURED_FLOPS = 5e7
BURSTS = 5  # timed bursts per rate; the fastest counts (other jobs slow some of them down)


def _best(work, per_burst: float, budget_s: float) -> float:
    """`per_burst` / the shortest time `work()` took in BURSTS bursts (each repeated until
    budget_s / BURSTS passes), so that a busy moment on a shared machine does not count."""
    work()  # warm up: the first call sets up the kernel
    best = float("inf")
    for _ in range(BURSTS):
        done, start = 0, time.perf_counter()
        while (elapsed := time.perf_counter() - start) < budget_s / BURSTS or done < 1:
            work()
            done += 1
        best = min(best, elapsed / done)
    return per_burst / best


def _rate(rows: int, inner: int, cols: int, dtype: torch.dtype, budget_s: float) -> float:
    """FLOP/s of (rows x inner) @ (inner x cols) products on this CPU (a large model's shapes
    shrunk to a product of at most MEASURED_FLOPS)."""
    inner, cols = min(inner, MEASURED_SIDE), min(cols, MEASURED_SIDE)
    rows = max(1, min(rows, int(MEASURED_FLOPS // (2 * inner * cols))))
    a = torch.randn(rows, inner, dtype=dtype)
    b = torch.randn(inner, cols, dtype=dtype)
    return _best(lambda: a @ b, 2 * rows * inner * cols, budget_s)


def _bandwidth(budget_s: float) -> float:
    """Bytes per second this CPU copies between two 64 MiB buffers (read + write)."""
    src = torch.ones(16 << 20)
    dst = torch.empty_like(src)
    return _best(lambda: dst.copy_(src), 2 * src.numel() * 4, budget_s)


def _op_seconds() -> float:
    """The fixed cost of one small operation (a Linear on one row), as a layer pays it."""
    layer = torch.nn.Linear(8, 8)
    x = torch.randn(1, 8)
    with torch.no_grad():
        return 1 / _best(lambda: layer(x), 1, 0.05)


def measure_cpu(
    hidden: int, intermediate: int, tokens: int, rows: int, dtype: torch.dtype = torch.float32
) -> Hardware:
    """This CPU's rates at the model's shapes in its compute `dtype`: the training step's
    products over `tokens` tokens at a time, decoding's over `rows` rows."""
    size = torch.empty((), dtype=dtype).element_size()
    matmul = {size: _rate(max(1, tokens), hidden, intermediate, dtype, 0.15)}
    decode = {size: _rate(max(1, rows), hidden, intermediate, dtype, 0.1)}
    memory = available_mib(torch.device("cpu")) or 0.0
    return Hardware(
        f"this CPU ({os.cpu_count()} cores, {torch.get_num_threads()} threads)",
        memory,
        matmul,
        decode,
        _bandwidth(0.1),
        _op_seconds(),
        measured=True,
    )

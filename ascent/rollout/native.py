"""The decoder's C kernels (`decode_kernels.c`: decode attention, RMSNorm and the token draw,
for bf16 on a CPU): built once per machine by its own C compiler, cached, and loaded with
ctypes.

Why not a torch extension: building against torch's headers takes minutes on 2 cores and
needs ninja; this plain C file builds in about 5 s with `cc` and runs on torch's own OpenMP
threads (it links `libgomp.so.1`, which resolves to the copy torch has already loaded). Where
there is no compiler, the build fails, or the built kernels disagree with float64
computations on a small case, decoding stays on torch operations and one warning says why.

The build is keyed by the source, the flags, the compiler's version and the CPU's model and
flags (`-march=native`), and written under a temporary name then renamed, so processes that
start at once never load a half-written library.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import logging
import os
import platform
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor

from ascent.models.tiny import cache_dir

log = logging.getLogger(__name__)

SOURCE = Path(__file__).with_name("decode_kernels.c")
FLAGS = ("-O3", "-march=native", "-fopenmp", "-fPIC", "-shared", "-fno-math-errno")
LIBS = ("-lm",)  # after the source, where the linker looks for what it needs
BLOCK = 32  # the kernel reads positions in blocks of 32: caches are padded to a multiple
HEAD_DIMS = (32, 64, 128)  # the kernel's compiled shapes: these head sizes, 1-8 query heads
MAX_GROUP = 8  # per key/value head
BUILD_TIMEOUT_S = 300


def padded(positions: int) -> int:
    """Positions rounded up to whole blocks (the length of a tiled key cache)."""
    return -(-positions // BLOCK) * BLOCK


def tiled(keys: Tensor, length: int | None = None) -> Tensor:
    """(..., P, d) keys as the kernel reads them: (..., padded / 32, d, 32), each tile of 32
    positions transposed, zeros past P (`length` positions in all, at least P)."""
    *lead, p, d = keys.shape
    out = keys.new_zeros((*lead, padded(length or p) // BLOCK, d, BLOCK))
    whole = p // BLOCK * BLOCK
    out[..., : p // BLOCK, :, :] = keys[..., :whole, :].unflatten(-2, (-1, BLOCK)).transpose(-1, -2)
    if p > whole:
        out[..., p // BLOCK, :, : p - whole] = keys[..., whole:, :].transpose(-1, -2)
    return out


def untiled(keys: Tensor) -> Tensor:
    """The inverse of `tiled`: (..., tiles, d, 32) -> (..., tiles x 32, d)."""
    return keys.transpose(-1, -2).flatten(-3, -2)


def c_compiler() -> str | None:
    """The C compiler to build with: $CC, else `cc`, else `gcc`; None where there is none."""
    return os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")


def _cpu_identity() -> str:
    """What -march=native compiles for: the CPU's model name and feature flags."""
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return platform.processor() or platform.machine()
    wanted = [ln for ln in lines if ln.startswith(("model name", "flags"))]
    return "\n".join(dict.fromkeys(wanted))  # each distinct line once (one per core)


def _build(compiler: str) -> Path:
    """The kernel's shared library for this machine, compiled on first use."""
    version = subprocess.run(
        [compiler, "--version"], capture_output=True, text=True, timeout=60, check=True
    ).stdout.partition("\n")[0]
    key = hashlib.sha256(
        "\0".join([SOURCE.read_text(), *FLAGS, *LIBS, version, _cpu_identity()]).encode()
    ).hexdigest()[:16]
    target = cache_dir() / "native" / f"decode_kernels-{key}.so"
    if target.is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, suffix=".so.tmp")
    os.close(fd)
    try:
        started = time.perf_counter()
        done = subprocess.run(
            [compiler, *FLAGS, str(SOURCE), "-o", tmp, *LIBS],
            capture_output=True,
            text=True,
            timeout=BUILD_TIMEOUT_S,
        )
        if done.returncode != 0:
            first = (done.stderr.strip().splitlines() or ["no message"])[0]
            raise RuntimeError(f"{compiler} failed: {first}")
        os.replace(tmp, target)
        log.info("built the decode kernels in %.1f s: %s",
                 time.perf_counter() - started, target)  # fmt: skip
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return target


@dataclass(frozen=True)
class LayerCache:
    """One layer's keys and values as the attention kernel reads them."""

    prompt_keys: Tensor  # (U, kv, Pp / 32, d, 32): `tiled`
    prompt_values: Tensor  # (U, kv, P, d)
    keys: Tensor  # (R, kv, Tp / 32, d, 32): each row's own, `tiled`
    values: Tensor  # (R, kv, T, d)


@dataclass(frozen=True)
class Rows:
    """Which rows of the caches a step decodes, and where their prompts start."""

    active: Tensor  # (B,) each active row's place among the U x n (prompt-major)
    start: Tensor  # (U,) each prompt's first position that is not padding (left-padded)
    n: int  # rows per prompt


class DecodeKernels:
    """The kernels, called with tensors (layouts in `decode_kernels.c`)."""

    def __init__(self, library: ctypes.CDLL) -> None:
        pointer, size = ctypes.c_void_p, ctypes.c_int64
        self.fn = library.decode_attention
        self.fn.argtypes = [pointer] * 11 + [size] * 10 + [ctypes.c_float, ctypes.c_int]
        self.fn.restype = ctypes.c_int
        self.norm = library.rms_norm
        self.norm.argtypes = [pointer] * 3 + [size] * 2 + [ctypes.c_float, ctypes.c_int]
        self.norm.restype = None
        self.sampler = library.sample_rows
        self.sampler.argtypes = [pointer, size, size, ctypes.c_float, pointer, ctypes.c_int,
                                 pointer, pointer, pointer, ctypes.c_int]  # fmt: skip
        self.sampler.restype = None

    def sample(
        self, logits: Tensor, temperature: float, uniform: Tensor | None
    ) -> tuple[Tensor, Tensor]:
        """(tokens, log-probs) of one draw per row of bf16 logits (B, V) from
        softmax(logits / temperature) at the row's uniform number in [0, 1) (None: greedy,
        the first of the largest)."""
        if logits.dtype != torch.bfloat16 or logits.device.type != "cpu" or logits.dim() != 2:
            raise ValueError("the native sampler takes (B, V) bf16 logits on a CPU")
        logits = logits.contiguous()
        b, v = logits.shape
        tokens = torch.empty(b, dtype=torch.long)
        logp = torch.empty(b, dtype=torch.float32)
        sums = torch.empty(b * -(-v // 256), dtype=torch.float32)
        draws = torch.zeros(b) if uniform is None else uniform.float().contiguous()
        self.sampler(
            logits.data_ptr(), b, v, 1.0 / temperature, draws.data_ptr(), int(uniform is None),
            tokens.data_ptr(), logp.data_ptr(), sums.data_ptr(), torch.get_num_threads(),
        )  # fmt: skip
        return tokens, logp

    def rms_norm(self, weight: Tensor, eps: float, x: Tensor) -> Tensor:
        """The Llama RMSNorm of bf16 x over its last dimension (float32 inside, one rounding)."""
        if x.dtype != torch.bfloat16 or weight.dtype != torch.bfloat16 or x.device.type != "cpu":
            raise ValueError(f"the native rms_norm takes bf16 on a CPU, not {x.dtype} {x.device}")
        x = x.contiguous()
        out = torch.empty_like(x)
        h = x.shape[-1]
        self.norm(x.data_ptr(), weight.data_ptr(), out.data_ptr(), x.numel() // h, h, eps,
                  torch.get_num_threads())  # fmt: skip
        return out

    @staticmethod
    def supports(heads: int, kv_heads: int, head_dim: int) -> bool:
        return head_dim in HEAD_DIMS and heads % kv_heads == 0 and heads // kv_heads <= MAX_GROUP

    def attention(
        self,
        qkv: Tensor,
        rotary: tuple[Tensor, Tensor],
        cache: LayerCache,
        rows: Rows,
        out: Tensor,
        scratch: Tensor,
        *,
        t: int,
        scale: float,
    ) -> Tensor:
        """Attention of this step's queries (qkv: (B, heads + 2 kv, d), bf16) over each row's
        prompt and own positions 0..t, after writing the step's key and value at t. rotary:
        (cos, sin with rotate_half's sign), (B, d) float32."""
        b, width, d = qkv.shape
        kv, length = cache.values.shape[1], cache.values.shape[2]
        heads = width - 2 * kv
        p = cache.prompt_values.shape[2]
        prompt_length = cache.prompt_keys.shape[-3] * BLOCK
        own_length = cache.keys.shape[-3] * BLOCK
        caches = (cache.prompt_keys, cache.prompt_values, cache.keys, cache.values)
        tensors = (qkv, *rotary, *caches, rows.active, rows.start, out)
        if not all(x.is_contiguous() and x.device.type == "cpu" for x in tensors):
            raise ValueError("decode attention takes contiguous CPU tensors")
        if qkv.dtype != torch.bfloat16 or rotary[0].dtype != torch.float32:
            raise ValueError(f"decode attention takes bf16 projections, not {qkv.dtype}")
        threads = torch.get_num_threads()
        if scratch.numel() < threads * (heads // kv) * (prompt_length + own_length):
            raise ValueError("decode attention: scratch too small for the thread count")
        status = self.fn(
            *(x.data_ptr() for x in (*tensors, scratch)),
            b, rows.n, heads, kv, d, p, prompt_length, length, own_length, t,
            scale, threads,
        )  # fmt: skip
        if status != 0:
            raise ValueError(f"decode attention has no kernel for {heads} heads over {kv} x {d}")
        return out


def reference_attention(
    qkv: Tensor, rotary: tuple[Tensor, Tensor], cache: LayerCache, rows: Rows, t: int, scale: float
) -> tuple[Tensor, Tensor]:
    """What the kernel computes, row by row in float64 from the same inputs (the cache's
    positions before t as given, the step's rotated key at t): (B, heads, d) outputs and the
    (B, kv, d) rotated keys. The kernel's check at load time and its tests compare with it."""
    b, width, d = qkv.shape
    kv = cache.values.shape[1]
    heads, g, p = width - 2 * kv, (width - 2 * kv) // kv, cache.prompt_values.shape[2]
    x = qkv.double()
    c, s = rotary[0].double()[:, None], rotary[1].double()[:, None]
    half = d // 2
    rotated = x * c + torch.cat([x[..., half:], x[..., :half]], dim=-1) * s
    q, k, v = rotated[:, :heads], rotated[:, heads : heads + kv], x[:, heads + kv :]
    k = k.to(torch.bfloat16).double()  # the cache holds the key in bf16
    out = torch.empty(b, heads, d, dtype=torch.float64)
    for i in range(b):
        r = int(rows.active[i])
        u, first = r // rows.n, int(rows.start[r // rows.n])
        for j in range(kv):
            key_list = [untiled(cache.prompt_keys[u, j])[first:p].double(),
                        untiled(cache.keys[r, j])[:t].double(), k[i, j][None]]  # fmt: skip
            value_list = [cache.prompt_values[u, j, first:p].double(),
                          cache.values[r, j, :t].double(), v[i, j][None]]  # fmt: skip
            weights = torch.softmax(q[i, j * g : (j + 1) * g] @ torch.cat(key_list).T * scale, -1)
            out[i, j * g : (j + 1) * g] = weights @ torch.cat(value_list)
    return out, k


def _self_check(kernels: DecodeKernels) -> float:
    """The kernels' largest error, relative to the outputs' largest magnitude, on a small
    random case against float64 computations:
    attention over 2 prompts x 2 rows (GQA 4 over 2, ragged prompts, a row set out of order)
    against `reference_attention`, and RMSNorm."""
    gen = torch.Generator().manual_seed(0)
    u, n, kv, g, d, p, length, t = 2, 2, 2, 2, 64, 37, 40, 33
    bf = torch.bfloat16

    def rand(*shape: int) -> Tensor:
        return torch.randn(*shape, generator=gen).to(bf)

    cache = LayerCache(tiled(rand(u, kv, p, d)), rand(u, kv, p, d),
                       tiled(rand(u * n, kv, length, d)), rand(u * n, kv, length, d))  # fmt: skip
    rows = Rows(torch.tensor([3, 0, 2]), start=torch.tensor([0, 5]), n=n)
    qkv = rand(3, kv * g + 2 * kv, d)
    angle = torch.rand(3, d, generator=gen) * 6
    rotary = angle.cos(), angle.sin()
    out = torch.empty(3, kv * g * d, dtype=bf)
    scratch = torch.empty(torch.get_num_threads() * g * (padded(p) + padded(length)))
    expected, _ = reference_attention(qkv, rotary, cache, rows, t, d**-0.5)
    kernels.attention(qkv, rotary, cache, rows, out, scratch, t=t, scale=d**-0.5)
    error = (out.double().view_as(expected) - expected).abs().max().item()
    x, weight = rand(3, 2, 40), rand(40)
    mean_square = x.double().pow(2).mean(-1, keepdim=True)
    norm = x.double() * torch.rsqrt(mean_square + 1e-5) * weight.double()
    norm_error = (kernels.rms_norm(weight, 1e-5, x).double() - norm).abs().max() / norm.abs().max()
    return max(error / expected.abs().max().item(), norm_error.item())


@functools.cache
def decode_kernels() -> DecodeKernels | None:
    """The kernels for this machine, or None (and one warning saying why) where they cannot
    be built or fail their check."""
    compiler = c_compiler()
    if not compiler:
        log.warning("no C compiler (cc): decoding bf16 with torch operations (slower)")
        return None
    try:
        kernels = DecodeKernels(ctypes.CDLL(str(_build(compiler))))
        error = _self_check(kernels)
    except (OSError, RuntimeError, ValueError, subprocess.SubprocessError) as exc:
        log.warning("decode kernels unavailable (%s): decoding with torch operations", exc)
        return None
    if not error < 0.01:  # relative to the outputs' scale; bf16 rounds to 0.4% at most
        log.warning("decode kernels off by %.3g on their check: decoding with torch operations",
                    error)  # fmt: skip
        return None
    return kernels

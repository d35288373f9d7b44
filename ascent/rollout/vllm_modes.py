"""The `vllm` rollout engine in the mode `[rollout.vllm] mode` asks for: an engine in this
process (vllm_engine.py) or HTTP servers of their own (vllm_server.py). The choice lives here
so that neither module needs the other's."""

from __future__ import annotations

from typing import Any

from ascent.models import resolve_model_path
from ascent.names import EngineTraits
from ascent.rollout.engine import ENGINES, EngineContext
from ascent.rollout.vllm_engine import VLLMEngine
from ascent.rollout.vllm_server import VLLMServers


# its own kernels and copy of the weights (log-probs differ a little from the trainer's), so
# agentic episodes can play on it while the trainer updates (colocated); its own scheduler and
# processes, so Ray replicas do not run it
@ENGINES.register("vllm", traits=EngineTraits(module="vllm", extra="vllm", agentic=True))
def build_vllm(ctx: EngineContext) -> Any:
    """`[rollout.vllm] mode`: an engine in this process, or the servers (vllm_server.py)."""
    v = ctx.cfg.rollout.vllm
    path = resolve_model_path(ctx.cfg.model.name_or_path)
    if v.mode == "server":
        return VLLMServers.from_config(ctx, path)
    return VLLMEngine(
        path,
        pad_id=ctx.pad_id,
        eos_ids=ctx.eos_ids,
        dtype=ctx.compute_dtype,
        device=ctx.device,
        kv_cache_mib=v.kv_cache_mib,
        gpu_memory_utilization=v.gpu_memory_utilization,
        max_model_len=v.max_model_len,
        # agentic episodes generate while the trainer updates: no idle time to sleep in
        sleep_mode=v.sleep_mode and not ctx.cfg.agentic.enabled,
        seed=ctx.cfg.run.seed,
    )

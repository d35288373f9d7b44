"""Config section `[rollout.vllm]`: how the vLLM rollout engine runs (`[rollout] engine =
"vllm"`; the `vllm` extra: `scripts/setup.sh --vllm`).

    [rollout.vllm]
    mode = "colocate"          # the engine in the trainer's process, on its device(s)
    # mode = "server": generation from `vllm serve` processes, started by ascent
    # (servers = 2) or already running (urls = ["http://10.0.0.5:8000"])
    weight_sync = "disk"       # server mode: safetensors in sync_dir, reloaded by the servers
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from ascent.config.base import Section


class VllmSection(Section):
    """`[rollout.vllm]`: the vLLM engine's mode, memory and weight sync."""

    mode: Literal["colocate", "server"] = Field(
        "colocate",
        description="colocate: an engine in the trainer's process, weights loaded into it after "
        "each update; server: OpenAI-compatible vLLM servers, weights synced through weight_sync.",
    )
    urls: list[str] = Field(
        default_factory=list,
        description="server mode: base URLs of running servers started with "
        "VLLM_SERVER_DEV_MODE=1 (their weight-reload endpoints) and --logprobs-mode "
        "processed_logprobs (log-probs at the temperature); empty: ascent starts `servers`.",
    )
    servers: int = Field(1, ge=1, description="server mode: servers ascent starts (urls empty).")
    weight_sync: Literal["disk", "nccl"] = Field(
        "disk",
        description="server mode: disk (safetensors in sync_dir, which the servers must be able "
        "to read: a shared filesystem across nodes); nccl (GPU to GPU through vLLM's "
        "weight-transfer engine; each server on a GPU of its own: ascent starts its servers on "
        "the GPUs after the trainer's ranks, and servers named in urls must run "
        '--weight-transfer-config \'{"backend": "nccl"}\'; refused on a CPU trainer).',
    )
    sync_dir: str | None = Field(
        None, description="server mode, disk sync: where weights are written; unset: RUN/vllm-sync."
    )
    gpu_memory_utilization: float = Field(
        0.5,
        gt=0.0,
        le=1.0,
        description="GPU: share of the GPU's memory vLLM may take (weights and KV cache); the "
        "rest is the trainer's.",
    )
    kv_cache_mib: int = Field(
        64, ge=1, description="CPU: memory for the KV cache, in MiB (GPUs use the share above)."
    )
    max_model_len: int | None = Field(
        None, ge=1, description="Longest prompt + completion in tokens; unset: the model's."
    )
    sleep_mode: bool = Field(
        True,
        description="GPU, colocate: free the engine's memory while the trainer updates (sleep) "
        "and take it back before generating (wake_up weights, then KV cache). Not with [agentic] "
        "episodes, which generate while the trainer updates.",
    )
    startup_timeout_sec: float = Field(
        300.0, gt=0.0, description="server mode: longest wait for a server to come up or back."
    )

    @model_validator(mode="after")
    def _server_settings_need_server_mode(self) -> VllmSection:
        if self.mode == "colocate":
            for key in ("urls", "servers", "weight_sync", "sync_dir", "startup_timeout_sec"):
                if self.explicitly_set(key):
                    raise ValueError(
                        f'[rollout.vllm] {key}: only mode = "server" uses it; set mode = '
                        '"server" or remove the key'
                    )
        elif self.explicitly_set("sleep_mode"):
            raise ValueError(
                '[rollout.vllm] sleep_mode: only mode = "colocate" sleeps (servers keep their '
                "memory); remove the key"
            )
        if self.urls:
            for key in ("servers", "kv_cache_mib", "gpu_memory_utilization", "max_model_len"):
                if self.explicitly_set(key):
                    raise ValueError(
                        f"[rollout.vllm] {key}: urls names running servers, which were "
                        "started with their own settings; remove the key (or urls, and ascent "
                        "starts the servers)"
                    )
        return self

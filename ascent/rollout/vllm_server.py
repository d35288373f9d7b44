"""The vLLM rollout engine in server mode: generation from OpenAI-compatible vLLM servers,
started by ascent (`[rollout.vllm] servers`) or already running (`urls`).

Token ids in and out over HTTP: `POST /v1/completions` with the prompts as lists of ids,
`logprobs: 0` and `return_token_ids: true`; the sampled ids and their log-probs come back,
nothing is decoded. Prompts are spread over the servers.

Weights (`weight_sync = "disk"`): after each update the trainer writes the full state
(safetensors, tied weights under each name) into `sync_dir/version-N/`, and every server
reloads it between requests (`/pause`, `/collective_rpc reload_weights`, `/resume`: the
development endpoints, so servers run with VLLM_SERVER_DEV_MODE=1). Across nodes, sync_dir
must be a filesystem every server can read. With `weight_sync = "nccl"` the paused servers
receive the new weights GPU to GPU instead (`vllm_nccl.py`).

A server that stops answering is waited for up to startup_timeout_sec, with one line saying
so; when it is back (restarted, so holding its initial weights) it is given the latest
weights, then the request is sent again. Servers ascent started are stopped with their
process group, so no engine process or shared-memory segment outlives the run.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import httpx
import torch
from torch import Tensor

from ascent.errors import AscentError
from ascent.rollout.batch import RolloutBatch
from ascent.rollout.engine import EngineContext
from ascent.rollout.sampling import SamplingParams, draw_seeds
from ascent.rollout.transport import SafetensorsDir
from ascent.rollout.vllm_engine import completions_to_batch, engine_args
from ascent.rollout.vllm_nccl import TRANSFER_CONFIG, NcclToServers, gpus_after, nccl_possible
from ascent.runtime import free_local_port

MODEL_NAME = "policy"  # the name ascent's servers serve the model under
NEGATABLE = {"enable_chunked_prefill"}  # engine arguments whose False is a --no-... flag


class ServerProcess:
    """A `vllm serve` process ascent started, in a process group of its own."""

    def __init__(
        self,
        args: dict[str, Any],
        device: torch.device,
        log: Path,
        env_extra: dict[str, str] | None = None,
    ) -> None:
        """`args`: `engine_args(...)`, the colocated engine's own, as command-line flags;
        `env_extra`: more of its environment (its GPU)."""
        self.port = free_local_port()
        self.url = f"http://127.0.0.1:{self.port}"
        server = "vllm.entrypoints.openai.api_server"
        cmd = [sys.executable, "-m", server, "--host", "127.0.0.1", "--port", str(self.port),
               "--served-model-name", MODEL_NAME]  # fmt: skip
        for key, value in args.items():
            flag = "--" + key.replace("_", "-")
            if value is True:
                cmd.append(flag)
            elif value is False and key in NEGATABLE:
                cmd.append("--no-" + flag[2:])
            elif value is not False:
                cmd += [flag, str(value)]
        env = dict(os.environ, VLLM_SERVER_DEV_MODE="1", VLLM_LOGGING_LEVEL="WARNING")
        if device.type == "cpu":
            env |= {"VLLM_ENABLE_V1_MULTIPROCESSING": "0", "OMP_NUM_THREADS": "1"}
        env |= env_extra or {}
        log.parent.mkdir(parents=True, exist_ok=True)
        self.log, self.cmd, self.env = log, cmd, env
        self.start()

    def start(self) -> None:
        """Start the server (again: same port, same model, initial weights)."""
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen(
                self.cmd, env=self.env, stdout=out, stderr=subprocess.STDOUT,
                start_new_session=True,
            )  # fmt: skip

    def stop(self) -> None:
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
                self.proc.wait(timeout=30)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()


class VLLMServers:
    exact_logprobs = False
    takes_adapters = False  # full weights through safetensors on disk

    def __init__(
        self,
        urls: Sequence[str],
        *,
        pad_id: int,
        eos_ids: Sequence[int],
        device: torch.device,
        sync_dir: Path,
        timeout: float,
        processes: Sequence[ServerProcess] = (),
        weight_sync: str = "disk",
        dtype: torch.dtype = torch.float32,
    ) -> None:
        self.urls = [u.rstrip("/").removesuffix("/v1") for u in urls]
        self.pad_id = pad_id
        self.eos_ids = sorted(set(eos_ids))
        self.device = device
        self.sync_dir = sync_dir
        self.timeout = timeout
        self.processes = list(processes)
        self.version = 0
        self._weights: Path | None = None  # the latest weights written for the servers
        # Held by a whole generate call and by a reload: the servers never change weights
        # while a batch is being sampled (one request per prompt), so each batch is one
        # version's and carries it.
        self._lock = threading.Lock()
        self.http = httpx.Client(timeout=httpx.Timeout(timeout, connect=5.0))
        for url in self.urls:
            self._wait_up(url, starting=True)
        self.transport: SafetensorsDir | NcclToServers = SafetensorsDir(sync_dir)
        if weight_sync == "nccl":  # once the servers answer: they join the groups
            self.transport = NcclToServers(self.urls, dtype=dtype, device=device,
                                           timeout=timeout, free_port=free_local_port)  # fmt: skip

    @classmethod
    def from_config(cls, ctx: EngineContext, model_path: str) -> VLLMServers:
        v = ctx.cfg.rollout.vllm
        sync_dir = Path(v.sync_dir) if v.sync_dir else ctx.work_dir / "vllm-sync"
        processes = []
        nccl = v.weight_sync == "nccl"
        if nccl:
            nccl_possible(ctx.device)
        gpus: list[str | None] = [None] * v.servers
        if nccl and not v.urls:  # NCCL joins no two processes on one GPU
            trainer_gpus = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
            gpus = gpus_after(trainer_gpus, v.servers, torch.cuda.device_count())
        if not v.urls:
            for i in range(v.servers):
                processes.append(
                    ServerProcess(
                        engine_args(
                            model_path,
                            ctx.compute_dtype,
                            ctx.device,
                            ctx.cfg.run.seed + i,
                            kv_cache_mib=v.kv_cache_mib,
                            gpu_memory_utilization=v.gpu_memory_utilization,
                            max_model_len=v.max_model_len,
                            sleep_mode=False,  # servers keep their memory
                        )
                        | ({"weight_transfer_config": TRANSFER_CONFIG} if nccl else {}),
                        ctx.device,
                        ctx.work_dir / f"vllm-server-{i}.log",
                        {"CUDA_VISIBLE_DEVICES": gpus[i]} if gpus[i] is not None else None,
                    )
                )
        urls = v.urls or [p.url for p in processes]
        try:
            return cls(urls, pad_id=ctx.pad_id, eos_ids=ctx.eos_ids, device=ctx.device,
                       sync_dir=sync_dir, timeout=v.startup_timeout_sec,
                       processes=processes, weight_sync=v.weight_sync,
                       dtype=ctx.compute_dtype)  # fmt: skip
        except BaseException:
            for p in processes:
                p.stop()
            raise

    # -- serving --------------------------------------------------------------------------

    def _wait_up(self, url: str, starting: bool = False) -> None:
        deadline = time.monotonic() + self.timeout
        said = False
        while time.monotonic() < deadline:
            try:
                if self.http.get(f"{url}/health", timeout=5.0).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            dead = [p for p in self.processes if p.url == url and p.proc.poll() is not None]
            if dead:
                raise AscentError(
                    f"vLLM server {url} exited (code {dead[0].proc.returncode}); see {dead[0].log}"
                )
            if not starting and not said:
                print(f"vLLM server {url} is not answering; waiting for it to come back",
                      file=sys.stderr, flush=True)  # fmt: skip
                said = True
            time.sleep(0.5)
        what = "did not come up" if starting else "did not come back"
        raise AscentError(
            f"vLLM server {url} {what} within [rollout.vllm] startup_timeout_sec "
            f"({self.timeout:g} s); check it (its log, or `curl {url}/health`)"
        )

    def _post(self, url: str, path: str, body: dict[str, Any]) -> Any:
        """POST, waiting out a server that is down or restarting (then re-syncing it)."""
        for _ in range(3):
            try:
                response = self.http.post(f"{url}{path}", json=body)
            except httpx.TransportError:
                self._wait_up(url)
                if path == "/v1/completions":
                    self._restarted(url)
                continue
            if response.status_code >= 400:
                raise AscentError(
                    f"vLLM server {url}{path}: HTTP {response.status_code}: "
                    f"{response.text.strip()[:200]}"
                )
            return response.json() if response.content else None
        raise AscentError(f"vLLM server {url} kept failing on {path}; see its log")

    def generate(
        self,
        prompts: Sequence[Sequence[int]],
        group_ids: Sequence[int],
        n: int,
        params: SamplingParams,
        generator: torch.Generator | None = None,
    ) -> RolloutBatch:
        seeds = draw_seeds(len(prompts), generator)
        with self._lock:
            version = self.version
            rows = self._sample(prompts, n, params, seeds)
        rows.sort(key=lambda r: r[0])  # prompt order; each prompt's n completions in order
        return completions_to_batch(prompts, group_ids, rows, self.pad_id, version, self.device)

    def _sample(
        self, prompts: Sequence[Sequence[int]], n: int, params: SamplingParams, seeds: list[int]
    ) -> list[tuple[int, list[int], list[float], bool]]:
        rows: list[tuple[int, list[int], list[float], bool]] = []
        for s, url in enumerate(self.urls):
            mine = list(range(s, len(prompts), len(self.urls)))
            for i in mine:  # one request per prompt: its own seed
                body = {
                    "model": MODEL_NAME, "prompt": [list(prompts[i])], "n": n,
                    "max_tokens": params.max_new_tokens, "logprobs": 0, "seed": seeds[i],
                    "temperature": 0.0 if params.greedy else params.temperature,
                    "top_p": params.top_p, "top_k": params.top_k if params.top_k > 0 else -1,
                    "stop_token_ids": self.eos_ids, "return_token_ids": True,
                    "stop": list(params.stop), "include_stop_str_in_output": True,
                    "skip_special_tokens": False,
                }  # fmt: skip
                answer = self._post(url, "/v1/completions", body)
                for choice in sorted(answer["choices"], key=lambda c: c["index"]):
                    tokens = list(choice["token_ids"])
                    lps = [float(x) for x in choice["logprobs"]["token_logprobs"]]
                    rows.append((i, tokens, lps, choice["finish_reason"] == "stop"))
        return rows

    # -- weights ------------------------------------------------------------------------

    def _restarted(self, url: str) -> None:
        """A server that came back holds its initial weights: give it the latest."""
        if isinstance(self.transport, NcclToServers):
            raise AscentError(
                f"vLLM server {url} restarted and lost its NCCL weight group, so it would "
                "sample its initial weights; resume the run from its last checkpoint, or use "
                '[rollout.vllm] weight_sync = "disk", which reloads a restarted server'
            )
        if self._weights is not None:
            self._reload(url)

    def sync_weights(self, weights: Iterable[tuple[str, Tensor]], version: int) -> None:
        if isinstance(self.transport, NcclToServers):
            with self._lock:  # after the batch being sampled, if any
                for url in self.urls:
                    self._post(url, "/pause?mode=wait", {})
                try:
                    self.transport.send(weights, version)
                    self.version = version
                finally:
                    for url in self.urls:
                        self._post(url, "/resume", {})
            return
        target = self.transport.send(weights, version)
        with self._lock:  # after the batch being sampled, if any
            self._weights, self.version = target, version
            for url in self.urls:
                self._reload(url)
        for old in self.sync_dir.glob("version-*"):  # the previous one, or a past session's
            if old != target:
                self.transport.release(old)

    def _reload(self, url: str) -> None:
        self._post(url, "/pause?mode=wait", {})
        body = {"method": "reload_weights", "kwargs": {"weights_path": str(self._weights)}}
        self._post(url, "/collective_rpc", body)
        self._post(url, "/resume", {})

    def close(self) -> None:
        if isinstance(self.transport, NcclToServers):
            self.transport.close()
        self.http.close()
        for process in self.processes:
            process.stop()
        self.processes = []

"""Weights to vLLM servers over NCCL (`[rollout.vllm] weight_sync = "nccl"`): GPU to GPU, no disk.

Each server runs vLLM's weight-transfer engine (`--weight-transfer-config '{"backend":
"nccl"}'`, which ascent passes to the servers it starts) and joins, once, a two-member NCCL
group with the trainer's publishing rank: the trainer opens the rendezvous (a TCP store on a
free port of the address the server reaches it by) while the server's `/init_weight_transfer_
engine` joins it. A new version is then one broadcast per server, driven by vLLM's own trainer
side (`NCCLTrainerWeightTransferEngine`: `/start_weight_update`, `/update_weights` beside the
broadcast, `/finish_weight_update`); the server loads each tensor as it arrives. Tensors travel
in the engine's dtype, so a float32 trainer sends half the bytes to a bfloat16 server.

NCCL joins no two processes on one GPU: a server needs a GPU of its own (ascent starts its
servers on the GPUs after the trainer's ranks, `gpus_after`), and a server that restarts has
lost its group, which is refused in one line rather than left sampling its initial weights.
Nothing here has run here: it needs CUDA GPUs (the README says so); the rendezvous helpers and
the tensors' description are tested on the CPU.
"""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any
from urllib.parse import urlsplit

import torch
from torch import Tensor

from ascent.errors import AscentError

TRANSFER_CONFIG = '{"backend": "nccl"}'  # the servers' --weight-transfer-config


def reach_address(url: str) -> str:
    """This machine's address on the route to the server at `url`: where its workers can
    reach the trainer's rendezvous (loopback for a server on this machine)."""
    parts = urlsplit(url)
    host = parts.hostname or "127.0.0.1"
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.connect((host, parts.port or 80))  # a datagram socket sends nothing to connect
        return probe.getsockname()[0]


def nccl_possible(device: torch.device) -> None:
    """Refused in one line where it cannot run: a trainer that is not on a CUDA GPU."""
    if device.type != "cuda" or not torch.cuda.is_available():
        raise AscentError(
            f'[rollout.vllm] weight_sync = "nccl" sends weights from GPU to GPU, and the '
            f'trainer is on {device}; use weight_sync = "disk"'
        )


def gpus_after(trainer_gpus: int, servers: int, available: int) -> list[str]:
    """`CUDA_VISIBLE_DEVICES` for each server ascent starts: the GPUs after the trainer's
    ranks, one each; refused in one line when the machine has too few."""
    if trainer_gpus + servers > available:
        raise AscentError(
            f'[rollout.vllm] weight_sync = "nccl": each vLLM server needs a GPU of its own '
            f"(NCCL joins no two processes on one GPU): {trainer_gpus} trainer rank(s) + "
            f"{servers} server(s) need {trainer_gpus + servers} GPUs, this machine has "
            f'{available}; use weight_sync = "disk", or start the servers elsewhere and name '
            "them in urls"
        )
    return [str(trainer_gpus + i) for i in range(servers)]


def wire_tensors(
    weights: Iterable[tuple[str, Tensor]], dtype: torch.dtype, device: torch.device
) -> Iterator[tuple[str, Tensor]]:
    """(name, tensor) pairs as they travel: contiguous, in the engine's dtype, on the
    trainer's GPU. A tensor already so is the trainer's own (no copy)."""
    for name, tensor in weights:
        yield name, tensor.detach().to(device=device, dtype=dtype).contiguous()


def _vllm_transfer() -> Any:
    """vLLM's trainer-side NCCL engine and its HTTP client (vLLM 0.11 and later)."""
    try:
        from vllm.distributed.weight_transfer import base, clients, nccl_engine
    except ImportError as err:
        raise AscentError(
            f'[rollout.vllm] weight_sync = "nccl" needs vLLM\'s weight-transfer engine, which '
            f'this vLLM lacks ({err}); install a newer vllm, or use weight_sync = "disk"'
        ) from None
    return base, clients, nccl_engine


class NcclToServers:
    """The `nccl` transport: one NCCL group per server, the trainer's GPU at rank 0."""

    name = "nccl"

    def __init__(
        self,
        urls: Sequence[str],
        *,
        dtype: torch.dtype,
        device: torch.device,
        timeout: float,
        free_port: Callable[[], int],
    ) -> None:
        nccl_possible(device)
        base, clients, nccl_engine = _vllm_transfer()
        self.dtype, self.device = dtype, device
        self._pairs: list[tuple[str, Tensor]] = []
        transport = self

        class Parcel(base.WeightSource):
            """The version being sent: what it holds, then the tensors themselves."""

            def metadata(self) -> list[Any]:
                return [base.ParamMeta(n, t.dtype, tuple(t.shape)) for n, t in transport._pairs]

            def __iter__(self) -> Iterator[tuple[str, Tensor]]:
                return iter(transport._pairs)

        self._senders: list[tuple[str, Any]] = []
        for url in urls:
            info = nccl_engine.NCCLTrainerInitInfo(
                master_address=reach_address(url),
                master_port=free_port(),
                world_size=2,  # the trainer and the server's one worker (one GPU per server)
                rank=0,
            )
            client = clients.HTTPVLLMWeightSyncClient(url, timeout=timeout)
            try:
                sender = nccl_engine.NCCLTrainerWeightTransferEngine.trainer_init(
                    info, client=client, source=Parcel()
                )
            except Exception as err:
                raise AscentError(
                    f"vLLM server {url}: the NCCL weight group did not form ({err}); the server "
                    f"must run --weight-transfer-config '{TRANSFER_CONFIG}' on a GPU of its own "
                    f"and reach {info.master_address}:{info.master_port}"
                ) from None
            self._senders.append((url, sender))

    def send(self, weights: Iterable[tuple[str, Tensor]], version: int) -> int:
        """Broadcast the version to every server (each loads it as it arrives); the caller
        has paused them."""
        self._pairs = list(wire_tensors(weights, self.dtype, self.device))
        try:
            for url, sender in self._senders:
                try:
                    sender.send_weights()
                except Exception as err:
                    raise AscentError(
                        f"vLLM server {url}: NCCL weight sync of version {version} failed "
                        f"({err}); resume the run from its last checkpoint, or use "
                        '[rollout.vllm] weight_sync = "disk"'
                    ) from None
        finally:
            self._pairs = []
        return version

    def release(self, parcel: Any) -> None:
        pass  # nothing is kept: the servers hold the weights

    def close(self) -> None:
        for _, sender in self._senders:
            # a server already gone has no group to close
            with contextlib.suppress(Exception):
                sender.client.shutdown_weight_transfer_engine()
            group = getattr(sender, "model_update_group", None)
            if group is not None and hasattr(group, "destroy"):
                group.destroy()
        self._senders = []

"""NCCL weight sync to vLLM servers (`[rollout.vllm] weight_sync = "nccl"`): what runs without
a GPU. The broadcast itself needs CUDA GPUs and has not run here; these check that it is
refused in one line where it cannot run (before any server starts), where the servers ascent
starts would sit, the address the servers reach the trainer by, and the tensors as they
travel."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

pytest.importorskip("vllm")

from ascent.errors import AscentError
from ascent.rollout.vllm_nccl import NcclToServers, gpus_after, reach_address, wire_tensors
from tests.conftest import PROJECT_ROOT


def test_servers_ascent_starts_take_the_gpus_after_the_trainers_ranks():
    assert gpus_after(1, 1, 2) == ["1"]
    assert gpus_after(2, 2, 8) == ["2", "3"]
    with pytest.raises(
        AscentError,
        match=r"2 trainer rank\(s\) \+ 1 server\(s\) need 3 GPUs, "
        r"this machine has 2; use weight_sync = \"disk\"",
    ):
        gpus_after(2, 1, 2)


def test_a_server_on_this_machine_reaches_the_trainer_on_loopback():
    assert reach_address("http://127.0.0.1:8000") == "127.0.0.1"
    assert reach_address("http://localhost:8000/") == "127.0.0.1"


def test_tensors_travel_contiguous_in_the_engines_dtype():
    weight = torch.randn(3, 4)
    pairs = dict(wire_tensors([("w", weight), ("t", weight.t())], torch.bfloat16,
                              torch.device("cpu")))  # fmt: skip
    assert pairs["w"].dtype == torch.bfloat16 and torch.equal(pairs["w"], weight.bfloat16())
    assert pairs["t"].is_contiguous() and torch.equal(pairs["t"], weight.t().bfloat16())
    same = dict(wire_tensors([("w", weight)], torch.float32, torch.device("cpu")))["w"]
    assert same.data_ptr() == weight.data_ptr()  # already as it travels: no copy


def test_a_trainer_off_the_gpus_is_refused_before_any_group_forms():
    with pytest.raises(AscentError, match=r"trainer is on cpu; use weight_sync = \"disk\""):
        NcclToServers(["http://127.0.0.1:1"], dtype=torch.float32, device=torch.device("cpu"),
                      timeout=1.0, free_port=lambda: 0)  # fmt: skip


@pytest.mark.slow  # 15 s: a training run's setup with vLLM imported; CI runs it in its slow step
@pytest.mark.timeout(300)
@pytest.mark.skipif(torch.cuda.is_available(), reason="the refusal is for a machine without GPUs")
def test_nccl_on_a_machine_without_gpus_is_one_line_and_starts_no_server(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "ascent", "train", "--set", 'rollout.engine="vllm"',
         "--set", 'rollout.vllm.mode="server"', "--set", 'rollout.vllm.weight_sync="nccl"',
         "--set", f'run.output_dir="{tmp_path}"', "--set", "run.name=n",
         "--set", "logging.progress=false"],
        cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr[-2000:]
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr
    assert 'weight_sync = "nccl" sends weights from GPU to GPU' in lines[0]
    assert not (tmp_path / "n").exists()  # no server log, no run: setup leaves nothing

"""The vLLM engine, with real vLLM (its CPU build) on the built-in tiny model: sampling
shapes, EOS, log-probs against a transformers forward, weight sync, training through it,
server mode with disk sync, a server that restarts, and nothing left behind."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

pytest.importorskip("vllm")

from ascent.configfile import load_config
from ascent.errors import AscentError, ConfigError
from ascent.models import build_tiny_model
from ascent.rollout import SamplingParams, TransformersEngine, VLLMEngine
from ascent.train.forward import response_logprobs
from ascent.train.sharding import full_weights

PROJECT = Path(__file__).resolve().parents[2]
PROMPTS = ("12+34=", "9+9=", "70+5=")


def leftovers() -> tuple[list[str], list[str]]:
    """vLLM processes (zombies aside: they hold nothing, and reaping them is the job of the
    machine's init) and shared-memory segments of this machine."""
    found = subprocess.run(["pgrep", "-a", "-f", "vllm.entrypoints|VLLM::"], capture_output=True,
                           text=True).stdout.splitlines()  # fmt: skip
    procs = [line for line in found if "<defunct>" not in line]
    shm = sorted(p for p in os.listdir("/dev/shm") if p.startswith(("psm_", "vllm")))
    return procs, shm


def settled_leftovers(before: tuple[list[str], list[str]]) -> tuple[list[str], list[str]]:
    """leftovers() once what was killed has finished exiting: on a loaded machine a process
    sent SIGKILL can still be listed for a moment (its command line already gone)."""
    deadline = time.monotonic() + 15
    while (now := leftovers()) != before and time.monotonic() < deadline:
        time.sleep(0.5)
    return now


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    model, tok = build_tiny_model()
    path = tmp_path_factory.mktemp("tiny")
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return model, tok, path


@pytest.fixture(scope="module")
def engine(tiny):
    _, tok, path = tiny
    before = leftovers()
    eng = VLLMEngine(str(path), pad_id=tok.pad_token_id, eos_ids=[tok.eos_token_id],
                     dtype=torch.float32, device=torch.device("cpu"))  # fmt: skip
    yield eng
    eng.close()
    assert leftovers() == before  # the in-process engine leaves no process, no segment


def ids(tok):
    return [tok(p)["input_ids"] for p in PROMPTS]


def test_n_completions_per_prompt_stop_at_eos_and_carry_their_version(engine, tiny):
    _, tok, _ = tiny
    params = SamplingParams(10, temperature=1.0)
    batch = engine.generate(ids(tok), [7, 8, 9], 4, params, torch.Generator().manual_seed(0))
    assert (
        batch.response_ids.shape[0] == 12
        and batch.group_ids.tolist() == [7] * 4 + [8] * 4 + [9] * 4
    )
    lengths = batch.response_lengths.tolist()
    for row, (n, done) in enumerate(zip(lengths, batch.finished.tolist(), strict=True)):
        tokens = batch.response_ids[row]
        assert done == (n < 10 or int(tokens[n - 1]) == tok.eos_token_id)
        if done:
            assert int(tokens[n - 1]) == tok.eos_token_id  # EOS is the last chosen token
        assert (tokens[n:] == tok.pad_token_id).all() and n >= 1
    assert batch.versions.tolist() == [engine.version] * 12
    again = engine.generate(ids(tok), [7, 8, 9], 4, params, torch.Generator().manual_seed(0))
    assert torch.equal(again.response_ids, batch.response_ids)  # seeded: repeatable


def test_a_batch_larger_than_one_prefill_step_samples_seeded_and_repeatable(engine, tiny):
    """128 prompts x 8 completions are more prompt tokens than vLLM prefills in one step;
    seeded requests then broke on a CPU ("CPU Generator does not use offset") while prefills
    were chunked."""
    _, tok, _ = tiny
    prompts = [tok(f"{a:02d}+{b:02d}=")["input_ids"] for a in range(16) for b in range(8)]
    params = SamplingParams(4, temperature=1.0)
    batch = engine.generate(prompts, list(range(128)), 8, params, torch.Generator().manual_seed(2))
    again = engine.generate(prompts, list(range(128)), 8, params, torch.Generator().manual_seed(2))
    assert batch.response_ids.shape[0] == 1024
    assert torch.equal(batch.response_ids, again.response_ids)


def test_stop_strings_end_a_completion_where_the_transformers_engine_ends_it(engine, tiny):
    """Greedy, the same weights: both engines stop at the token that completes the string,
    which stays in the completion, and call the row finished."""
    model, tok, _ = tiny
    ours = TransformersEngine(model, pad_id=tok.pad_token_id, eos_ids=[tok.eos_token_id],
                              decode=tok.decode)  # fmt: skip
    free = ours.generate(ids(tok), [0, 1, 2], 1, SamplingParams(10, greedy=True))
    texts = [
        tok.decode(r[m.bool()]) for r, m in zip(free.response_ids, free.response_mask, strict=True)
    ]
    stop = next(t[1:3] for t in texts if len(t) >= 4)  # two characters the policy writes
    params = SamplingParams(10, greedy=True, stop=(stop,))
    a = ours.generate(ids(tok), [0, 1, 2], 1, params)
    b = engine.generate(ids(tok), [0, 1, 2], 1, params)
    assert torch.equal(a.response_ids, b.response_ids) and torch.equal(a.finished, b.finished)
    assert bool(a.finished.any())


def test_log_probs_match_a_transformers_forward_at_the_temperature(engine, tiny):
    model, tok, _ = tiny
    batch = engine.generate(ids(tok), [0, 1, 2], 4, SamplingParams(10, temperature=0.7),
                            torch.Generator().manual_seed(1))  # fmt: skip
    with torch.no_grad():
        expected = response_logprobs(model, batch, 0.7)[0]
    mask = batch.response_mask.bool()
    assert float((expected[mask] - batch.logprobs[mask]).abs().max()) < 1e-4


def test_a_weight_sync_makes_the_engine_sample_the_trainers_new_weights(engine, tiny):
    model, tok, _ = tiny
    trained = type(model)(model.config)
    trained.load_state_dict(model.state_dict())
    with torch.no_grad():
        for p in trained.parameters():
            p.add_(0.05 * torch.randn_like(p))
    params = SamplingParams(10, temperature=1.0)
    before = engine.generate(ids(tok), [0, 1, 2], 2, params, torch.Generator().manual_seed(2))
    with torch.no_grad():
        stale = response_logprobs(trained, before, 1.0)[0]
    mask = before.response_mask.bool()
    assert float((stale[mask] - before.logprobs[mask]).abs().max()) > 1e-2
    engine.sync_weights(full_weights(trained), version=9)
    after = engine.generate(ids(tok), [0, 1, 2], 2, params, torch.Generator().manual_seed(2))
    with torch.no_grad():
        fresh = response_logprobs(trained, after, 1.0)[0]
    mask = after.response_mask.bool()
    assert float((fresh[mask] - after.logprobs[mask]).abs().max()) < 1e-4
    assert after.versions.tolist() == [9] * 6
    engine.sync_weights(full_weights(model), version=0)  # back, for the other tests


def test_the_engine_without_the_extra_is_one_line_saying_how_to_install_it(monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda n, *a: None if n == "vllm" else real(n, *a)
    )
    with pytest.raises(ConfigError, match=r"needs the vllm extra: run scripts/setup.sh --vllm"):
        load_config(None, ['rollout.engine="vllm"'])


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        (['rollout.vllm.mode="server"', 'rollout.vllm.weight_sync="nccl"', 'run.device="cpu"'],
         r'weight_sync = "nccl" sends weights from GPU to GPU, and \[run\] device = "cpu"; '
         r'use weight_sync = "disk"'),
        (['rollout.vllm.weight_sync="nccl"'], r'weight_sync: only mode = "server" uses it'),
        (['rollout.vllm.mode="server"', "rollout.vllm.sleep_mode=false"],
         r'sleep_mode: only mode = "colocate" sleeps'),
        (['rollout.vllm.servers=2'], r'servers: only mode = "server" uses it'),
    ],
)  # fmt: skip
def test_vllm_settings_the_mode_cannot_use_are_refused_at_load(settings, message):
    with pytest.raises(ConfigError, match=message):
        load_config(None, ['rollout.engine="vllm"', *settings])


@pytest.mark.slow  # loads SmolLM2 into vLLM (about a minute): CI's slow step
@pytest.mark.timeout(600)
def test_a_kv_cache_too_small_for_the_models_context_is_one_line_with_the_fix(smollm2_dir):
    """SmolLM2's context is 8,192 tokens; the CPU default of 64 MiB of KV cache holds 2,688
    (vLLM's own estimate): vLLM's 30-frame refusal becomes one line naming both settings."""
    result = run_ascent("doctor", "--numerics", "examples/smollm2_grpo.toml",
                        "--set", 'rollout.engine="vllm"')  # fmt: skip
    assert result.returncode == 2, result.stderr[-2000:]
    assert "Traceback" not in result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert "[rollout.vllm] kv_cache_mib = 64 holds 2,688 tokens of one sequence" in last
    assert "model's context is 8,192: set [rollout.vllm] max_model_len = 2688" in last


def run_ascent(*args: str, timeout: int = 600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ascent", *args], cwd=PROJECT,
                          capture_output=True, text=True, timeout=timeout)  # fmt: skip


def sets(root: Path, *extra: str) -> list[str]:
    items = ["train.total_steps=4", "train.batch_size=16", "train.micro_batch_size=16",
             "train.eval_steps=2", "train.save_steps=2", "data.eval_size=24",
             "logging.progress=false", 'rollout.engine="vllm"', f'run.output_dir="{root}"',
             "run.name=v", *extra]  # fmt: skip
    return [a for item in items for a in ("--set", item)]


@pytest.mark.slow  # 25 s colocated, more for a server: CI runs both in its slow step
@pytest.mark.timeout(600)
@pytest.mark.parametrize("mode", ["colocate", "server"])
def test_training_through_vllm_reports_the_engine_gap_and_leaves_nothing(tmp_path, mode):
    before = leftovers()
    done = run_ascent("train", *sets(tmp_path, f'rollout.vllm.mode="{mode}"'))
    assert done.returncode == 0, done.stderr[-2000:]
    rows = [json.loads(x) for x in (tmp_path / "v" / "metrics.jsonl").open()]
    assert [r["step"] for r in rows] == [1, 2, 3, 4]
    assert all(r["engine/logprob_gap"] < 1e-3 for r in rows)  # float32 on both sides
    assert [r["policy_version"] for r in rows] == [0, 1, 2, 3]
    summary = json.loads((tmp_path / "v" / "summary.json").read_text())
    assert summary["eval_accuracy_after"] is not None
    if mode == "server":
        assert [p.name for p in (tmp_path / "v" / "vllm-sync").iterdir()] == ["version-000004"]
    assert settled_leftovers(before) == before


@pytest.mark.slow  # about 20 s of training: CI runs it in its slow step
@pytest.mark.timeout(600)
def test_asynchronous_rollouts_generate_on_their_own_thread_through_vllm(tmp_path):
    """The prefetching thread runs vLLM's CPU kernels with the thread count the engine was
    built with (a thread's default stopped them: `thread_num == thread_num (2 vs. 1)`)."""
    done = run_ascent("train", *sets(tmp_path, "rollout.async=true", "rollout.max_staleness=1"))
    assert done.returncode == 0, done.stderr[-2000:]
    rows = [json.loads(x) for x in (tmp_path / "v" / "metrics.jsonl").open()]
    assert [r["step"] for r in rows] == [1, 2, 3, 4]
    assert all(r["staleness"] <= 1 for r in rows) and rows[-1]["policy_version"] >= 2


@pytest.mark.slow  # a vLLM server starts; the one-owner engine itself is tested with Ray replicas
@pytest.mark.timeout(600)
def test_two_ranks_share_one_server_and_one_sync_folder(tmp_path):
    before = leftovers()
    server = sets(tmp_path, 'rollout.vllm.mode="server"', "train.micro_batch_size=8")
    done = run_ascent("train", "--nproc", "2", *server)
    assert done.returncode == 0, done.stderr[-2000:]
    run = tmp_path / "v"
    assert json.loads((run / "summary.json").read_text())["world_size"] == 2
    assert sorted(p.name for p in run.glob("vllm-server-*.log")) == ["vllm-server-0.log"]
    assert [p.name for p in (run / "vllm-sync").iterdir()] == ["version-000004"]
    rows = [json.loads(x) for x in (run / "metrics.jsonl").open()]
    assert [r["policy_version"] for r in rows] == [0, 1, 2, 3]  # each update reached it
    assert all(r["engine/logprob_gap"] < 1e-3 for r in rows)
    assert settled_leftovers(before) == before


@pytest.mark.slow  # about a minute: CI runs it in its slow step
@pytest.mark.timeout(600)
def test_a_server_that_restarts_gets_the_weights_again_and_a_dead_one_is_one_line(tiny, tmp_path):
    from ascent.rollout.engine import EngineContext
    from ascent.rollout.vllm_server import VLLMServers
    from ascent.rules import LLMConfig

    model, tok, path = tiny
    before = leftovers()
    cfg = LLMConfig.model_validate(
        {"rollout": {"engine": "vllm", "vllm": {"mode": "server", "startup_timeout_sec": 120}}}
    )
    ctx = EngineContext(cfg, None, torch.float32, torch.device("cpu"), tok.pad_token_id,
                        [tok.eos_token_id], tok.decode, False, tmp_path)  # fmt: skip
    servers = VLLMServers.from_config(ctx, str(path))
    try:
        trained = type(model)(model.config)
        trained.load_state_dict(model.state_dict())
        with torch.no_grad():
            for p in trained.parameters():
                p.add_(0.05 * torch.randn_like(p))
        servers.sync_weights(full_weights(trained), version=3)
        process = servers.processes[0]
        os.killpg(process.proc.pid, signal.SIGKILL)  # the server dies ...
        process.proc.wait()
        process.start()  # ... and is restarted (by a supervisor), with its initial weights
        batch = servers.generate(ids(tok), [0, 1, 2], 2, SamplingParams(8, temperature=0.7),
                                 torch.Generator().manual_seed(0))  # fmt: skip
        with torch.no_grad():  # the log-probs of the tempered distribution the tokens came from
            expected = response_logprobs(trained, batch, 0.7)[0]
        mask = batch.response_mask.bool()
        assert float((expected[mask] - batch.logprobs[mask]).abs().max()) < 1e-4
        assert batch.versions.tolist() == [3] * 6

        servers.timeout = 3.0
        os.killpg(process.proc.pid, signal.SIGKILL)  # dead for good
        process.proc.wait()
        start = time.monotonic()
        with pytest.raises(AscentError, match="exited") as err:
            servers.generate(ids(tok), [0, 1, 2], 1, SamplingParams(4))
        assert "\n" not in str(err.value) and time.monotonic() - start < 10
    finally:
        servers.close()
    assert settled_leftovers(before) == before

"""Training on several ranks (torch.distributed with gloo, real processes): one optimiser step
on 2 ranks equals the same global batch on 1, runs resume across world sizes, and a rank that
fails takes the others down with one line naming it."""

from __future__ import annotations

import faulthandler
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from ascent.configfile import load_config
from ascent.models import build_tiny_model
from ascent.train.distributed import Dist, launch
from ascent.train.llm_setup import build_run
from ascent.train.train_batch import TrainBatch
from tests.train.test_llm_loop import SHORT

PROJECT = Path(__file__).resolve().parents[2]
# Adam's first step is about lr * g / (|g| + eps): where |g| ~ eps, summation-order rounding
# of the gradient (two ranks add in another order than one) is magnified up to lr. eps = 1e-6
# keeps that below the 1e-5 the comparison allows; the aggregation itself is exact.
UPDATE = [*SHORT, "train.batch_size=16", "train.micro_batch_size=4", "optim.eps=1e-6"]


def save_batch(batch: TrainBatch, path: Path) -> None:
    save_file(batch.to_tensors(), str(path))


def read_batch(path: Path) -> TrainBatch:
    return TrainBatch.from_tensors(load_file(str(path)))


def trained_weights(run) -> dict[str, torch.Tensor]:
    """What an update changes: the policy's weights as an engine gets them (shards gathered,
    LoRA merged) and a value head's parameters."""
    weights = {k: v.clone() for k, v in run.actor.weights()}  # every rank gathers
    if run.actor.head is not None:
        head = run.actor.head.model.head.state_dict()
        weights |= {f"value_head.{k}": v.clone() for k, v in head.items()}
    return weights


def stacks_if_stuck(seconds: float = 240.0) -> None:
    """Call first thing on a rank: if the rank is still running after `seconds` (under the
    tests' 300 s timeouts), every thread's stack goes to stderr, which the test's captured
    output shows, and the rank exits. A hang then fails with where each rank waited, where
    the test's own timeout would kill the launcher and leave nothing to read."""
    faulthandler.dump_traceback_later(seconds, exit=True)


def update_on_this_rank(overrides: list[str], batch_path: str, out_path: str) -> None:
    """One actor update on this rank's half of the saved batch; rank 0 saves the weights."""
    stacks_if_stuck()
    torch.set_num_threads(1)
    dist = Dist.from_env("cpu")
    run = build_run(load_config(None, overrides), dist)
    batch = read_batch(Path(batch_path))
    half = len(batch) // dist.world_size
    mine = batch.select(torch.arange(dist.rank * half, (dist.rank + 1) * half))
    with run.actor.live_module():  # as a run decodes in place before it updates
        pass
    run.actor.update(mine, step=1)
    weights = trained_weights(run)
    if dist.main:
        save_file({k: v.contiguous() for k, v in weights.items()}, out_path)
    run.close()
    dist.close()


def lora_model(root: Path) -> list[str]:
    pytest.importorskip("peft")
    model, tokenizer = build_tiny_model()
    model.save_pretrained(root / "m")
    tokenizer.save_pretrained(root / "m")
    # a random model gets every answer wrong: rewards that differ, so there is a gradient
    reward = 'reward.functions=["tests.rewards.custom_rewards:length_reward"]'
    return [f'model.name_or_path="{root / "m"}"', "model.lora={enabled=true, r=4, alpha=8}",
            "optim.lr=0.01", reward]  # fmt: skip


RECIPES = {
    "full weights": lambda root: [],
    "lora": lora_model,
    "value head": lambda root: [
        'algorithm.advantage="gae"',
        'critic.architecture="head"',
        "critic.lr=1e-3",
    ],
}


@pytest.mark.timeout(300)
@pytest.mark.parametrize("recipe", list(RECIPES))
def test_one_update_on_two_ranks_equals_the_same_global_batch_on_one(tmp_path, recipe):
    overrides = [*UPDATE, f'run.output_dir="{tmp_path}"', *RECIPES[recipe](tmp_path)]
    run = build_run(load_config(None, overrides), torch.device("cpu"))
    batch, _ = run.train_batch(run.rollouts.score(*run.rollouts.collect()))
    assert len(batch) == 16 and len(set(batch.rollout.group_ids.tolist())) == 2
    save_batch(batch, tmp_path / "batch.safetensors")
    start = trained_weights(run)
    run.actor.update(batch, step=1)
    single = trained_weights(run)
    run.close()

    out = tmp_path / "two-ranks.safetensors"
    launch(2, update_on_this_rank, overrides, str(tmp_path / "batch.safetensors"), str(out))
    sharded = load_file(str(out))
    assert set(sharded) == set(single)
    moved = max(float((single[k] - start[k]).abs().max()) for k in sharded)
    diff = max(float((single[k] - sharded[k]).abs().max()) for k in sharded)
    assert moved > 1e-5 and diff < 1e-5 and diff < moved / 20, (moved, diff)
    if recipe == "value head":
        head = [k for k in sharded if k.startswith("value_head.")]
        assert max(float((single[k] - start[k]).abs().max()) for k in head) > 1e-5


def ascent(*args: str, timeout: int = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "ascent", *args],
        cwd=PROJECT,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "TOKENIZERS_PARALLELISM": "false"},
    )


def sets(root: Path, *extra: str) -> list[str]:
    items = [*SHORT, "train.micro_batch_size=8", f'run.output_dir="{root}"', "run.name=r", *extra]
    return [arg for item in items for arg in ("--set", item)]


# Each segment below ends at its own total_steps; a constant learning rate keeps the schedule
# the same as the unbroken run's (a decaying one is fitted to total_steps).
FLAT_LR = ['optim.schedule="constant"', "optim.warmup_ratio=0"]


@pytest.mark.slow  # about a minute: CI runs it in its slow step
@pytest.mark.timeout(600)
def test_a_run_resumes_across_world_sizes_two_to_one_and_one_to_two(tmp_path):
    first = ascent("train", "--nproc", "2", *sets(tmp_path, "train.total_steps=2", *FLAT_LR))
    assert first.returncode == 0, first.stderr
    summary = json.loads((tmp_path / "r" / "summary.json").read_text())
    assert summary["world_size"] == 2 and summary["steps"] == 2
    assert sorted(p.name for p in (tmp_path / "r/checkpoints/step-000002/shards").iterdir()) == [
        ".metadata", "__0_0.distcp", "__1_0.distcp",
    ]  # fmt: skip

    run = str(tmp_path / "r")
    second = ascent("train", "--resume", run, *sets(tmp_path, "train.total_steps=4", *FLAT_LR))
    assert second.returncode == 0, second.stderr
    assert "written by another number of ranks" in second.stdout
    assert json.loads((tmp_path / "r" / "summary.json").read_text())["world_size"] == 1

    third = ascent(
        "train", "--nproc", "2", "--resume", run, *sets(tmp_path, "train.total_steps=6", *FLAT_LR)
    )
    assert third.returncode == 0, third.stderr
    rows = [json.loads(line) for line in (tmp_path / "r" / "metrics.jsonl").open()]
    assert [r["step"] for r in rows] == [1, 2, 3, 4, 5, 6]
    summary = json.loads((tmp_path / "r" / "summary.json").read_text())
    assert summary["world_size"] == 2 and summary["steps"] == 6
    assert (tmp_path / "r" / "final-model" / "model.safetensors").is_file()

    # The same run unbroken on 2 ranks. Its first two steps are the broken run's, value for
    # value; after the resume on 1 rank (which samples its completions with one generator
    # where 2 ranks use two) the run goes on from the same place: the same prompts, the same
    # learning rate, the same policy version.
    whole = tmp_path / "whole"
    unbroken = ascent("train", "--nproc", "2", *sets(whole, "train.total_steps=6", *FLAT_LR))
    assert unbroken.returncode == 0, unbroken.stderr
    same = [json.loads(line) for line in (whole / "r" / "metrics.jsonl").open()]

    def values(row: dict) -> dict:  # what the run computed, not how long it took
        return {k: v for k, v in row.items() if not k.startswith(("time", "tokens_per_s"))}

    assert [values(r) for r in same[:2]] == [values(r) for r in rows[:2]]
    for key in ("lr", "policy_version", "staleness", "step"):
        assert [r.get(key) for r in same] == [r.get(key) for r in rows], key

    def prompts(root: Path, step: int) -> list[str]:
        dump = root / "r" / "samples" / f"step-{step:06d}.jsonl"
        return sorted(json.loads(line)["prompt"] for line in dump.open())

    for step in (4, 6):
        assert prompts(whole, step) == prompts(tmp_path, step)


@pytest.mark.slow  # the numbers are checked above; this is the whole run, with its files
@pytest.mark.timeout(600)
@pytest.mark.parametrize("recipe", ["lora", "value head"])
def test_lora_and_a_value_head_train_checkpoint_and_resume_on_two_ranks(tmp_path, recipe):
    extra = RECIPES[recipe](tmp_path)
    first = ascent("train", "--nproc", "2", *sets(tmp_path, "train.total_steps=2", *extra))
    assert first.returncode == 0, first.stderr
    run = str(tmp_path / "r")
    again = sets(tmp_path, "train.total_steps=4", *extra)
    second = ascent("train", "--nproc", "2", "--resume", run, *again)
    assert second.returncode == 0, second.stderr
    steps = [json.loads(line) for line in (tmp_path / "r" / "metrics.jsonl").open()]
    assert [m["step"] for m in steps] == [1, 2, 3, 4]
    if recipe == "value head":
        assert all("value_loss" in m for m in steps)
    summary = json.loads((tmp_path / "r" / "summary.json").read_text())
    assert summary["world_size"] == 2 and summary["steps"] == 4


def agentic_step_on_this_rank(overrides: list[str], out_path: str) -> None:
    """One agentic step on this rank; rank 0 writes what every rank trained on and holds."""
    stacks_if_stuck()
    torch.set_num_threads(1)
    dist = Dist.from_env("cpu")
    run = build_run(load_config(PROJECT / "examples" / "agentic_tiny.toml", overrides), dist)
    metrics, scored = run.step(1)
    groups = sorted(set(scored.rollout.group_ids.tolist()))
    problems = sorted({p.prompt for p in scored.problems})
    weights = torch.cat([w.flatten() for _, w in run.actor.weights()])  # every rank gathers
    views = dist.gather((groups, problems, len(scored), float(weights.double().sum())))
    if dist.main:
        Path(out_path).write_text(json.dumps({"metrics": metrics, "ranks": views}))
    run.close()
    dist.close()


@pytest.mark.timeout(300)
def test_agentic_episodes_are_shared_by_two_ranks_and_trained_as_one_batch(tmp_path):
    # 4 problems x 4 episodes per step: each rank plays 2 groups of its own problems
    overrides = ["rollout.group_size=4", "train.batch_size=16", "train.micro_batch_size=4",
                 "data.eval_size=8", f'run.output_dir="{tmp_path}"']  # fmt: skip
    out = tmp_path / "agentic.json"
    launch(2, agentic_step_on_this_rank, overrides, str(out))
    result = json.loads(out.read_text())
    (groups0, problems0, rows0, sum0), (groups1, problems1, rows1, sum1) = result["ranks"]
    assert len(groups0) == len(groups1) == 2 and not set(groups0) & set(groups1)
    assert problems0 and problems1 and not set(problems0) & set(problems1)
    metrics = result["metrics"]
    assert metrics["agentic/rows"] == rows0 + rows1  # both ranks' rows, counted once each
    assert "update_skipped" not in metrics and metrics["grad_norm"] > 0
    assert sum0 == sum1  # one policy: the sharded update left the ranks' weights equal


def two_steps_with_ray_replicas(overrides: list[str], out_path: str) -> None:
    """Two RL steps on this rank with Ray rollout replicas; rank 0 writes what each rank
    held and generated."""
    import ray

    stacks_if_stuck()
    torch.set_num_threads(1)
    dist = Dist.from_env("cpu")
    run = build_run(load_config(None, overrides), dist)
    engine = run.rollouts.engine
    replicas = len(engine.engine.replicas) if engine.engine is not None else None
    address = ray.get_runtime_context().gcs_address if ray.is_initialized() else None
    steps = []
    for step in (1, 2):
        _, scored = run.step(step)
        groups = sorted(set(scored.rollout.group_ids.tolist()))
        steps.append((groups, len(scored), sorted(set(scored.rollout.versions.tolist()))))
    views = dist.gather((replicas, address, steps))
    if dist.main:
        Path(out_path).write_text(json.dumps(views))
    run.close()
    dist.close()


@pytest.mark.slow  # about a minute: CI runs it in its slow step
@pytest.mark.timeout(300)
def test_ray_rollout_replicas_on_two_ranks_are_started_once_and_serve_both(tmp_path):
    pytest.importorskip("ray")
    overrides = [*UPDATE, f'run.output_dir="{tmp_path}"', 'cluster.backend="ray"',
                 "cluster.rollout_replicas=2", "cluster.reward_workers=1",
                 "cluster.cpus_per_rollout=0.5", "cluster.cpus_per_reward=0.5",
                 "cluster.num_cpus=4"]  # fmt: skip
    out = tmp_path / "ray.json"
    launch(2, two_steps_with_ray_replicas, overrides, str(out))
    (replicas0, address0, steps0), (replicas1, address1, steps1) = json.loads(out.read_text())
    assert replicas0 == 2 and replicas1 is None  # rank 1 started no replica of its own
    assert address0 is not None and address1 == address0  # its reward workers joined rank 0's Ray
    for (groups0, rows0, _), (groups1, rows1, _) in zip(steps0, steps1, strict=True):
        assert rows0 == rows1 == 8 and len(groups0) == len(groups1) == 1  # its own prompt's rows
        assert groups0 != groups1
    assert [v for _, _, v in steps0] == [v for _, _, v in steps1] == [[0], [1]]  # synced once


@pytest.mark.slow  # about 20 s of two ranks started and one killed: CI's slow step
@pytest.mark.timeout(300)
def test_a_rank_that_fails_stops_the_run_in_one_line_naming_it(tmp_path):
    reward = 'reward.functions=["tests.train.failing_reward:fails_on_rank_1"]'
    done = ascent("train", "--nproc", "2", *sets(tmp_path, reward), timeout=120)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert lines[-1] == "error: rank 1 failed: RuntimeError: the reward failed on rank 1"
    assert "Traceback" not in done.stderr


def test_a_config_that_cannot_be_shared_by_the_ranks_is_refused_before_any_starts(tmp_path):
    done = ascent("train", "--nproc", "3", *sets(tmp_path), timeout=60)
    assert done.returncode == 2
    assert "prompts per step cannot be shared by 3 ranks" in done.stderr
    assert not (tmp_path / "r").exists()

"""kill -9 at any moment loses nothing: a run SIGKILLed anywhere, the middle of writing a
checkpoint or a metrics line included, resumes with `--resume` and ends exactly as a run that
was never stopped: every step once in metrics.jsonl, a loadable final-model/, the same weights.

The same holds beyond synchronous GRPO (below): history resampling, positive replay, two ranks
and the classic PPO loop end bit for bit as unbroken runs; asynchronous rollouts and agentic
episodes, whose sampling runs on a thread of its own, keep every step once and the properties
their design allows (the same prompts; no problem twice).
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import random
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM

from ascent.configfile import load_config
from ascent.train import run_training, train_rank
from ascent.train.distributed import launch as launch_ranks
from tests.train.test_llm_loop import SHORT

PROJECT = Path(__file__).resolve().parents[2]
STEPS = 6  # the kill-point test; the random-kill test runs RANDOM_STEPS
RANDOM_STEPS = 120
SETTINGS = [*SHORT, "run.threads=1"]  # total_steps is set per test


def overrides(root: Path, name: str, steps: int = STEPS) -> list[str]:
    return [*SETTINGS, f"train.total_steps={steps}", f'run.output_dir="{root}"', f"run.name={name}"]


def launch(point: str, *ascent_args: str, out: IO[str] | None = None) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "tests.train.kill_points", point, *ascent_args],
        cwd=PROJECT,
        stdout=out or subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "TOKENIZERS_PARALLELISM": "false"},
        start_new_session=True,  # its own process group: a launcher and its ranks die together
    )


def train_args(root: Path, name: str, resume: bool, steps: int = STEPS) -> list[str]:
    sets = [arg for item in overrides(root, name, steps) for arg in ("--set", item)]
    return ["train", *sets, *(["--resume", str(root / name)] if resume else [])]


def assert_ends_like_an_unbroken_run(run: Path, straight: Path, steps: int = STEPS) -> None:
    logged = [json.loads(line)["step"] for line in (run / "metrics.jsonl").open()]
    assert logged == list(range(1, steps + 1))
    summary = json.loads((run / "summary.json").read_text())
    assert summary["steps"] == steps and not summary["interrupted"]
    model = AutoModelForCausalLM.from_pretrained(run / "final-model")
    assert model.num_parameters() > 0
    ours = load_file(run / "final-model" / "model.safetensors")
    theirs = load_file(straight / "final-model" / "model.safetensors")
    for key, value in theirs.items():
        assert torch.equal(ours[key], value), key
    after = json.loads((straight / "summary.json").read_text())["eval_accuracy_after"]
    assert summary["eval_accuracy_after"] == after
    assert [p.name for p in run.rglob("*") if ".tmp" in p.name] == []  # no debris left


def unbroken(root: Path, steps: int) -> Path:
    """The same run, never stopped (run as `ascent train` runs it: threads, seeds)."""
    run_training(load_config(None, overrides(root, "straight", steps)))
    return root / "straight"


@pytest.mark.slow  # about a minute: CI runs it in its slow step
@pytest.mark.timeout(600)
def test_killed_at_every_kind_of_moment_the_run_resumes_to_the_same_end(tmp_path):
    kills = [
        "step:1",  # before the first checkpoint: --resume starts it again
        "checkpoint-write:2",  # state.pt half written
        "metrics-line:3",  # a line cut in half after the step-2 checkpoint
        "checkpoint-rename:4",  # a complete checkpoint not yet in place
        "step:5",  # between checkpoints: step 5 is logged again, once
        "export",  # after the last checkpoint, final-model/ half in place
    ]
    for i, point in enumerate(kills):
        proc = launch(point, *train_args(tmp_path, "killed", resume=i > 0))
        out, _ = proc.communicate(timeout=240)
        assert proc.returncode == -signal.SIGKILL, f"{point}: not killed\n{out}"
        assert "Traceback" not in out
    proc = launch("none", *train_args(tmp_path, "killed", resume=True))
    out, _ = proc.communicate(timeout=240)
    assert proc.returncode == 0, out
    assert_ends_like_an_unbroken_run(tmp_path / "killed", unbroken(tmp_path, STEPS))


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_killed_at_random_moments_the_run_resumes_to_the_same_end(tmp_path):
    rng = random.Random(20261203)
    kills = 0
    resume = False
    while True:
        proc = launch("none", *train_args(tmp_path, "random", resume, RANDOM_STEPS))
        resume = True
        try:
            out, _ = proc.communicate(timeout=rng.uniform(2.0, 9.0))
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGKILL)
            proc.communicate()
            kills += 1
            continue
        assert proc.returncode == 0, out
        break
    assert kills >= 3
    straight = unbroken(tmp_path, RANDOM_STEPS)
    assert_ends_like_an_unbroken_run(tmp_path / "random", straight, RANDOM_STEPS)


# -- beyond synchronous GRPO -------------------------------------------------------------------
#
# The same kills over the other ways a run makes its batches and steps: each variant is killed
# (by default twice: its state file cut in half in the middle of checkpoint 4, then as step 5
# starts) and resumed to the end, so its last steps run on state restored from a checkpoint.
# Every variant ends with every step once in metrics.jsonl and the full count in summary.json,
# no debris, a loadable final model. How much more holds is the variant's `exact`:
#
#   bits          the unbroken run's metrics (all but timings) and weights, value for value
#   prompts       asynchronous rollouts: the batch prefetched when a run stops is lost with the
#                 process, and the resumed run orders its prompts again (the checkpoint keeps
#                 the data position before it) but samples them with its restored policy, one
#                 version newer than the lost batch's, whose weights no checkpoint holds: the
#                 same prompts every step and a continuous policy version, other completions
#   at most once  agentic episodes: groups reach the trainer in the order they finish and a
#                 stale one is dropped, so which problems a step trains on depends on timing
#                 even unbroken; the problems in flight when a run stops are never trained.
#                 No problem is trained twice, and each session trains on problems drawn after
#                 every problem of the sessions before it

EXAMPLES = PROJECT / "examples"
TIMING = ("time", "tokens_per_s", "perf/")  # how long things took, not what the run computed
SESSIONS = ((1, 2), (3, 4), (5, 6))  # the steps each session of the default kills kept
ENV_STEPS = 64  # per classic update: 2 envs x 32 steps


@dataclass(frozen=True)
class Variant:
    settings: tuple[str, ...]
    config: str | None = None  # an example recipe (None: the built-in demo)
    kills: tuple[str, ...] = ("checkpoint-write:4", "step:5")
    nproc: int = 1
    exact: str = "bits"  # bits, prompts or at most once (above)
    restored: str | None = None  # a metric that restored state drives, seen after the resumes
    classic: bool = False
    random_steps: int = 40  # the random-kill test's run (each killed session adds 1 to 1/10 of it)


DUMPS = ("logging.sample_every=1", "logging.num_samples=64")  # every step's prompts, all rows
VARIANTS = {
    # SRPO: a pool of 4 prompts, 2 a step: epochs end at steps 3 and 5, and step 5's report
    # counts the outcomes of steps 3 and 4, recorded before the last kill
    "history resampling": Variant(
        (*SETTINGS, *DUMPS, "sampling.history_resampling=true", "data.train_size=4"),
        restored="resample/seen",
    ),
    # VAPO: a critic, and a quarter of each batch replayed from past correct completions (the
    # buffer is each rank's checkpointed state)
    "positive replay": Variant(
        (*SETTINGS, *DUMPS, "rollout.group_size=4", "train.mini_batch_size=8",
         "train.micro_batch_size=8", "critic.value_warmup_steps=1",
         "sampling.replay_max_staleness=4"),
        config="vapo.toml",
        restored="replay/rows",
    ),
    "async rollouts": Variant((*SETTINGS, *DUMPS, "rollout.async=true"), exact="prompts"),
    # rank 1 dies with its own state file cut in half, rank 0 waiting for it; the launcher
    # takes rank 0 down (one kill: a launch of two ranks takes about 20 s on 2 cores)
    "two ranks": Variant(
        tuple(SETTINGS),
        kills=("checkpoint-write:4@1",),
        nproc=2,
        random_steps=20,
    ),
    "classic ppo": Variant(
        ("env.num_envs=2", "train.rollout_steps=32", "train.batch_size=32",
         "train.update_epochs=2", "train.save_every=2", "logging.progress=false",
         "run.threads=1"),
        config="ppo_cartpole.toml",
        classic=True,
        random_steps=200,
    ),
    "agentic episodes": Variant(
        ("rollout.group_size=4", "train.batch_size=16", "train.micro_batch_size=16",
         "train.eval_steps=2", "train.save_steps=2", "data.eval_size=24",
         "logging.progress=false", "run.threads=1", *DUMPS),
        config="agentic_tiny.toml",
        exact="at most once",
        random_steps=24,
    ),
}  # fmt: skip


def variant_items(v: Variant, root: Path, name: str, steps: int) -> list[str]:
    length = (
        f"train.total_timesteps={steps * ENV_STEPS}" if v.classic else f"train.total_steps={steps}"
    )
    return [*v.settings, length, f'run.output_dir="{root}"', f"run.name={name}"]


def variant_args(v: Variant, root: Path, name: str, resume: bool, steps: int) -> list[str]:
    config = [str(EXAMPLES / v.config)] if v.config else []
    nproc = ["--nproc", str(v.nproc)] if v.nproc > 1 else []
    sets = [arg for item in variant_items(v, root, name, steps) for arg in ("--set", item)]
    return ["train", *config, *nproc, *sets, *(["--resume", str(root / name)] if resume else [])]


def killed_at(v: Variant, point: str, root: Path, resume: bool) -> None:
    proc = launch(point, *variant_args(v, root, "killed", resume, STEPS))
    out, _ = proc.communicate(timeout=240)
    assert "Traceback" not in out, out
    if v.nproc == 1:
        assert proc.returncode == -signal.SIGKILL, f"{point}: not killed\n{out}"
    else:  # the launcher takes the other ranks down and names the one that died
        assert proc.returncode == 2, f"{point}: not killed\n{out}"
        rank = point.partition("@")[2]
        last = out.strip().splitlines()[-1]
        assert last.startswith(f"error: rank {rank} failed: Signal 9 (SIGKILL)"), out


def resumed_to_the_end(v: Variant, root: Path, steps: int = STEPS) -> Path:
    proc = launch("none", *variant_args(v, root, "killed", True, steps))
    out, _ = proc.communicate(timeout=240)
    assert proc.returncode == 0, out
    return root / "killed"


def unbroken_variant(v: Variant, root: Path, steps: int = STEPS) -> Path:
    """The same run never stopped, started from this process as `ascent train` starts it."""
    config = EXAMPLES / v.config if v.config else None
    items = variant_items(v, root, "straight", steps)
    if v.nproc == 1:
        run_training(load_config(config, items))
    else:
        launch_ranks(v.nproc, train_rank, str(config) if config else None, items, None, False)
    return root / "straight"


def metrics_rows(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").open()]


def computed(row: dict) -> dict:
    return {k: v for k, v in row.items() if not k.startswith(TIMING)}


def differences(ours: dict, theirs: dict) -> dict:
    """The values of two metrics lines that differ, bit for bit: a run resumed from its
    checkpoints computes what the unbroken run computed. (A tolerance once hid a real gap:
    classic PPO's first step after a resume multiplied a differently laid out copy of the
    observations, which rounds otherwise in the last bit, and the runs drifted apart.)"""

    def same(a: object, b: object) -> bool:  # NaN is NaN here: both computed "undefined"
        return a == b or (isinstance(a, float) and isinstance(b, float) and a != a and b != b)

    keys = ours.keys() | theirs.keys()
    return {k: (ours.get(k), theirs.get(k)) for k in keys if not same(ours.get(k), theirs.get(k))}


def dumped(run: Path, step: int) -> list[dict]:
    return [json.loads(line) for line in (run / "samples" / f"step-{step:06d}.jsonl").open()]


def assert_every_step_once(run: Path, v: Variant, steps: int) -> list[dict]:
    rows = metrics_rows(run)  # every line whole
    assert [r["step"] for r in rows] == list(range(1, steps + 1))
    summary = json.loads((run / "summary.json").read_text())
    if v.classic:
        assert summary["updates"] == steps and summary["env_steps"] == steps * ENV_STEPS
    else:
        assert summary["steps"] == steps and not summary["interrupted"]
        assert AutoModelForCausalLM.from_pretrained(run / "final-model").num_parameters() > 0
    assert [p.name for p in run.rglob("*") if ".tmp" in p.name] == []  # no debris left
    return rows


def assert_versions_continue(rows: list[dict], max_staleness: int) -> None:
    """Each step's batch was sampled by a policy at most max_staleness updates behind the
    trainer's, whose version is the last step that updated it (restored on resume)."""
    version = 0
    for row in rows:
        assert row["policy_version"] + row["staleness"] == version, row["step"]
        assert 0 <= row["staleness"] <= max_staleness, row["step"]
        if "update_skipped" not in row:
            version = row["step"]


def final_weights(run: Path, v: Variant, steps: int) -> dict[str, torch.Tensor]:
    if v.classic:  # no final-model/: the last checkpoint holds the agent
        state = run / "checkpoints" / f"step-{steps:06d}" / "state.pt"
        return torch.load(state, weights_only=True)["agent"]
    return load_file(run / "final-model" / "model.safetensors")


def assert_ends_as_promised(run: Path, straight: Path, v: Variant, steps: int) -> list[dict]:
    """Every step once, and what the variant's `exact` promises besides (above)."""
    rows, same = assert_every_step_once(run, v, steps), metrics_rows(straight)
    if v.exact == "bits":
        for row, twin in zip(rows, same, strict=True):
            diff = differences(computed(row), computed(twin))
            assert not diff, f"step {row['step']}: {diff}"
        ours, theirs = final_weights(run, v, steps), final_weights(straight, v, steps)
        assert ours.keys() == theirs.keys()
        for key, value in theirs.items():
            assert torch.equal(ours[key], value), key
        return rows
    assert_versions_continue(rows, max_staleness=1)
    if v.exact == "prompts":
        for step in range(1, steps + 1):
            ours, theirs = dumped(run, step), dumped(straight, step)
            assert sorted(r["prompt"] for r in ours) == sorted(r["prompt"] for r in theirs), step
    else:  # at most once: no problem trained twice
        trained = [{r["group"] for r in dumped(run, s)} for s in range(1, steps + 1)]
        assert sum(map(len, trained)) == len(set().union(*trained))
    return rows


# The suite stays within its 10 minutes on 2 cores: the one variant of about 20 s that is
# killed at its checkpoint runs in it, the others (20-90 s each: a critic, two ranks, agentic
# episodes, async rollouts, classic PPO) with the slow tests (`-m slow`).
SLOW_VARIANTS = ("positive replay", "two ranks", "agentic episodes", "async rollouts",
                 "classic ppo")  # fmt: skip
FAST_THEN_SLOW = [
    pytest.param(name, marks=pytest.mark.slow) if name in SLOW_VARIANTS else name
    for name in VARIANTS
]


@pytest.mark.timeout(300)
@pytest.mark.parametrize("name", FAST_THEN_SLOW)
def test_each_kind_of_run_killed_and_resumed_trains_every_step_once(tmp_path, name):
    v = VARIANTS[name]
    for i, point in enumerate(v.kills):
        killed_at(v, point, tmp_path, resume=i > 0)
    run = resumed_to_the_end(v, tmp_path)
    rows = assert_ends_as_promised(run, unbroken_variant(v, tmp_path), v, STEPS)
    if v.restored is not None:  # the restored state was at work after the last resume
        assert any(row.get(v.restored) for row in rows[SESSIONS[-1][0] - 1 :]), v.restored
    if v.exact == "prompts":  # each resume samples the lost batch's prompts with its policy
        assert [rows[a - 1]["staleness"] for a, _ in SESSIONS] == [0, 0, 0]
    if v.exact == "at most once":  # each session's problems after every earlier one's
        groups = [
            {r["group"] for s in range(a, b + 1) for r in dumped(run, s)} for a, b in SESSIONS
        ]
        assert all(max(a) < min(b) for a, b in itertools.pairwise(groups))


def logged_step(run: Path) -> int:
    """The last step with a whole line in metrics.jsonl (0: none)."""
    steps = [0]
    with contextlib.suppress(FileNotFoundError):
        for line in (run / "metrics.jsonl").read_text().splitlines():
            with contextlib.suppress(ValueError, KeyError):
                steps.append(json.loads(line)["step"])
    return max(steps)


def until_a_random_moment(proc: subprocess.Popen, run: Path, rng: random.Random, steps: int):
    """Let a session run to a random moment and SIGKILL it there, with its ranks and sandboxes
    (True), or to its end (False). One in four dies starting (loading, resuming: at a random
    time before its first step is logged, or as that step is logged); the others a random
    fraction of one step's time (as seen here, at most a second) after logging a random step
    past every step logged before, so that each of those adds at least one (a kill at a
    random time could catch every session starting on a busy machine, and a pause of
    seconds lets a fast machine finish the run before a third kill)."""
    start = logged_step(run)
    if rng.random() < 0.25:
        deadline = time.monotonic() + rng.uniform(0.5, 8.0)
        reached = lambda: time.monotonic() >= deadline or logged_step(run) > start  # noqa: E731
    else:
        target = start + rng.randint(1, max(1, steps // 10))
        reached = lambda: logged_step(run) >= target  # noqa: E731
    fraction = rng.uniform(0.0, 1.0)
    seen, seen_at, step_s = start, time.monotonic(), 1.0
    while proc.poll() is None:
        now, step = time.monotonic(), logged_step(run)
        if step > seen:
            if seen > start:  # a step's time, from one logged step to the next
                step_s = min(1.0, (now - seen_at) / (step - seen))
            seen, seen_at = step, now
        if reached():
            time.sleep(fraction * step_s)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            return proc.returncode == -signal.SIGKILL
        time.sleep(0.05)
    return False


@pytest.mark.slow
@pytest.mark.timeout(1800)
@pytest.mark.parametrize("name", list(VARIANTS))
def test_each_kind_of_run_killed_at_random_moments_trains_every_step_once(tmp_path, name):
    v, steps = VARIANTS[name], VARIANTS[name].random_steps
    rng = random.Random(f"20261203 {name}")
    run, log = tmp_path / "killed", tmp_path / "session.log"
    kills = 0
    while True:
        resume = (run / "config.toml").is_file()
        with log.open("w") as out:
            proc = launch("none", *variant_args(v, tmp_path, "killed", resume, steps), out=out)
            if until_a_random_moment(proc, run, rng, steps):
                kills += 1
                continue
        assert proc.returncode == 0, log.read_text()
        break
    assert kills >= 3, kills
    assert_ends_as_promised(run, unbroken_variant(v, tmp_path, steps), v, steps)

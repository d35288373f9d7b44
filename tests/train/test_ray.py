"""Roles on a real (local) Ray cluster: rollout replicas and reward workers as actors, the
same verdicts as the local pool, actors killed mid-run and restarted, placements refused
within seconds, and asynchronous rollouts within their staleness bound."""

from __future__ import annotations

import json
import time

import pytest
import torch

pytest.importorskip("ray")
import ray

from ascent.config.cluster import ClusterSection
from ascent.configfile import load_config
from ascent.errors import AscentError, ConfigError
from ascent.rundir import RunDir
from ascent.train.controller import Controller
from ascent.train.llm import train_llm
from ascent.train.llm_setup import build_run
from tests.train.test_llm_loop import config

RAY = [
    'cluster.backend="ray"',
    "cluster.rollout_replicas=2",
    "cluster.reward_workers=2",
    "cluster.cpus_per_rollout=0.5",
    "cluster.cpus_per_reward=0.5",
    "cluster.timeout_sec=60",
]


@pytest.fixture(scope="module", autouse=True)
def local_ray():
    ray.init(num_cpus=4, include_dashboard=False, ignore_reinit_error=True)
    yield
    ray.shutdown()


@pytest.mark.timeout(300)
def test_a_ray_run_writes_what_a_local_run_writes_plus_its_placement(tmp_path):
    cfg = config(tmp_path, *RAY)
    summary = train_llm(cfg, RunDir.create(cfg))
    local_cfg = config(tmp_path, name="local")
    local = train_llm(local_cfg, RunDir.create(local_cfg))
    assert summary.keys() == local.keys()
    assert summary["placement"] == {"backend": "ray", "placement": "pack", "rollout_replicas": 2,
                                    "reward_workers": 2, "nodes": 1}  # fmt: skip
    # Before any update, the replicas hold the policy the local run starts from: greedy
    # evaluation of the same held-out problems scores the same.
    for key in ("eval_accuracy_before", "eval_reward_before", "eval_problems", "steps"):
        assert summary[key] == local[key], key
    rows = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").open()]
    local_rows = [json.loads(x) for x in (tmp_path / "local" / "metrics.jsonl").open()]
    assert [r["step"] for r in rows] == [1, 2, 3, 4]
    # The same metrics, each in range; sampling differs (each replica draws with its own
    # generator), so the values are compared with what they must be, not with the local run's.
    assert {k for r in local_rows for k in r} <= {k for r in rows for k in r}
    for r, mine in zip(rows, local_rows, strict=True):
        assert r["lr"] == mine["lr"] and r["policy_version"] == mine["policy_version"]
        assert -1.0 <= r["reward"] <= 1.0 and 0.0 <= r["frac_reward_zero_std"] <= 1.0
        assert r["entropy"] > 0.0 and r["grad_norm"] > 0.0
    # After each weight sync the replicas score their own samples as the trainer does.
    assert max(r["engine/logprob_gap"] for r in rows) < 1e-4
    assert rows[-1]["cluster/rollout_restarts"] == 0 and rows[-1]["cluster/reward_restarts"] == 0
    assert rows[-1]["policy_version"] == 3  # every batch carries the version that sampled it


def test_code_rewards_on_ray_workers_give_the_local_pools_verdicts(tmp_path):
    from ascent.cluster.rewards import RayRewardPool
    from ascent.config.rewards import RewardSection, SandboxSection
    from ascent.data.bundled import bundled_path
    from ascent.data.code_problems import load_code_problems
    from ascent.rewards import build_reward

    problems = load_code_problems(bundled_path("code_contests_sample"), limit=4)
    programs = ["print(input())", "import sys\nprint(sum(map(int, sys.stdin.read().split())))",
                "print(0)", "while True: pass"]  # fmt: skip
    completions = [f"```python\n{programs[i % 4]}\n```" for i in range(8)]
    prompts = [problems[i % 4].statement for i in range(8)]
    rows = [problems[i % 4].reward_columns() for i in range(8)]
    columns = {key: [row.get(key) for row in rows] for key in rows[0]}
    reward, sandbox = RewardSection(functions=["code"]), SandboxSection(workers=2)
    with build_reward(reward, sandbox) as local:
        expected = local(prompts, completions, **columns)
    cluster = ClusterSection(backend="ray", reward_workers=2, cpus_per_reward=0.5)
    with RayRewardPool(cluster, reward, sandbox) as pool:
        got = pool(prompts, completions, **columns)
    assert got.total == expected.total
    verdicts = [{k: d["code"].get(k) for k in ("passed", "total")} for d in got.details]
    assert verdicts == [{k: d["code"].get(k) for k in ("passed", "total")}
                        for d in expected.details]  # fmt: skip


def groups() -> list[tuple[str, list[dict[str, float]]]]:
    """The placement groups holding resources now: (strategy, bundles)."""
    table = ray.util.placement_group_table().values()
    return [(g["strategy"], list(g["bundles"].values())) for g in table
            if g["state"] == "CREATED"]  # fmt: skip


def test_actors_sit_in_a_placement_group_laid_out_as_placement_says():
    from ascent.cluster.rewards import RayRewardPool
    from ascent.config.rewards import RewardSection, SandboxSection

    before = groups()
    cluster = ClusterSection(backend="ray", reward_workers=2, cpus_per_reward=0.5,
                             placement="spread")  # fmt: skip
    with RayRewardPool(cluster, RewardSection(functions=["math"]), SandboxSection()) as pool:
        assert groups() == [*before, ("SPREAD", [{"CPU": 0.5}, {"CPU": 0.5}])]
        scored = pool(["1+1?"] * 2, [r"\boxed{2}", r"\boxed{3}"], answer=["2", "2"])
        assert scored.total == [1.0, -1.0]
    assert groups() == before  # its resources are given back


def test_a_run_that_fails_to_start_stops_the_replicas_it_started(tmp_path, monkeypatch):
    from ascent.train import llm_setup

    def no_reward(cfg):
        raise ConfigError("the reward could not be built")

    monkeypatch.setattr(llm_setup, "_reward", no_reward)
    before = groups()
    with pytest.raises(ConfigError, match="could not be built"):
        build_run(config(tmp_path, *RAY), torch.device("cpu"))
    assert groups() == before  # the replicas' placement group (and so the replicas) are gone


@pytest.mark.slow  # about 20 s of killed and restarted actors: CI runs it in its slow step
def test_killed_reward_and_rollout_actors_are_restarted_and_nothing_is_lost(tmp_path, monkeypatch):
    cfg = config(tmp_path, *RAY, "train.total_steps=4")
    original = Controller.step

    def killing(run, step):
        if step == 2:  # mid-run: one of each kind dies (Ray restarts them)
            ray.kill(run.rollouts.reward.workers[0], no_restart=False)
            ray.kill(run.engine.replicas[1], no_restart=False)
        return original(run, step)

    monkeypatch.setattr(Controller, "step", killing)
    train_llm(cfg, RunDir.create(cfg))
    rows = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").open()]
    assert [r["step"] for r in rows] == [1, 2, 3, 4]
    assert rows[-1]["cluster/reward_restarts"] >= 1
    assert rows[-1]["cluster/rollout_restarts"] >= 1
    # the restarted replica got the trainer's weights back: its samples are the policy's
    assert rows[1]["engine/logprob_gap"] < 1e-4 and rows[-1]["engine/logprob_gap"] < 1e-4


def test_a_placement_the_cluster_cannot_satisfy_is_refused_at_once(tmp_path):
    cfg = config(tmp_path, *RAY[:1], "cluster.reward_workers=64", "cluster.cpus_per_reward=1")
    start = time.monotonic()
    with pytest.raises(AscentError, match="needs 64 CPUs but the cluster has 4"):
        build_run(cfg, torch.device("cpu"))
    assert time.monotonic() - start < 10


def test_an_unreachable_address_is_one_line_within_seconds(tmp_path, run_cli):
    ray.shutdown()
    try:
        start = time.monotonic()
        sets = ['cluster.backend="ray"', 'cluster.address="ray://127.0.0.1:9"',
                "cluster.reward_workers=1", f'run.output_dir="{tmp_path}"']  # fmt: skip
        code, _, err = run_cli("train", *[a for s in sets for a in ("--set", s)])
        assert code == 2 and "nothing answers at ray://127.0.0.1:9" in err
        assert len(err.strip().splitlines()) == 1 and time.monotonic() - start < 15
    finally:
        ray.init(num_cpus=4, include_dashboard=False, ignore_reinit_error=True)


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        (["cluster.reward_workers=2"], 'only the ray backend uses it; set backend = "ray"'),
        ([RAY[0]], 'backend = "ray" places nothing: set rollout_replicas'),
        ([RAY[0], "cluster.reward_workers=2", "cluster.cpus_per_rollout=2"],
         "cpus_per_rollout: rollout_replicas = 0, so no actor takes it"),
        ([RAY[0], "cluster.rollout_replicas=2", 'rollout.engine="vllm"'],
         'Ray replicas cannot run \\[rollout\\] engine = "vllm"; .* use engine = "transformers"'),
    ],
)  # fmt: skip
def test_cluster_settings_that_cannot_act_are_refused(settings, message):
    with pytest.raises(ConfigError, match=message):
        load_config(None, settings)


def test_engine_is_cap_is_called_inert_only_where_no_correction_runs():
    cap, f32 = "algorithm.engine_is_cap=3.0", 'model.dtype="float32"'
    assert any("engine_is_cap" in w for w in load_config(None, [cap, f32]).warnings)
    sampled_ahead = load_config(None, [cap, f32, "rollout.async=true"])
    on_replicas = load_config(None, [cap, f32, RAY[0], "cluster.rollout_replicas=2"])
    assert not any("engine_is_cap" in w for w in sampled_ahead.warnings + on_replicas.warnings)


@pytest.mark.timeout(300)
def test_asynchronous_rollouts_stay_within_max_staleness(tmp_path):
    cfg = config(tmp_path, "rollout.async=true", "rollout.max_staleness=2", "train.total_steps=6")
    run = build_run(cfg, torch.device("cpu"))
    try:
        staleness = [run.step(step)[0]["staleness"] for step in range(1, 7)]
    finally:
        run.close()
    assert max(staleness) == 2 and min(staleness) == 0  # the first batch is on-policy


def test_doctor_checks_the_cluster_its_resources_and_ray_versions():
    from ascent.doctor.checks import run_doctor

    good = {c.name: c for c in run_doctor(None, [*RAY[:3], "cluster.cpus_per_rollout=0.5"])}
    assert good["cluster"].status == "ok" and "1 node(s), 4 CPUs" in good["cluster"].detail
    assert good["cluster resources"].status == "ok"
    assert good["ray versions"].status == "ok" and ray.__version__ in good["ray versions"].detail
    big = {c.name: c for c in run_doctor(None, [*RAY[:1], "cluster.reward_workers=9"])}
    assert big["cluster resources"].status == "fail"
    assert "needs 9 CPUs but the cluster has 4" in big["cluster resources"].detail


def test_a_node_on_another_ray_is_refused_by_a_run_and_failed_by_doctor(monkeypatch):
    # One Ray version per machine here: the other node's report is the one thing faked.
    from ascent.cluster import runtime
    from ascent.doctor.checks import run_doctor

    real = runtime.node_versions
    monkeypatch.setattr(runtime, "node_versions", lambda r: real(r) | {"10.0.0.2": "2.0.0"})
    cluster = ClusterSection(backend="ray", reward_workers=1, cpus_per_reward=0.5)
    with pytest.raises(AscentError, match=f"driver runs Ray {ray.__version__} but 10.0.0.2 has"):
        runtime.check_cluster(cluster)
    checks = {c.name: c for c in run_doctor(None, [*RAY[:1], "cluster.reward_workers=1"])}
    assert checks["ray versions"].status == "fail"
    assert "10.0.0.2 has 2.0.0; install one version everywhere" in checks["ray versions"].detail

"""The LLM trainer end to end on the shipped tiny model: seconds per test on a CPU."""

from __future__ import annotations

import dataclasses
import json
import os
import signal

import pytest
import torch

from ascent.configfile import load_config
from ascent.errors import ConfigError
from ascent.models import load_policy
from ascent.rundir import RunDir, latest_checkpoint
from ascent.train import llm_rollout
from ascent.train.actor import Actor
from ascent.train.controller import Controller
from ascent.train.llm import train_llm
from ascent.train.llm_checkpoint import policy_from_checkpoint
from ascent.train.llm_setup import build_run
from ascent.train.reference import ModelReference

SHORT = [
    "train.total_steps=4",
    "train.batch_size=16",
    "train.micro_batch_size=16",
    "train.eval_steps=2",
    "train.save_steps=2",
    "data.eval_size=24",
    "rollout.max_new_tokens=4",
    "logging.progress=false",
    "logging.sample_every=2",
]


def config(tmp_path, *overrides: str, name: str = "run"):
    return load_config(
        None, [*SHORT, f'run.output_dir="{tmp_path}"', f"run.name={name}", *overrides]
    )


def weights(path) -> dict[str, torch.Tensor]:
    """The policy weights a checkpoint holds (its run's [model], read from config.toml)."""
    model = load_config(path.parents[1] / "config.toml").model
    return policy_from_checkpoint(path, model).state_dict()


def test_short_grpo_run_writes_metrics_samples_checkpoints_and_summary(tmp_path):
    cfg = config(tmp_path)
    run_dir = RunDir.create(cfg)
    summary = train_llm(cfg, run_dir)

    assert summary["steps"] == 4 and summary["wall_s"] > 0
    for key in ("eval_accuracy_before", "eval_accuracy_after"):
        assert 0.0 <= summary[key] <= 1.0
    assert json.loads(run_dir.summary_path.read_text())["paths"]["run_dir"] == str(run_dir.path)
    rows = [json.loads(line) for line in run_dir.metrics_path.read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2, 3, 4]
    for name in ("reward", "reward_std", "frac_reward_zero_std", "entropy", "clip_ratio",
                 "completions/mean_length", "adv_std", "loss", "grad_norm", "lr",
                 "tokens_per_s", "reward/math"):  # fmt: skip
        assert name in rows[-1], name
    assert "kl" not in rows[-1]  # kl_coef = 0: no reference model, no KL to report
    assert "eval/accuracy" in rows[1] and "eval/accuracy" not in rows[0]
    assert sorted(p.name for p in run_dir.samples_dir.iterdir()) == [
        "eval-before.jsonl", "eval-step-000002.jsonl", "eval-step-000004.jsonl",
        "step-000002.jsonl", "step-000004.jsonl",
    ]  # fmt: skip
    assert latest_checkpoint(run_dir.path).name == "step-000004"


def test_a_finished_run_exports_its_policy_and_any_checkpoint_can_be_served(tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from ascent.serve.local_policy import find_model_dir

    cfg = config(tmp_path)
    run_dir = RunDir.create(cfg)
    train_llm(cfg, run_dir)
    final = run_dir.path / "final-model"
    assert json.loads(run_dir.summary_path.read_text())["paths"]["final_model"] == str(final)
    exported = AutoModelForCausalLM.from_pretrained(final).state_dict()
    assert_same(exported, weights(run_dir.path / "checkpoints" / "step-000004"))
    assert AutoTokenizer.from_pretrained(final)("12+34=")["input_ids"]
    assert find_model_dir(run_dir.path) == final

    # a checkpoint holds weights only: serving it exports them once, with the run's tokenizer
    ckpt = run_dir.path / "checkpoints" / "step-000002"
    model_dir = find_model_dir(ckpt)
    assert model_dir == ckpt / "model" and (model_dir / "tokenizer_config.json").is_file()
    assert_same(AutoModelForCausalLM.from_pretrained(model_dir).state_dict(), weights(ckpt))
    assert any(
        not torch.equal(a, b)
        for a, b in zip(exported.values(), weights(ckpt).values(), strict=True)
    )


def stop_at(step: int, monkeypatch, sig: int = signal.SIGINT) -> None:
    """Press Ctrl-C (or send `sig`) during `step` (the loop finishes it, saves, and raises
    KeyboardInterrupt)."""
    original = Controller.step

    def interrupted(run, current):
        if current == step:
            os.kill(os.getpid(), sig)
        return original(run, current)

    monkeypatch.setattr(Controller, "step", interrupted)


def test_resume_gives_the_same_weights_as_one_uninterrupted_run(tmp_path, monkeypatch):
    straight = config(tmp_path, name="straight")
    train_llm(straight, RunDir.create(straight))

    split = config(tmp_path, "train.save_steps=0", name="split")
    with monkeypatch.context() as patch:
        stop_at(2, patch)
        with pytest.raises(KeyboardInterrupt):
            train_llm(split, RunDir.create(split))
    assert not (tmp_path / "split" / "final-model").exists()  # exported only when finished
    resumed = RunDir.create(split, resume=tmp_path / "split")
    assert resumed.resume_from.name == "step-000002"
    train_llm(split, resumed)

    a = weights(tmp_path / "straight" / "checkpoints" / "step-000004")
    b = weights(tmp_path / "split" / "checkpoints" / "step-000004")
    assert_same(a, b)
    start = load_policy(straight.model, torch.device("cpu")).state_dict()
    assert any(not torch.allclose(a[k], start[k], atol=1e-5) for k in a)  # it did train
    steps = [json.loads(x)["step"] for x in (tmp_path / "split" / "metrics.jsonl").open()]
    assert steps == [1, 2, 3, 4]
    summary = json.loads((tmp_path / "split" / "summary.json").read_text())
    assert not summary["interrupted"] and summary["eval_accuracy_before"] is not None


def build(cfg, **parts):
    """The run of `cfg`, its algorithm parts changed by `parts`."""
    run = build_run(cfg, torch.device("cpu"))
    if parts:
        changed = dataclasses.replace(run.credit.parts, **parts)
        run.actor.parts = changed
        run.credit = dataclasses.replace(run.credit, parts=changed)
    return run


def one_update(cfg, **parts) -> dict[str, torch.Tensor]:
    """The policy's weights after one RL step from the same rollouts."""
    run = build(cfg, **parts)
    rollout, problems = run.rollouts.collect()
    batch, _ = run.train_batch(run.rollouts.score(rollout, problems))
    run.actor.update(batch, step=1)
    run.close()
    return {k: v.clone() for k, v in run.actor.model.state_dict().items()}


def one_gradient(cfg, **parts) -> dict[str, torch.Tensor]:
    """The clipped policy gradient of the first optimiser step of one RL step.

    Split invariance is a property of the gradient; after Adam's first step (an update of
    about lr * sign(g)) float32 rounding in components near 0 shows up as lr-sized
    differences in the weights, so the weights are not where to check it.
    """
    run = build(cfg, **parts)
    grads: dict[str, torch.Tensor] = {}

    def record(*args, **kwargs):
        if not grads:
            grads.update({n: p.grad.clone() for n, p in run.actor.model.named_parameters()})

    run.actor.optimizer.step = record
    rollout, problems = run.rollouts.collect()
    batch, _ = run.train_batch(run.rollouts.score(rollout, problems))
    run.actor.update(batch, step=1)
    run.close()
    return grads


def assert_same_gradient(a, b):
    scale = max(float(g.abs().max()) for g in a.values())
    assert scale > 0  # there was something to learn
    for name in a:
        assert torch.allclose(a[name], b[name], atol=1e-6 * scale, rtol=1e-4), name


def assert_same(a, b, atol=1e-6):
    for name in a:
        assert torch.allclose(a[name], b[name], atol=atol, rtol=0), name


@pytest.mark.parametrize("agg", ["seq_mean_token_mean", "token_mean", "seq_mean_token_sum_norm"])
def test_update_does_not_depend_on_the_micro_batch_split(tmp_path, agg):
    whole = one_gradient(config(tmp_path, f'algorithm.loss_agg="{agg}"'))
    split = one_gradient(
        config(tmp_path, f'algorithm.loss_agg="{agg}"', "train.micro_batch_size=4")
    )
    assert_same_gradient(whole, split)


@pytest.mark.parametrize("agg", ["seq_mean_token_mean", "token_mean"])
def test_update_does_not_depend_on_a_token_budget_cut(tmp_path, agg):
    whole = one_gradient(config(tmp_path, f'algorithm.loss_agg="{agg}"'))
    budget = one_gradient(
        config(tmp_path, f'algorithm.loss_agg="{agg}"', "train.max_tokens_per_micro_batch=40")
    )
    assert_same_gradient(whole, budget)


def test_skipping_zero_advantage_completions_gives_the_same_update(tmp_path):
    cfg = config(tmp_path, "train.batch_size=32", "train.micro_batch_size=8")
    run = build_run(cfg, torch.device("cpu"))
    assert run.credit.parts.skip_zero_advantage
    assert_same_gradient(one_gradient(cfg), one_gradient(cfg, skip_zero_advantage=False))


def test_no_forward_pass_recomputes_old_logprobs(tmp_path, monkeypatch):
    calls = []
    for worker in (Actor, ModelReference):
        original = worker.logprobs
        counted = lambda *a, _f=original, **k: calls.append(1) or _f(*a, **k)  # noqa: E731
        monkeypatch.setattr(worker, "logprobs", counted)
    one_update(config(tmp_path))  # one update per batch: old = current policy
    one_update(
        config(
            tmp_path, "train.ppo_epochs=2", "train.mini_batch_size=8", "train.micro_batch_size=8"
        )
    )
    assert calls == []  # the engine's log-probs are the policy's own
    one_update(config(tmp_path, "algorithm.kl_coef=0.01"))
    assert calls == [1]  # the reference model's log-probs, once per batch


@pytest.mark.parametrize("mode", ["loss", "reward"])
def test_kl_to_the_reference_is_logged_and_penalised_when_kl_coef_is_set(tmp_path, mode):
    cfg = config(
        tmp_path, "algorithm.kl_coef=0.05", "train.total_steps=2", f'algorithm.kl_mode="{mode}"'
    )
    run_dir = RunDir.create(cfg)
    train_llm(cfg, run_dir)
    rows = [json.loads(x) for x in run_dir.metrics_path.open()]
    assert all(r["kl"] > -1e-6 for r in rows) and rows[-1]["kl"] > 1e-4  # k3 >= 0 up to rounding


def test_ctrl_c_finishes_the_step_saves_and_exits(tmp_path, monkeypatch):
    cfg = config(tmp_path, "train.save_steps=0")
    stop_at(2, monkeypatch)
    run_dir = RunDir.create(cfg)
    before = signal.getsignal(signal.SIGINT)  # SIG_IGN when CI starts us in the background
    with pytest.raises(KeyboardInterrupt):
        train_llm(cfg, run_dir)
    assert latest_checkpoint(run_dir.path).name == "step-000002"
    summary = json.loads(run_dir.summary_path.read_text())
    assert summary["interrupted"] and summary["steps"] == 2
    assert signal.getsignal(signal.SIGINT) == before  # the loop restores the caller's handler


def test_sigterm_is_a_graceful_stop_too(tmp_path, monkeypatch):
    """`kill` or a scheduler's preemption: the step finishes, a checkpoint is saved."""
    cfg = config(tmp_path, "train.save_steps=0")
    stop_at(2, monkeypatch, signal.SIGTERM)
    run_dir = RunDir.create(cfg)
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(KeyboardInterrupt):
        train_llm(cfg, run_dir)
    assert latest_checkpoint(run_dir.path).name == "step-000002"
    assert json.loads(run_dir.summary_path.read_text())["interrupted"]
    assert signal.getsignal(signal.SIGTERM) == before


def test_rows_no_reward_applies_to_are_left_out_not_trained_on_as_zero(tmp_path):
    from ascent.rewards import CompositeReward

    def every_other(prompts, completions, **_):  # None: "does not apply to this row"
        return [None if i % 2 else float(len(c)) for i, c in enumerate(completions)]

    run = build_run(config(tmp_path), torch.device("cpu"))
    policy = run.actor.model
    run.close()
    run.rollouts.reward = CompositeReward({"every_other": every_other}, [1.0])
    metrics, scored = run.step(1)
    assert metrics["frac_unscored"] == 0.5 and "update_skipped" not in metrics
    kept = llm_rollout.trainable(scored, needs_groups=True)
    assert len(kept.completions) == 8 and all(t is not None for t in kept.rewards.total)

    run.rollouts.reward = CompositeReward({"none": lambda p, c, **_: [None] * len(c)}, [1.0])
    before = {k: v.clone() for k, v in policy.state_dict().items()}
    metrics, _ = run.step(2)
    assert metrics["update_skipped"] == 1.0 and "reward" not in metrics
    assert_same(before, policy.state_dict(), atol=0)


def test_every_chosen_token_of_a_multi_turn_row_is_trained(tmp_path):
    """An agentic row has masked observation tokens between its turns, so its last chosen
    token lies past its count of chosen tokens; the micro-batch trim must keep it."""
    from ascent.rollout.batch import RolloutBatch
    from ascent.train.train_batch import TrainBatch

    cfg = config(tmp_path, "optim.weight_decay=0.0", "train.micro_batch_size=1")
    run = build_run(cfg, torch.device("cpu"))
    prompt = torch.tensor([run.tokenizer("12+34=")["input_ids"]])
    response = torch.tensor([run.tokenizer("46 ok 7")["input_ids"][:7]])
    turn1 = torch.tensor([[1.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0]])  # policy turn, then observation
    turn2 = torch.tensor([[0.0, 0.0, 0.0, 0.0, 0.0, 1.0, 1.0]])  # the second policy turn
    rollout = RolloutBatch(
        prompt_ids=prompt,
        prompt_mask=torch.ones_like(prompt),
        response_ids=response,
        response_mask=turn1 + turn2,
        logprobs=torch.zeros(1, 7),
        group_ids=torch.zeros(1, dtype=torch.long),
        finished=torch.ones(1, dtype=torch.bool),
        versions=torch.zeros(1, dtype=torch.long),
    )
    before = {k: v.clone() for k, v in run.actor.model.state_dict().items()}
    # only the second turn carries advantage: dropping it leaves no gradient at all
    run.actor.update(TrainBatch(rollout, turn2 * 1.0, None, None), step=1)
    after = run.actor.model.state_dict()
    run.close()
    assert any(not torch.equal(before[k], after[k]) for k in before)


def test_partial_rollouts_swap_weights_into_generations_in_flight(tmp_path):
    """[rollout] async + partial on the untrained tiny model, whose completions run to
    max_new_tokens: batches generated ahead take each update's weights mid-generation
    (rollout/weight_swaps rises), later batches are sampled by updated weights and none lags
    more than max_staleness versions."""
    cfg = config(
        tmp_path,
        'model.name_or_path="ascent:tiny"',
        "rollout.async=true",
        "rollout.partial=true",
        "rollout.max_new_tokens=48",
        "train.total_steps=8",
        "train.eval_steps=0",
        "train.save_steps=0",
    )
    summary = train_llm(cfg, RunDir.create(cfg))
    assert summary["steps"] == 8
    rows = [
        json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
    ]
    swaps = [r["rollout/weight_swaps"] for r in rows]
    assert swaps == sorted(swaps) and swaps[-1] >= 1, swaps
    assert all(0 <= r["staleness"] <= 1 for r in rows)
    assert rows[-1]["policy_version"] >= 1  # batches sampled by updated weights


def test_partial_rollouts_need_async_and_an_engine_in_this_process(tmp_path):
    with pytest.raises(ConfigError, match="only async rollouts use it"):
        config(tmp_path, "rollout.partial=true")
    with pytest.raises(ConfigError, match="only an engine in this process"):
        config(tmp_path, "rollout.async=true", "rollout.partial=true", 'rollout.engine="vllm"')

"""Test-time RL: a few GRPO updates on the policy's own attempts at a problem, then its answer.

    adapter = PolicyAdapter(cfg, model, tokenizer, chat)
    prompt = adapter.prompt(fmt, visible.code)
    adaptation = await adapter.adapt(prompt, visible, scorer, generator)  # `steps` updates
    answer = adapter.answer(prompt)                                       # greedy
    adapter.restore()                                                     # the original weights

Why: the GrandCode write-up's next step is online updates during evaluation, not only
inference. A contestant who can run the sample tests and a brute-force checker learns from
their own failed tries before submitting; here the policy does the same with GRPO. Each update
samples `group_size` attempts (the solver's first turn, at [eval.test_time_rl] temperature)
from the current weights, scores them with `AttemptScorer` (visible tests only: see
`test_time_scoring`), turns the rewards into group-normalised advantages with the
`[algorithm] advantage` estimator, and takes one optimiser step with the trainer's own `Actor`
(its loss parts, float32 master weights, gradient clipping). The attempts are sampled by the
weights being updated, so the batch is on-policy (ratio 1, no off-policy weight). A group whose
attempts all score alike has zero advantage everywhere: it is not stepped on (AdamW would still
move the weights by momentum and decay) and is counted as having no signal.

`restore()` copies the original weights back into the parameters (an exact float32 copy) and
starts a fresh optimiser, so every problem (or band) starts from the policy under evaluation.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from ascent.algos import ADVANTAGES
from ascent.data.code_problems import CodeProblem
from ascent.evaluation.test_time_scoring import AttemptScorer, Scores, VisibleProblem
from ascent.models.prompting import prompt_ids
from ascent.rewards import RewardOutput
from ascent.rollout import RolloutBatch
from ascent.rollout.agentic.chat import ChatTemplate
from ascent.rollout.agentic.formats import CodeFormat
from ascent.rollout.sampling import SamplingParams
from ascent.rollout.transformers_engine import TransformersEngine
from ascent.rules import LLMConfig
from ascent.train.actor import Actor
from ascent.train.credit import CreditSettings, Learners, make_train_batch
from ascent.train.distributed import Dist
from ascent.train.llm_rollout import Scored
from ascent.train.llm_setup import eos_ids, make_optimizer
from ascent.train.parts import AlgorithmParts, algorithm_parts
from ascent.train.train_batch import TrainBatch


@dataclass(frozen=True)
class UpdateRecord:
    """One test-time update: the attempts it sampled and what they scored."""

    step: int  # 1-based, within the problem
    attempts: list[str]
    rewards: list[float]
    accepted: int  # attempts that passed every visible test
    trained: bool  # an optimiser step was taken (False: no signal, or a sandbox failure)
    why_not: str = ""  # no signal / sandbox error
    metrics: dict[str, float] = field(default_factory=dict)  # the actor's: loss, grad_norm...

    def to_json(self, whole: bool) -> dict[str, Any]:
        """The record; `whole`: with every attempt and its reward (transcripts.jsonl)."""
        mean = round(sum(self.rewards) / len(self.rewards), 6) if self.rewards else None
        out: dict[str, Any] = {"step": self.step, "attempts": len(self.attempts)}
        out |= {"accepted": self.accepted, "mean_reward": mean, "trained": self.trained}
        if self.why_not:
            out["why_not"] = self.why_not
        if self.metrics:
            out["metrics"] = {k: round(v, 6) for k, v in self.metrics.items()}
        if whole:
            out |= {"attempts": self.attempts, "rewards": self.rewards}
        return out


@dataclass
class Adaptation:
    """The updates of one problem."""

    updates: list[UpdateRecord] = field(default_factory=list)

    @property
    def steps_taken(self) -> int:
        return sum(u.trained for u in self.updates)

    @property
    def found(self) -> bool:
        """Some attempt passed every visible test."""
        return any(u.accepted for u in self.updates)

    @property
    def no_signal(self) -> bool:
        """Every update's attempts scored alike (or none could run): the weights never moved
        on this problem."""
        return self.steps_taken == 0


def test_time_parts(cfg: LLMConfig) -> AlgorithmParts:
    """`[algorithm]`'s parts for on-policy updates on attempts sampled at the test-time
    temperature: no off-policy weight, the Dr. GRPO constant defaulting to the eval's
    max_new_tokens."""
    parts = algorithm_parts(cfg)
    alg = cfg.algorithm
    return dataclasses.replace(
        parts,
        advantage=ADVANTAGES.get(alg.advantage),  # one group of attempts, not episodes' turns
        off_policy="",
        temperature=cfg.eval.test_time_rl.temperature,
        loss_params=dataclasses.replace(parts.loss_params, is_cap=None),
        norm_const=float(alg.agg_norm_const or cfg.eval.max_new_tokens),
    )


class PolicyAdapter:
    """The local policy under evaluation, its original weights, and the actor that updates
    them."""

    def __init__(
        self,
        cfg: LLMConfig,
        model: nn.Module,
        tokenizer: Any,
        chat: ChatTemplate | None,
        compute_dtype: torch.dtype = torch.float32,
    ) -> None:
        ev, ttrl = cfg.eval, cfg.eval.test_time_rl
        self.cfg = cfg
        self.model = model
        self.tokenizer = tokenizer
        self.chat = chat
        self.device = next(model.parameters()).device
        self.compute_dtype = compute_dtype
        self.parts = test_time_parts(cfg)
        self.train = cfg.train.model_copy(
            update={"batch_size": ttrl.group_size, "mini_batch_size": None, "ppo_epochs": 1}
        )
        self.optim = cfg.optim.model_copy(update={"schedule": "constant", "warmup_ratio": 0.0})
        # Kept in host memory: a second copy of a large model has no room beside it and its
        # optimiser on the accelerator; copying it back is exact (float32 to float32).
        self.original = {k: v.detach().to("cpu", copy=True) for k, v in model.state_dict().items()}
        self.actor = self._fresh_actor()
        pad = tokenizer.pad_token_id
        self.engine = TransformersEngine(
            live=lambda: self.actor.live_module(),
            pad_id=pad if pad is not None else eos_ids(model, tokenizer)[0],
            eos_ids=eos_ids(model, tokenizer),
        )
        self.sampling = SamplingParams(ev.max_new_tokens, temperature=ttrl.temperature)
        self.greedy = SamplingParams(ev.max_new_tokens, greedy=True)
        self.version = 0  # optimiser steps since the last restore

    def _fresh_actor(self) -> Actor:
        trained = [p for p in self.model.parameters() if p.requires_grad]
        ttrl = self.cfg.eval.test_time_rl
        optimizer, scheduler = make_optimizer(trained, self.optim, ttrl.lr, ttrl.steps)
        return Actor(
            self.model,
            optimizer,
            scheduler,
            parts=self.parts,
            train=self.train,
            seed=self.cfg.run.seed,
            dist=Dist.single(self.device),
            compute_dtype=self.compute_dtype,
        )

    def restore(self) -> None:
        """The original weights, exactly, and a fresh optimiser (no moments carried over)."""
        if self.version == 0:  # no step since the last restore: nothing moved, skip the copy
            return
        with torch.no_grad():
            self.model.load_state_dict(self.original)
        self.actor = self._fresh_actor()
        self.version = 0

    # -- prompts and answers -----------------------------------------------------------------

    def prompt(self, fmt: CodeFormat, code: CodeProblem) -> list[int]:
        """The solver's first context, as an episode opens it (`EpisodeRunner._open_thread`):
        its chat when the tokenizer has a template in use, else the format's header and cue."""
        if self.chat is not None:
            text = self.chat.start(fmt.messages("solver", code, []))
        else:
            text = fmt.header("solver", code) + fmt.cue("solver", code, after_header=True)
        return prompt_ids(self.tokenizer, [text])[0]

    def texts(self, batch: RolloutBatch) -> list[str]:
        lengths = batch.response_mask.bool().sum(-1).tolist()
        ids = [batch.response_ids[i, :n].tolist() for i, n in enumerate(lengths)]
        return [self.tokenizer.decode(row, skip_special_tokens=True) for row in ids]

    def answer(self, prompt: list[int]) -> str:
        """The greedy answer to one prompt from the current weights (pass@1). One prompt per
        call, so an answer never depends on what it was batched with (padding)."""
        return self.texts(self.engine.generate([prompt], [0], 1, self.greedy))[0]

    # -- the updates -------------------------------------------------------------------------

    async def adapt(
        self,
        prompt: list[int],
        visible: VisibleProblem,
        scorer: AttemptScorer,
        generator: torch.Generator,
    ) -> Adaptation:
        """`steps` updates on fresh attempts at one problem; the weights stay updated."""
        adaptation = Adaptation()
        for step in range(1, self.cfg.eval.test_time_rl.steps + 1):
            batch = self.engine.generate(
                [prompt], [0], self.cfg.eval.test_time_rl.group_size, self.sampling, generator
            )
            attempts = self.texts(batch)
            scores = await scorer.score(visible, attempts)
            adaptation.updates.append(self.update(step, batch, attempts, scores))
        return adaptation

    def update(
        self, step: int, batch: RolloutBatch, attempts: list[str], scores: Scores
    ) -> UpdateRecord:
        """One optimiser step on a scored group, unless it carries no signal."""
        record = {"step": step, "attempts": attempts, "rewards": scores.rewards}
        record["accepted"] = sum(scores.accepted)
        if scores.sandbox_error:
            return UpdateRecord(**record, trained=False, why_not="sandbox error")
        if len(set(scores.rewards)) < 2:
            return UpdateRecord(**record, trained=False, why_not="no signal")
        train_batch = self.train_batch(batch, attempts, scores.rewards)
        self.version += 1
        metrics = self.actor.update(train_batch, self.version)
        kept = {k: metrics[k] for k in ("loss", "grad_norm", "entropy") if k in metrics}
        return UpdateRecord(**record, trained=True, metrics=kept)

    def train_batch(
        self, batch: RolloutBatch, attempts: list[str], rewards: list[float]
    ) -> TrainBatch:
        """Each attempt's reward on its last token, advantages by the `[algorithm]` estimator
        over the group (whitened when normalize_advantages), for one on-policy step: the
        trainer's own train-batch function (ascent.train.credit)."""
        scored = Scored(batch, [], attempts, RewardOutput(list(rewards), {}, [{}] * len(rewards)))
        train_batch, _ = make_train_batch(Learners(self.actor), CreditSettings(self.parts), scored)
        return train_batch

    def weights_equal_original(self) -> bool:
        """Every parameter and buffer equals the original bit for bit."""
        state = self.model.state_dict()
        return all(torch.equal(state[k].cpu(), v) for k, v in self.original.items())

"""Test-time RL: a few GRPO updates on the policy's own attempts at a problem, then its answer.

    adapter = PolicyAdapter(cfg, model, tokenizer, chat)
    prompt = adapter.prompt(fmt, visible.code)
    adaptation = await adapter.adapt(prompt, visible, scorer, generator)  # `steps` updates
    answer = adapter.answer(prompt)                                       # greedy
    adapter.restore()                                                     # the original weights

Why: the GrandCode write-up's next step is online updates during evaluation, not only
inference. A contestant who can run the sample tests and a brute-force checker learns from
their own failed tries before submitting; here the policy does the same with GRPO. Each update
is one step of the trainer's own controller (`ascent.train.controller.Controller`) over a batch
source of attempts (`AttemptBatches`): `group_size` attempts (the solver's first turn, at
[eval.test_time_rl] temperature) sampled from the current weights, scored by `AttemptScorer`
(visible tests only: see `test_time_scoring`); the controller turns the rewards into advantages
with the `[algorithm] advantage` estimator through the one train-batch function and takes one
optimiser step with the trainer's `Actor` (its loss parts, float32 master weights, gradient
clipping). The attempts are sampled by the weights being updated, so the batch is on-policy
(ratio 1, no off-policy weight). A group whose attempts all score alike has zero advantage
everywhere: the source hands the controller no rows, so it is not stepped on (AdamW would still
move the weights by momentum and decay) and is counted as having no signal.

The controller is synchronous and the scorer runs on the evaluation's event loop (its sandbox
pool and API client live there): a step runs on a worker thread (with the caller's torch thread
count) while the loop waits on it, and the source hands each group to the loop for scoring.

`restore()` copies the original weights back into the parameters (an exact float32 copy) and
starts a fresh optimiser, so every problem (or band) starts from the policy under evaluation.
"""

from __future__ import annotations

import asyncio
import dataclasses
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from ascent.algos import ADVANTAGES
from ascent.data.code_problems import CodeProblem
from ascent.evaluation.test_time_scoring import AttemptScorer, VisibleProblem
from ascent.models.prompting import prompt_ids
from ascent.rewards import RewardOutput
from ascent.rollout import RolloutBatch
from ascent.rollout.agentic.chat import ChatTemplate
from ascent.rollout.agentic.formats import CodeFormat
from ascent.rollout.sampling import SamplingParams
from ascent.rollout.transformers_engine import TransformersEngine
from ascent.rules import LLMConfig
from ascent.runtime import caller_threads
from ascent.train.actor import Actor
from ascent.train.controller import Controller
from ascent.train.credit import CreditSettings, Learners
from ascent.train.distributed import Dist
from ascent.train.llm_rollout import Scored, empty_scored
from ascent.train.llm_setup import eos_ids, make_optimizer
from ascent.train.parts import AlgorithmParts, algorithm_parts


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


class AttemptBatches:
    """The batch source of test-time RL: fresh attempts at the problem being adapted to.

    `aim` points it at a problem; each `next` samples one group from the live weights and has
    the evaluation's loop score it. A group without signal (all rewards alike) or with an
    attempt the sandbox could not judge comes back empty, which the controller skips."""

    def __init__(
        self, engine: TransformersEngine, tokenizer: Any, sampling: SamplingParams, group: int
    ) -> None:
        self.engine = engine  # the trainer's module, decoded in place: nothing to publish
        self.tokenizer = tokenizer
        self.sampling = sampling
        self.group_size = group
        self._target: tuple[list[int], VisibleProblem, AttemptScorer, torch.Generator] | None
        self._target = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self.last: UpdateRecord | None = None  # the latest group, as the record reports it

    def aim(
        self,
        prompt: list[int],
        visible: VisibleProblem,
        scorer: AttemptScorer,
        generator: torch.Generator,
        loop: asyncio.AbstractEventLoop,
    ) -> None:
        """The problem the next groups attempt; `loop` runs the scorer."""
        self._target = (prompt, visible, scorer, generator)
        self._loop = loop

    def texts(self, batch: RolloutBatch) -> list[str]:
        lengths = batch.response_mask.bool().sum(-1).tolist()
        ids = [batch.response_ids[i, :n].tolist() for i, n in enumerate(lengths)]
        return [self.tokenizer.decode(row, skip_special_tokens=True) for row in ids]

    def next(self, version: int) -> tuple[Scored, dict[str, float], Scored]:
        assert self._target is not None and self._loop is not None, "aim() first"
        prompt, visible, scorer, generator = self._target
        batch = self.engine.generate([prompt], [0], self.group_size, self.sampling, generator)
        attempts = self.texts(batch)
        scores = asyncio.run_coroutine_threadsafe(scorer.score(visible, attempts), self._loop)
        scores = scores.result()
        rewards = RewardOutput(list(scores.rewards), {}, [{}] * len(attempts))
        group = Scored(batch, [], attempts, rewards)
        why_not = "sandbox error" if scores.sandbox_error else ""
        if not why_not and len(set(scores.rewards)) < 2:
            why_not = "no signal"
        self.last = UpdateRecord(
            step=0,  # numbered by the adapter
            attempts=attempts,
            rewards=list(scores.rewards),
            accepted=sum(scores.accepted),
            trained=False,
            why_not=why_not,
        )
        metrics = {"reward/mean": sum(scores.rewards) / len(attempts)}
        if why_not:
            return empty_scored(batch.response_ids.device), metrics, group
        return group, metrics, group

    def updated(self, version: int, trained: bool) -> None:
        pass

    def close(self) -> None:
        pass


class PolicyAdapter:
    """The local policy under evaluation, its original weights, and the controller that
    updates them."""

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
        pad = tokenizer.pad_token_id
        self.pad_id = pad if pad is not None else eos_ids(model, tokenizer)[0]
        self.engine = TransformersEngine(
            live=lambda: self.controller.actor.live_module(),
            pad_id=self.pad_id,
            eos_ids=eos_ids(model, tokenizer),
        )
        sampling = SamplingParams(ev.max_new_tokens, temperature=ttrl.temperature)
        self.attempts = AttemptBatches(self.engine, tokenizer, sampling, ttrl.group_size)
        self.greedy = SamplingParams(ev.max_new_tokens, greedy=True)
        self.controller = self._fresh_controller()
        # the controller's steps run here, with this thread's torch thread count
        self._worker = ThreadPoolExecutor(
            1, thread_name_prefix="ascent-test-time-rl", initializer=caller_threads()
        )

    @property
    def version(self) -> int:
        """Optimiser steps since the last restore."""
        return self.controller.version

    def _fresh_controller(self) -> Controller:
        trained = [p for p in self.model.parameters() if p.requires_grad]
        ttrl = self.cfg.eval.test_time_rl
        optimizer, scheduler = make_optimizer(trained, self.optim, ttrl.lr, ttrl.steps)
        actor = Actor(
            self.model,
            optimizer,
            scheduler,
            parts=self.parts,
            train=self.train,
            seed=self.cfg.run.seed,
            dist=Dist.single(self.device),
            compute_dtype=self.compute_dtype,
        )
        return Controller(
            learners=Learners(actor),
            credit=CreditSettings(self.parts),
            source=self.attempts,
            engine=self.engine,
            pad_id=self.pad_id,
        )

    def restore(self) -> None:
        """The original weights, exactly, and a fresh optimiser (no moments carried over)."""
        if self.version == 0:  # no step since the last restore: nothing moved, skip the copy
            return
        with torch.no_grad():
            self.model.load_state_dict(self.original)
        self.controller = self._fresh_controller()

    def close(self) -> None:
        self._worker.shutdown()

    # -- prompts and answers -----------------------------------------------------------------

    def prompt(self, fmt: CodeFormat, code: CodeProblem) -> list[int]:
        """The solver's first context, as an episode opens it (`EpisodeRunner._open_thread`):
        its chat when the tokenizer has a template in use, else the format's header and cue."""
        if self.chat is not None:
            text = self.chat.start(fmt.messages("solver", code, []))
        else:
            text = fmt.header("solver", code) + fmt.cue("solver", code, after_header=True)
        return prompt_ids(self.tokenizer, [text])[0]

    def answer(self, prompt: list[int]) -> str:
        """The greedy answer to one prompt from the current weights (pass@1). One prompt per
        call, so an answer never depends on what it was batched with (padding)."""
        return self.attempts.texts(self.engine.generate([prompt], [0], 1, self.greedy))[0]

    # -- the updates -------------------------------------------------------------------------

    async def adapt(
        self,
        prompt: list[int],
        visible: VisibleProblem,
        scorer: AttemptScorer,
        generator: torch.Generator,
    ) -> Adaptation:
        """`steps` controller steps on fresh attempts at one problem; the weights stay
        updated."""
        loop = asyncio.get_running_loop()
        self.attempts.aim(prompt, visible, scorer, generator, loop)
        adaptation = Adaptation()
        for step in range(1, self.cfg.eval.test_time_rl.steps + 1):
            # the controller numbers the update it would take: one past its version
            metrics, _ = await loop.run_in_executor(
                self._worker, self.controller.step, self.version + 1
            )
            assert self.attempts.last is not None
            trained = "update_skipped" not in metrics
            kept = {k: metrics[k] for k in ("loss", "grad_norm", "entropy") if k in metrics}
            record = dataclasses.replace(
                self.attempts.last, step=step, trained=trained, metrics=kept if trained else {}
            )
            adaptation.updates.append(record)
        return adaptation

    def weights_equal_original(self) -> bool:
        """Every parameter and buffer equals the original bit for bit."""
        state = self.model.state_dict()
        return all(torch.equal(state[k].cpu(), v) for k, v in self.original.items())

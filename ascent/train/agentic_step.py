"""The agentic GRPO step: the trainer's `rl_step` for runs with `[agentic] enabled = true`.

    episodes (producer thread, async_workers in flight, <= max_staleness versions behind)
      -> rows (policy tokens mask 1, observations mask 0, behaviour log-probs)
      -> credit: w_imm * A_immediate(turn) + w_delay * A_delayed(episode)   (ascent.algos.agentic)
      -> actor.update (the shared one), with the off-policy weight
         min(pi_old / pi_behaviour, correction_clip) when off_policy_correction = true
      -> engine.sync_weights: the producer's engine (a copy of its own) samples the new
         version from its next generate call

A step with no episode to train on (every one left unjudged by a sandbox failure, or holding
no policy token) is skipped; `[agentic] max_skipped_steps` of them in a row stop the run with
what the episodes said, since a run that never updates is broken, not unlucky.

Problems are drawn on the trainer's thread (see `ascent.rollout.agentic.producer`), so the
prompt sampler's state saved in a checkpoint is never taken in the middle of a draw.

`agentic_session(run, run_dir)` is what the trainer opens around its loop: it yields None for
ordinary runs and an `AgenticTrainer` for agentic ones, and at the end stops the producer and
the sandbox, prints the API usage per role and writes `api_usage.json` into the run directory.

Asynchrony has a price in exactness: episodes in flight when a run is interrupted are dropped,
and the producer draws problems (and samples) on its own thread, so a resumed agentic run
continues from the next undrawn problem but does not replay the uninterrupted run bit for bit.
"""

from __future__ import annotations

import contextlib
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterator

import torch

from ascent.algos.agentic import agentic_credit, turn_advantages_to_tokens
from ascent.api import ApiClient, UsageLedger
from ascent.config.agentic import ROLES, format_name
from ascent.data import uses_chat_template
from ascent.errors import AscentError
from ascent.rewards import RewardOutput
from ascent.rewards.sandbox import SandboxPool
from ascent.rollout import RolloutBatch, RolloutEngine
from ascent.rollout.agentic.chat import ChatTemplate
from ascent.rollout.agentic.episode import EpisodeRunner, EpisodeSettings
from ascent.rollout.agentic.format_registry import FORMATS
from ascent.rollout.agentic.producer import EpisodeProducer, Group
from ascent.rollout.agentic.roles import ApiRoles, PolicyBatcher
from ascent.rollout.agentic.rows import AgenticRows, build_rows
from ascent.rollout.agentic.verify import Verifier
from ascent.rundir import RunDir
from ascent.runtime import large_blocks_returned
from ascent.train.agentic_metrics import episode_metrics, over_ranks, row_metrics, sample_view
from ascent.train.llm_setup import LLMRun, make_engine, updates_per_step
from ascent.train.llm_step import Scored, whiten
from ascent.train.train_batch import TrainBatch


def credit_batch(run: LLMRun, rows: AgenticRows | None) -> tuple[TrainBatch, dict[str, float]]:
    """Advantages from the turns' and episodes' rewards, and the log-probs the loss needs.

    With off_policy_correction, the behaviour log-probs are the ones recorded at generation
    and the clip is anchored at the policy being updated (its log-probs are computed once
    when the batch feeds several optimiser steps); without it, plain PPO anchors the clip at
    the behaviour policy itself.

    `rows = None` is a rank with no episode to train on while another rank has some: it
    takes part with one blank row (nothing to learn from), so that the forward passes and
    whitening below meet the other ranks' collectives. A group's episodes all come from one
    rank's producer, so group-relative credit needs nothing from the other ranks.
    """
    a, alg = run.cfg.agentic, run.cfg.algorithm
    metrics: dict[str, float] = {}
    if rows is None:
        rollout = blank_rollout(run.device)
        advantages = torch.zeros_like(rollout.logprobs)
    else:
        rollout = rows.rollout
        advantages, metrics = _credit(run, rows)
    if alg.normalize_advantages:  # whiten over the policy tokens of every rank's batch
        advantages = whiten(advantages, rollout.response_mask, run.dist)
    behaviour, old = None, rollout.logprobs
    if a.off_policy_correction:
        behaviour = rollout.logprobs
        old = run.actor.logprobs(rollout) if updates_per_step(run.cfg) > 1 else None
    ref = run.reference.logprobs(rollout) if run.reference is not None else None
    batch = TrainBatch(
        rollout=rollout, advantages=advantages, old_logp=old, ref_logp=ref, behaviour_logp=behaviour
    )
    return batch, metrics


def _credit(run: LLMRun, rows: AgenticRows) -> tuple[torch.Tensor, dict[str, float]]:
    """(B, R) token advantages of this rank's rows, and their spread."""
    a, alg, episodes = run.cfg.agentic, run.cfg.algorithm, rows.episodes
    pools: dict[tuple[int, str], int] = {}
    refs = [(r.episode, episodes[r.episode].turns[r.turn]) for r in rows.turns]
    credit = agentic_credit(
        torch.tensor([turn.reward for _, turn in refs], dtype=torch.float32),
        torch.tensor([pools.setdefault((episodes[e].uid, t.role), len(pools)) for e, t in refs]),
        torch.tensor([e for e, _ in refs]),
        torch.tensor([float(ep.delayed or 0.0) for ep in episodes]),
        torch.tensor([ep.uid for ep in episodes]),
        immediate_weight=a.immediate_reward_weight,
        delayed_weight=a.delayed_reward_weight,
        scale_by_std=alg.advantage == "grpo",
        eps=alg.std_eps,
    )
    advantages = turn_advantages_to_tokens(
        credit.advantages.to(rows.rollout.logprobs.device), rows.token_turn
    )
    metrics = {
        "adv_std": float(credit.advantages.std()) if len(refs) > 1 else 0.0,
        "adv/immediate_std": float(credit.immediate.std()) if len(refs) > 1 else 0.0,
        "adv/delayed_std": float(credit.delayed.std()) if len(refs) > 1 else 0.0,
    }
    return advantages, metrics


def chat_template(cfg, tokenizer) -> ChatTemplate | None:
    """Policy threads are chats when `[data] chat_template` applies, decided as for the
    trainer's prompts (`ascent.data.uses_chat_template`)."""
    return (
        ChatTemplate(tokenizer) if uses_chat_template(cfg.data.chat_template, tokenizer) else None
    )


class AgenticTrainer:
    """Owns the producer, the sandbox and the API usage of one agentic run."""

    def __init__(self, run: LLMRun) -> None:
        cfg = run.cfg
        self.run = run
        self.format = FORMATS.get(format_name(cfg.data) or "code")
        self.usage = UsageLedger()
        self.pool = SandboxPool(cfg.sandbox)
        self.verifier = Verifier(self.pool, cfg.reward.code, cfg.sandbox)
        self.engine: RolloutEngine | None = None
        self.batcher: PolicyBatcher | None = None
        self.producer: EpisodeProducer | None = None
        self._sandbox_runs = 0
        self._skipped: Counter[str] = Counter()  # why the episodes of the skipped steps in a row
        self._skipped_steps = 0  # ... were not trained on, and how many steps that is
        # the step's groups are shared by the ranks (the config makes them divide evenly)
        self._groups_per_rank = run.prompts_per_step // run.dist.world_size

    # -- the producer ------------------------------------------------------------------------

    def settings(self) -> EpisodeSettings:
        cfg = self.run.cfg
        a = cfg.agentic
        return EpisodeSettings(
            roles={role: getattr(a.roles, role) for role in ROLES},
            max_turns=a.max_turns,
            summarize_threshold=a.summarize_threshold,
            context_window=a.context_window,
            max_new_tokens=cfg.rollout.max_new_tokens,
            adversarial_penalty=a.adversarial_penalty,
            unparsable_reward=a.unparsable_reward,
            max_generated_tests=a.max_generated_tests,
            default_language=cfg.reward.code.default_language,
        )

    def _draw(self):
        """One problem (called on the trainer's thread only, by the producer). Every rank's
        sampler draws the same problems, so each takes its own of every `world_size`."""
        dist = self.run.dist
        return self.run.sampler.draw(dist.world_size)[dist.rank]

    @contextlib.asynccontextmanager
    async def _serve(self) -> AsyncIterator[None]:
        """The episode runner, with an API client bound to the producer's event loop."""
        cfg = self.run.cfg
        api = None
        if cfg.agentic.roles.by_source("api"):
            client = ApiClient.from_config(cfg, usage=self.usage)
            params = {
                "max_tokens": cfg.agentic.api_max_tokens,
                "temperature": cfg.rollout.temperature,
                "top_p": cfg.rollout.top_p,
            }
            api = ApiRoles(client, params)
        self.runner = EpisodeRunner(
            self.settings(),
            self.format,
            self.verifier,
            self.run.tokenizer,
            self.batcher,
            api,
            chat_template(cfg, self.run.tokenizer),
        )
        try:
            yield
        finally:
            if api is not None:
                await api.aclose()

    def _start(self, version: int) -> None:
        run, cfg = self.run, self.run.cfg
        self.engine = make_engine(cfg, run.actor, run.tokenizer, own_copy=True)
        self.engine.sync_weights(run.actor.weights(self.engine.takes_adapters), version)
        generator = torch.Generator(device=run.device).manual_seed(cfg.run.seed * 7919 + version)
        self.batcher = PolicyBatcher(
            self.engine,
            run.tokenizer,
            run.sampling,
            generator,
            max_batch=cfg.rollout.async_workers,
        )
        self.producer = EpisodeProducer(
            draw=self._draw,
            group_size=cfg.rollout.group_size,
            groups_per_step=self._groups_per_rank,
            max_staleness=cfg.agentic.max_staleness,
            async_workers=cfg.rollout.async_workers,
            version=version,
        )
        self.producer.start(lambda drawn: self.runner.run(drawn.problem, drawn.uid), self._serve)

    # -- one step ----------------------------------------------------------------------------

    def step(self, run: LLMRun, step: int) -> tuple[dict[str, float], Scored]:
        """Train on the next groups of episodes; the loop's `rl_step` for agentic runs.

        On several ranks each rank's producer plays its own share of the step's groups and
        the update is one sharded update over all of them; a step is skipped only when no
        rank has an episode to train on."""
        version = step - 1  # the policy after step - 1 updates
        if self.producer is None:
            self._start(version)
        assert self.producer is not None and self.engine is not None
        t0 = time.perf_counter()
        groups, dropped = self.producer.take(self._groups_per_rank, version)
        t1 = time.perf_counter()
        metrics = episode_metrics(groups, dropped)
        episodes = [e for g in groups for e in g.episodes if e.valid]
        rows = build_rows(episodes, run.tokenizer.pad_token_id, run.device) if episodes else None
        if rows is not None:
            metrics |= row_metrics(rows, version)
        metrics["agentic/sandbox_runs"] = float(self.verifier.runs - self._sandbox_runs)
        metrics["tokens"] = float(rows.rollout.num_tokens if rows is not None else 0)
        metrics = over_ranks(run.dist, metrics)
        trained = run.dist.any(rows is not None)
        if trained:
            with large_blocks_returned():  # the update's activations go back to the system
                batch, credit_metrics = credit_batch(run, rows)
                metrics |= over_ranks(run.dist, credit_metrics)
                metrics |= run.actor.update(batch, step)
        else:
            metrics["update_skipped"] = 1.0
        self._count_skipped(groups, skipped=not trained)
        run.version = step
        sync = time.perf_counter()
        self.engine.sync_weights(run.actor.weights(self.engine.takes_adapters), step)
        metrics["time/weight_sync"] = time.perf_counter() - sync
        self.producer.publish(step)
        t2 = time.perf_counter()
        metrics |= {
            "tokens_per_s": metrics.pop("tokens") / max(t2 - t0, 1e-9),
            "time/rollout": t1 - t0,
            "time/update": t2 - t1,
        }
        self._sandbox_runs = self.verifier.runs
        return metrics, self._scored(rows)

    def _count_skipped(self, groups: list[Group], skipped: bool) -> None:
        """Stop the run after max_skipped_steps steps in a row with nothing to train on."""
        if not skipped:
            self._skipped_steps, self._skipped = 0, Counter()
            return
        self._skipped_steps += 1
        for ep in (e for g in groups for e in g.episodes):
            if ep.stop == "sandbox_error":
                detail = " ".join(str(ep.detail.get("sandbox_error", "")).split())[:120]
                self._skipped[f"sandbox error: {detail}"] += 1
            else:
                self._skipped[f"no policy token (stop: {ep.stop})"] += 1
        limit = self.run.cfg.agentic.max_skipped_steps
        if self._skipped_steps >= limit:
            seen = "; ".join(f"{n} x {why}" for why, n in self._skipped.most_common(3))
            raise AscentError(
                f"agentic: {limit} steps in a row had no episode to train on ({seen}); "
                "fix the sandbox (run `ascent doctor`) or the roles, or raise [agentic] "
                "max_skipped_steps"
            )

    def _scored(self, rows: AgenticRows | None) -> Scored:
        if rows is None:
            return empty_scored(self.run.device)
        decode = lambda ids: self.run.tokenizer.decode(ids, skip_special_tokens=True)  # noqa: E731
        problems, completions, rewards = sample_view(rows, decode)
        return Scored(rows.rollout, problems, completions, rewards)

    def close(self) -> None:
        if self.producer is not None:
            self.producer.close()
        if self.batcher is not None:
            self.batcher.close()
        self.pool.close()


def blank_rollout(device: torch.device, rows: int = 1) -> RolloutBatch:
    """`rows` rows of one prompt token and one response token that the policy did not choose
    (mask 0): nothing in them to learn from."""
    z = torch.zeros((rows, 1), dtype=torch.long, device=device)
    ones = torch.ones_like(z)
    return RolloutBatch(z, ones, z, z.float(), z.float(), z[:, 0], ones[:, 0].bool(), z[:, 0])


def empty_scored(device: torch.device) -> Scored:
    return Scored(blank_rollout(device, rows=0), [], [], RewardOutput([], {}, []))


@contextlib.contextmanager
def agentic_session(
    run: LLMRun, run_dir: RunDir, echo: Callable[[str], None] = print
) -> Iterator[AgenticTrainer | None]:
    """An `AgenticTrainer` for the loop when `[agentic]` is enabled, else None. At the end,
    rank 0 reports the API usage of every rank's roles (its own alone when the loop failed:
    the other ranks may not reach the gather)."""
    if not run.cfg.agentic.enabled:
        yield None
        return
    trainer, dist, finished = AgenticTrainer(run), run.dist, False
    try:
        yield trainer
        finished = True
    finally:
        trainer.close()
        if finished and dist.distributed:
            for other in dist.gather(trainer.usage.snapshot())[1:]:
                trainer.usage.absorb(other)
        if dist.main:
            trainer.usage.finish(run_dir.path, echo)

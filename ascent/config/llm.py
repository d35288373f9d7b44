"""Sections of an LLM run: model, data, rollout, algorithm, train, optim; and the root model.

The reference values of the write-ups (R1-Zero GRPO) are the defaults. Recipes in `examples/`
and the built-in demo override them. Cross-section rules (batch arithmetic, names that must
exist in a registry, settings a chosen component cannot honour) live in `LLMConfig`'s
validators so that a bad combination fails at load time with one line saying what to change.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from ascent.config.api import ApiSection, AssistantSection, ModelsSection
from ascent.config.base import Section
from ascent.config.evaluation import EvalSection
from ascent.config.rewards import RewardSection, SandboxSection
from ascent.config.run import LoggingSection, RunSection


class LoraSection(Section):
    """`[model.lora]`: optional LoRA adapters (needs `pip install 'ascent[lora]'`)."""

    enabled: bool = Field(False, description="Train LoRA adapters instead of all weights.")
    r: int = Field(16, ge=1, description="LoRA rank.")
    alpha: int = Field(32, ge=1, description="LoRA scaling numerator (scale = alpha / r).")
    dropout: float = Field(0.05, ge=0.0, lt=1.0, description="Dropout on the LoRA path.")
    target_modules: list[str] = Field(
        default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj"],
        description="Module names that get adapters.",
    )


class ModelSection(Section):
    """`[model]`: the policy (and the reference policy for KL)."""

    name_or_path: str = Field(
        "ascent:tiny",
        description="Hugging Face id or local directory; 'ascent:tiny' is the built-in model.",
    )
    tokenizer: str | None = Field(
        None, description="Tokenizer id or path; unset: same as the model."
    )
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = Field(
        "auto", description="Weight dtype; auto is bfloat16 on GPUs that support it, else float32."
    )
    gradient_checkpointing: bool = Field(
        False, description="Recompute activations in backward to save memory."
    )
    trust_remote_code: bool = Field(
        False, description="Allow model code from the hub repository (only for sources you trust)."
    )
    ref_model: str | None = Field(
        None, description="Reference policy for KL; unset: a frozen copy of the initial policy."
    )
    lora: LoraSection = Field(default_factory=LoraSection, description="LoRA adapters.")


class ArithmeticSection(Section):
    """`[data.arithmetic]`: the built-in arithmetic task (`07+45=` -> `52`)."""

    digits: int = Field(2, ge=1, le=6, description="Digits per operand (zero-padded).")
    operators: list[Literal["+", "-", "*"]] = Field(
        default_factory=lambda: ["+"], min_length=1, description="Operators drawn from."
    )


class CountdownSection(Section):
    """`[data.countdown]`: the built-in Countdown task (`use 3 7 8 to make 31:`)."""

    numbers: int = Field(
        3, ge=2, le=6, description="Numbers per puzzle; each is used exactly once."
    )
    max_number: int = Field(25, ge=1, description="Largest number drawn.")
    max_target: int = Field(100, ge=1, description="Largest target.")


class DataSection(Section):
    """`[data]`: the problems a run trains and evaluates on."""

    task: str = Field("arithmetic", description="Built-in task: arithmetic or countdown.")
    train_size: int = Field(
        10000, ge=1, description="Training problems generated for a built-in task."
    )
    eval_size: int = Field(200, ge=1, description="Held-out problems for evaluation.")
    shuffle: bool = Field(True, description="Shuffle training problems each epoch (seeded).")
    prompt_template: str = Field(
        "{prompt}",
        description="Format string for what the policy sees: {prompt} is the task's prompt; "
        "the task's columns ({numbers}, {target}) may also be used.",
    )
    arithmetic: ArithmeticSection = Field(
        default_factory=ArithmeticSection, description="Arithmetic task settings."
    )
    countdown: CountdownSection = Field(
        default_factory=CountdownSection, description="Countdown task settings."
    )

    @field_validator("prompt_template")
    @classmethod
    def _template_has_prompt(cls, value: str) -> str:
        if "{prompt}" not in value:
            raise ValueError(
                "[data] prompt_template must contain {prompt} (the task's question), "
                'e.g. "Question: {prompt}\\nAnswer:"'
            )
        return value

    @field_validator("task")
    @classmethod
    def _known_task(cls, value: str) -> str:
        from ascent.data.tasks import TASKS

        if value not in TASKS:
            raise ValueError(TASKS.unknown_message(value))
        return value


class RolloutSection(Section):
    """`[rollout]`: how completions are sampled."""

    engine: Literal["transformers", "vllm", "openai"] = Field(
        "transformers",
        description="Rollout engine: transformers (CPU/GPU), vllm (GPU), openai (API).",
    )
    group_size: int = Field(
        8,
        ge=1,
        description="Completions sampled per prompt (a GRPO group; num_generations in TRL).",
    )
    temperature: float = Field(1.0, gt=0.0, description="Sampling temperature.")
    top_p: float = Field(1.0, gt=0.0, le=1.0, description="Nucleus sampling threshold (1.0: off).")
    top_k: int = Field(0, ge=0, description="Top-k sampling (0: off).")
    max_new_tokens: int = Field(4096, ge=1, description="Longest completion, in tokens.")
    async_workers: int = Field(
        8, ge=1, description="Requests / episodes in flight at once (API roles, agentic rollouts)."
    )


class AlgorithmSection(Section):
    """`[algorithm]`: the named parts that make a recipe (see docs/algorithms.md)."""

    advantage: str = Field(
        "grpo", description="Advantage estimator: gae, grpo, dr_grpo, length_adaptive_gae."
    )
    policy_loss: str = Field("ppo_clip", description="Policy loss: ppo_clip, gspo.")
    loss_agg: str = Field(
        "seq_mean_token_mean",
        description=(
            "Loss aggregation: token_mean, seq_mean_token_mean, seq_mean_token_sum, "
            "seq_mean_token_sum_norm."
        ),
    )
    agg_norm_const: int | None = Field(
        None,
        ge=1,
        description="Constant of seq_mean_token_sum_norm (Dr. GRPO); unset: max_new_tokens.",
    )
    kl_coef: float = Field(
        0.001,
        ge=0.0,
        description="Weight of the KL to the reference policy (0: no reference model).",
    )
    kl_estimator: str = Field("k3", description="KL estimator: k1, k2, k3.")
    kl_mode: Literal["loss", "reward"] = Field(
        "loss", description="Apply KL as a loss term or as a per-token reward penalty."
    )
    clip_low: float = Field(
        0.2, gt=0.0, lt=1.0, description="PPO clip range below 1 (ratio >= 1 - clip_low)."
    )
    clip_high: float = Field(
        0.2, gt=0.0, description="PPO clip range above 1 (clip-higher: 0.28 in DAPO/VAPO)."
    )
    dual_clip: float | None = Field(
        None, gt=1.0, description="Dual-clip bound c > 1 for negative advantages; unset: off."
    )
    is_cap: float | None = Field(
        None,
        gt=0.0,
        description="Cap on truncated importance weights for off-policy data; unset: off.",
    )
    gamma: float = Field(1.0, ge=0.0, le=1.0, description="Discount factor.")
    lam: float = Field(1.0, ge=0.0, le=1.0, description="GAE lambda for policy advantages.")
    lam_critic: float | None = Field(
        None,
        ge=0.0,
        le=1.0,
        description="GAE lambda for critic returns (VAPO: 1.0); unset: same as lam.",
    )
    length_alpha: float = Field(
        0.05, gt=0.0, description="Length-adaptive GAE alpha: lambda = 1 - 1/(alpha * length)."
    )
    std_eps: float = Field(
        1e-6, gt=0.0, description="Added to the group std in GRPO normalisation."
    )
    entropy_coef: float = Field(0.0, ge=0.0, description="Weight of the entropy bonus.")


class TrainSection(Section):
    """`[train]`: how many steps, batch arithmetic, checkpoints."""

    total_steps: int = Field(
        1000, ge=1, description="RL steps (one step = one rollout batch and its updates)."
    )
    batch_size: int = Field(
        64, ge=1, description="Completions per step (prompts per step = batch_size / group_size)."
    )
    mini_batch_size: int | None = Field(
        None,
        ge=1,
        description="Completions per optimiser step; unset: batch_size (one step per epoch).",
    )
    micro_batch_size: int = Field(8, ge=1, description="Completions per forward/backward pass.")
    ppo_epochs: int = Field(1, ge=1, description="Passes over each rollout batch.")
    max_grad_norm: float = Field(1.0, gt=0.0, description="Global gradient-norm clip.")
    eval_steps: int = Field(
        50, ge=0, description="Evaluate on the held-out split every N steps (0: only at the end)."
    )
    save_steps: int = Field(100, ge=0, description="Checkpoint every N steps (0: only at the end).")
    keep_last: int = Field(2, ge=1, description="Checkpoints to keep besides the best one.")


class OptimSection(Section):
    """`[optim]`: optimiser and learning-rate schedule."""

    name: Literal["adamw"] = Field("adamw", description="Optimiser.")
    lr: float = Field(1e-6, gt=0.0, description="Peak learning rate.")
    weight_decay: float = Field(0.0, ge=0.0, description="Decoupled weight decay.")
    betas: tuple[float, float] = Field((0.9, 0.999), description="Adam betas.")
    eps: float = Field(1e-8, gt=0.0, description="Adam epsilon.")
    schedule: Literal["cosine", "linear", "constant"] = Field(
        "cosine", description="LR schedule after warmup."
    )
    warmup_ratio: float = Field(
        0.03, ge=0.0, lt=1.0, description="Fraction of steps with linear warmup."
    )
    min_lr_ratio: float = Field(
        0.0, ge=0.0, le=1.0, description="Final LR as a fraction of lr (cosine/linear)."
    )


def _divisors_near(n: int, around: int) -> list[int]:
    """Two divisors of n closest to `around`, for error messages that propose valid values."""
    divs = [d for d in range(1, n + 1) if n % d == 0 and d > 1]
    return sorted(sorted(divs, key=lambda d: (abs(d - around), d))[:2])


def _multiples_near(step: int, around: int) -> list[int]:
    lower = max(step, around // step * step)
    return sorted({lower, lower + step})


class LLMConfig(Section):
    """An LLM post-training run (GRPO, PPO, VAPO, DAPO, SRPO, agentic GRPO)."""

    run: RunSection = Field(default_factory=RunSection, description="Run directory, seed, device.")
    model: ModelSection = Field(
        default_factory=ModelSection, description="Policy and reference model."
    )
    data: DataSection = Field(
        default_factory=DataSection, description="Training and evaluation problems."
    )
    rollout: RolloutSection = Field(default_factory=RolloutSection, description="Sampling.")
    algorithm: AlgorithmSection = Field(
        default_factory=AlgorithmSection, description="Named algorithm parts."
    )
    train: TrainSection = Field(
        default_factory=TrainSection, description="Steps, batches, checkpoints."
    )
    optim: OptimSection = Field(default_factory=OptimSection, description="Optimiser and schedule.")
    reward: RewardSection = Field(default_factory=RewardSection, description="Reward functions.")
    sandbox: SandboxSection = Field(default_factory=SandboxSection, description="Code sandbox.")
    logging: LoggingSection = Field(
        default_factory=LoggingSection, description="Metrics and trackers."
    )
    api: ApiSection = Field(default_factory=ApiSection, description="OpenAI-compatible endpoint.")
    models: ModelsSection = Field(default_factory=ModelsSection, description="Model per role.")
    assistant: AssistantSection = Field(
        default_factory=AssistantSection, description="Log assistant."
    )
    eval: EvalSection = Field(default_factory=EvalSection, description="`ascent eval` settings.")

    @field_validator("algorithm")
    @classmethod
    def _known_names(cls, alg: AlgorithmSection) -> AlgorithmSection:
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
        return alg

    @field_validator("rollout")
    @classmethod
    def _engine_available(cls, rollout: RolloutSection) -> RolloutSection:
        from ascent.rollout import ENGINES

        if rollout.engine not in ENGINES:
            raise ValueError(
                f"[rollout] engine: '{rollout.engine}' is not available yet; "
                f"valid: {', '.join(ENGINES.names())}"
            )
        return rollout

    @model_validator(mode="after")
    def _task_reward_and_checkpoints(self) -> LLMConfig:
        if self.data.task == "countdown" and "countdown" not in self.reward.functions:
            raise ValueError(
                "[reward] functions: the countdown task is scored by the countdown reward; "
                'set functions = ["countdown"]'
            )
        t = self.train
        if t.save_steps and t.eval_steps and t.save_steps % t.eval_steps:
            fix = max(1, t.save_steps // t.eval_steps) * t.eval_steps
            raise ValueError(
                f"[train] save_steps: {t.save_steps} is not a multiple of eval_steps "
                f"({t.eval_steps}), so some checkpoints would have no validation reward to "
                f"rank them by; try save_steps = {fix}"
            )
        return self

    @model_validator(mode="after")
    def _batch_arithmetic(self) -> LLMConfig:
        t, g = self.train, self.rollout.group_size
        if self.train.batch_size % g:
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
        return self

    @model_validator(mode="after")
    def _estimator_settings(self) -> LLMConfig:
        from ascent.algos import ADVANTAGES

        alg = self.algorithm
        meta = ADVANTAGES.meta(alg.advantage)
        if meta.get("needs_groups") and self.rollout.group_size < 2:
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
        if meta.get("needs_values"):
            raise ValueError(
                f"[algorithm] advantage: '{alg.advantage}' needs a value model, which the LLM "
                "trainer does not provide yet; use grpo or dr_grpo"
            )
        if alg.is_cap is not None:
            raise ValueError(
                "[algorithm] is_cap: the LLM trainer's rollouts are on-policy (sampled with the "
                "weights being trained), so there is no older behaviour policy to correct "
                "for; remove the key"
            )
        if alg.agg_norm_const is not None and alg.loss_agg != "seq_mean_token_sum_norm":
            raise ValueError(
                "[algorithm] agg_norm_const: only seq_mean_token_sum_norm uses it; remove the key "
                'or set loss_agg = "seq_mean_token_sum_norm"'
            )
        return self

"""Sections of an LLM run (model, rollout, algorithm, critic, sampling, train, optim, stages)
and `LLMSections`, every table of a run with its type and default.

The reference values of the write-ups (R1-Zero GRPO) are the defaults. Recipes in `examples/`
and the built-in demo override them. The cross-section rules are `LLMConfig`'s (ascent.rules:
llm.py, written out in llm_rules.py), which read these types and nothing else, so the rules
never need the root model that calls them.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import ConfigDict, Field, field_validator, model_validator

from ascent.config.agentic import AgenticSection
from ascent.config.api import ApiSection, AssistantSection, ModelsSection
from ascent.config.base import Section
from ascent.config.clean import CleanSection
from ascent.config.cluster import ClusterSection
from ascent.config.data import DataSection
from ascent.config.evaluation import EvalSection
from ascent.config.grade import GradeSection
from ascent.config.rewards import RewardSection, SandboxSection
from ascent.config.run import LoggingSection, RunSection, check_dir_name
from ascent.config.vllm import VllmSection


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
        "auto",
        description="Compute dtype (trained parameters and optimiser state stay float32); "
        "auto is bfloat16 on GPUs that support it, else float32. float16 is refused.",
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

    @field_validator("dtype")
    @classmethod
    def _no_float16(cls, value: str) -> str:
        if value == "float16":
            raise ValueError(
                "[model] dtype: float16 compute needs loss scaling against underflow, which "
                'ascent does not do; use "bfloat16" (GPUs since Ampere) or "float32"'
            )
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
    top_k: int = Field(
        0, ge=-1, description="Top-k sampling (0 or -1: off, as in vLLM; -1 is read as 0)."
    )
    max_new_tokens: int = Field(4096, ge=1, description="Longest completion, in tokens.")
    stop: list[str] = Field(
        default_factory=list,
        description="Stop strings: a completion ends at the token that completes one (which "
        "stays in it, and counts as finished, like EOS); training and evaluation alike.",
    )
    async_workers: int = Field(
        8, ge=1, description="Requests / episodes in flight at once (API roles, agentic rollouts)."
    )
    async_: bool = Field(
        False,
        alias="async",
        description="Generate the next batches while the trainer updates on this one (with an "
        "engine of its own or Ray replicas); their tokens weighted by min(pi_trainer / "
        "pi_behaviour, [algorithm] engine_is_cap).",
    )
    max_staleness: int = Field(
        1,
        ge=1,
        description="With async: batches generated ahead, so policy versions a batch may lag.",
    )
    partial: bool = Field(
        False,
        description="With async: a generation in flight when the trainer publishes new weights "
        "takes them between two decode steps (its cache recomputed with them) instead of "
        "finishing on the old ones; every token keeps the log-prob of the weights that sampled "
        "it, and the row counts as sampled by the oldest.",
    )

    vllm: VllmSection = Field(
        default_factory=VllmSection, description='The vLLM engine (engine = "vllm").'
    )

    model_config = ConfigDict(populate_by_name=True)

    @field_validator("top_k")
    @classmethod
    def _minus_one_is_off(cls, value: int) -> int:
        return max(value, 0)  # the write-ups' and vLLM's -1; every reader tests 0 for off

    @model_validator(mode="after")
    def _vllm_settings_need_vllm(self) -> RolloutSection:
        if self.engine != "vllm" and self.explicitly_set("vllm"):
            raise ValueError(
                '[rollout.vllm]: only engine = "vllm" uses it; set [rollout] engine = "vllm" '
                "or remove the table"
            )
        return self


class AlgorithmSection(Section):
    """`[algorithm]`: the named parts that make a recipe (see docs/algorithms.md)."""

    advantage: str = Field(
        "grpo",
        description="Advantage estimator: gae, grpo, dr_grpo, length_adaptive_gae, rloo, "
        "reinforce_pp, reinforce_pp_baseline.",
    )
    policy_loss: str = Field(
        "ppo_clip", description="Policy loss: ppo_clip, gspo, cispo, sapo, vanilla_pg."
    )
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
    sapo_tau_pos: float = Field(
        1.0,
        gt=0.0,
        description="policy_loss = sapo: temperature of the soft gate for positive advantages.",
    )
    sapo_tau_neg: float = Field(
        1.05,
        gt=0.0,
        description="policy_loss = sapo: temperature of the soft gate for negative advantages "
        "(larger: off-policy tokens with A < 0 fade faster).",
    )
    is_cap: float | None = Field(
        None,
        gt=0.0,
        description="Cap on truncated importance weights for off-policy data; unset: off.",
    )
    engine_is_cap: float = Field(
        2.0,
        ge=0.0,
        description="When the rollout engine's log-probs are not the trainer's (vLLM; the "
        "transformers engine under bf16 compute), weight each token by min(pi_trainer / "
        "pi_engine, engine_is_cap), old log-probs recomputed by the trainer; 0: off.",
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
    normalize_advantages: bool = Field(
        False,
        description="Whiten advantages over the batch's policy tokens (mean 0, std 1), as verl "
        "does for GAE; reinforce_pp and reinforce_pp_baseline always do.",
    )
    nll_coef: float = Field(
        0.0,
        ge=0.0,
        description="Weight of the NLL of correct completions added to the loss (VAPO: 0.1).",
    )
    overlong: Literal["off", "mask", "penalty"] = Field(
        "off",
        description="Completions cut by max_new_tokens: trained on as they are (off), left out "
        "of the loss (mask), or a soft length penalty on the reward (penalty, DAPO).",
    )
    overlong_buffer: int | None = Field(
        None,
        ge=1,
        description="Penalty mode: the last N tokens before max_new_tokens where the penalty "
        "ramps from 0 to overlong_penalty (DAPO: 4096 of 20480).",
    )
    overlong_penalty: float = Field(
        1.0, gt=0.0, description="Penalty mode: reward penalty at max_new_tokens."
    )


class CriticSection(Section):
    """`[critic]`: the value model of value-based estimators (gae, length_adaptive_gae)."""

    architecture: Literal["separate", "head"] = Field(
        "separate",
        description="separate: its own transformer with a value head; head: a value head on "
        "the policy's backbone (shared weights, one optimiser step for both).",
    )
    name_or_path: str | None = Field(
        None,
        description="Separate critic: weights of its backbone; unset: the policy's initial "
        "weights.",
    )
    lr: float = Field(
        2e-6, gt=0.0, description="Critic learning rate (VAPO: 2e-6, twice the policy's)."
    )
    value_coef: float = Field(
        0.5,
        gt=0.0,
        description="Head: weight of the value loss in the loss shared with the policy.",
    )
    value_clip: float | None = Field(
        None,
        gt=0.0,
        description="Clip new values to old +- value_clip in the value loss; unset: plain "
        "squared error.",
    )
    value_warmup_steps: int = Field(
        0,
        ge=0,
        description="First steps of the run train only the critic, policy frozen (VAPO value "
        "pre-training: 50); they count in total_steps.",
    )


class SamplingSection(Section):
    """`[sampling]`: which completions a step trains on (dynamic sampling, history
    resampling, positive replay)."""

    dynamic: bool = Field(
        False,
        description="DAPO dynamic sampling: drop groups whose rewards are all equal and "
        "generate more until the batch is full.",
    )
    max_rounds: int = Field(
        4, ge=1, description="Dynamic sampling: extra generation rounds a step may take."
    )
    history_resampling: bool = Field(
        False,
        description="SRPO: at each epoch end, drop prompts whose rollouts were all correct "
        "(keep mixed and all-wrong ones).",
    )
    replay_ratio: float = Field(
        0.0,
        ge=0.0,
        lt=1.0,
        description="Fraction of each batch drawn from a buffer of past correct completions.",
    )
    replay_buffer_size: int = Field(
        1024, ge=1, description="Correct completions the replay buffer holds (oldest go first)."
    )
    replay_max_staleness: int = Field(
        20, ge=1, description="Replay only completions sampled at most this many steps ago."
    )


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
    max_tokens_per_micro_batch: int | None = Field(
        None,
        ge=1,
        description="Cut micro-batches by a token budget instead: completions sorted by length, "
        "as many to a pass as keep rows x (longest prompt + longest response) within it, and at "
        "most micro_batch_size; unset: micro_batch_size completions each, in their order.",
    )
    ppo_epochs: int = Field(1, ge=1, description="Passes over each rollout batch.")
    max_grad_norm: float = Field(1.0, gt=0.0, description="Global gradient-norm clip.")
    eval_steps: int = Field(
        50, ge=0, description="Evaluate on the held-out split every N steps (0: only at the end)."
    )
    save_steps: int = Field(100, ge=0, description="Checkpoint every N steps (0: only at the end).")
    keep_last: int = Field(2, ge=1, description="Checkpoints to keep besides the best one.")
    plateau_patience: int = Field(
        0,
        ge=0,
        description="End the run (or stage) when plateau_metric has not improved by "
        "plateau_min_delta for this many evaluations in a row (0: run to total_steps). SRPO "
        "ends its math stage when the reward flattens.",
    )
    plateau_metric: Literal["eval/accuracy", "eval/reward"] = Field(
        "eval/reward",
        description="The evaluation metric a plateau is judged on (higher is better).",
    )
    plateau_min_delta: float = Field(
        0.005, ge=0.0, description="Smallest rise of plateau_metric that counts as improving."
    )


class OptimSection(Section):
    """`[optim]`: optimiser and learning-rate schedule."""

    name: Literal["adamw"] = Field("adamw", description="Optimiser.")
    lr: float = Field(1e-6, gt=0.0, description="Peak learning rate.")
    weight_decay: float = Field(0.0, ge=0.0, description="Decoupled weight decay.")
    betas: tuple[float, float] = Field(
        (0.9, 0.999), description="Adam betas: decay rates of the moments, each in [0, 1)."
    )
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

    @field_validator("betas")
    @classmethod
    def _decay_rates(cls, value: tuple[float, float]) -> tuple[float, float]:
        if not all(0.0 <= b < 1.0 for b in value):
            raise ValueError(
                f"Adam's betas are decay rates, each in [0, 1) (got {list(value)}); "
                "e.g. betas = [0.9, 0.999]"
            )
        return value


class StageSection(Section):
    """`[[stages]]`: one stage of a staged run; its tables override the top-level sections.
    Stage N+1 starts from stage N's final weights."""

    name: str = Field(..., min_length=1, description="Stage name (its run sub-directory).")
    data: dict[str, Any] = Field(
        default_factory=dict,
        description="Overrides of [data]; sources here replace the top level's path or task, "
        "and a path or task replaces its sources.",
    )
    rollout: dict[str, Any] = Field(default_factory=dict, description="Overrides of [rollout].")
    algorithm: dict[str, Any] = Field(default_factory=dict, description="Overrides of [algorithm].")
    critic: dict[str, Any] = Field(default_factory=dict, description="Overrides of [critic].")
    sampling: dict[str, Any] = Field(default_factory=dict, description="Overrides of [sampling].")
    train: dict[str, Any] = Field(default_factory=dict, description="Overrides of [train].")
    optim: dict[str, Any] = Field(default_factory=dict, description="Overrides of [optim].")
    reward: dict[str, Any] = Field(default_factory=dict, description="Overrides of [reward].")

    @field_validator("name")
    @classmethod
    def _one_directory(cls, value: str) -> str:
        return check_dir_name(value, "[stages] name")


class LLMSections(Section):
    """Every table of an LLM run, typed; `LLMConfig` adds the rules between them."""

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
    critic: CriticSection = Field(
        default_factory=CriticSection, description="Value model (value-based estimators)."
    )
    sampling: SamplingSection = Field(
        default_factory=SamplingSection, description="Which completions a step trains on."
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
    cluster: ClusterSection = Field(
        default_factory=ClusterSection, description="Where roles run (local, or a Ray cluster)."
    )
    clean: CleanSection = Field(default_factory=CleanSection, description="`ascent data clean`.")
    grade: GradeSection = Field(default_factory=GradeSection, description="`ascent data grade`.")
    # Checked after the sections it depends on (fields validate in this order; LLMConfig adds
    # the rules, ascent.rules.agentic).
    agentic: AgenticSection = Field(
        default_factory=AgenticSection, description="Agentic (multi-role, multi-turn) rollouts."
    )
    stages: list[StageSection] = Field(
        default_factory=list, description="Stages run one after another (SRPO); empty: one run."
    )

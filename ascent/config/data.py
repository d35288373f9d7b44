"""`[data]`: the problems an LLM run trains and evaluates on (built-in tasks or data files)."""

from __future__ import annotations

import json
import re
import string
from typing import Any, Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator

from ascent import names
from ascent.config.base import Section
from ascent.config.grade import Difficulty

BUILTIN_TRAIN_SIZE = 10000  # problems a built-in task generates when [data] train_size is unset
REASONING_GYM = "reasoning_gym:"  # path prefix of a reasoning-gym generator
OPENENV = "openenv:"  # path prefix of an OpenEnv environment
VERIFIERS = "verifiers:"  # path prefix of a verifiers environment
_ENV_ID = re.compile(r"[A-Za-z_][\w.-]*(?:/[A-Za-z_][\w.-]*)?")  # a module, or owner/name
_APP = re.compile(r"[A-Za-z_][\w.]*:[A-Za-z_]\w*")  # MODULE:APP, as uvicorn takes it


def plain_settings(value: dict[str, Any], where: str) -> dict[str, Any]:
    """Settings handed to another library travel in JSON (a problem's column names the
    generator or environment with them): a TOML date or time cannot, so it is refused here
    rather than met as a traceback when the problems are made."""
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        raise ValueError(
            f"{where}: settings must be strings, numbers, booleans, lists or tables; write a "
            "date or time as a string"
        ) from None
    return value


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


class OpenEnvSection(Section):
    """`[data.openenv]`: how ascent talks to an OpenEnv environment (`path = "openenv:..."`)."""

    prompt_field: str = Field(
        "prompt",
        description="Field of the observation reset() returns that holds the prompt; the "
        "observation's other scalar fields are columns the prompt template may use.",
    )
    action_field: str = Field(
        "text", description="Field of the environment's action that receives the completion."
    )
    sessions: int = Field(
        16,
        ge=1,
        le=1024,
        description="Episodes played at once, each in its own WebSocket session; at most the "
        "server's max_concurrent_envs.",
    )
    reset: dict[str, Any] = Field(
        default_factory=dict,
        description="Keyword arguments every reset() gets beside the problem's seed, as the "
        "environment names them (e.g. {digits = 1}); the seed comes from [data] seed.",
    )

    @field_validator("reset")
    @classmethod
    def _seed_is_ours(cls, value: dict[str, Any]) -> dict[str, Any]:
        plain_settings(value, "[data.openenv] reset")
        for key in ("seed", "episode_id"):
            if key in value:
                raise ValueError(
                    f"[data.openenv] reset.{key}: ascent sets it for every episode (a problem "
                    "is a seed); remove the key"
                )
        return value


class ColumnsSection(Section):
    """`[data.columns]`: which column of a data file holds each field of a problem."""

    prompt: str = Field("prompt", description="Column with the question the policy is given.")
    answer: str = Field("answer", description="Column with the gold answer.")
    id: str | None = Field(
        None, description="Column with a problem id; unset: the prompt text identifies a problem."
    )
    extra: list[str] = Field(
        default_factory=list,
        description="More columns passed to reward functions and the prompt template by name.",
    )


class ProblemSource(Section):
    """One set of problems: a built-in task or a data file, its split and its prompt."""

    task: str = Field("arithmetic", description="Built-in task: arithmetic or countdown.")
    path: str | None = Field(
        None,
        description="Problems from a JSONL or Parquet file, a `datasets.save_to_disk` "
        "directory, a bundled set (ascent:gsm8k_test), a Hugging Face hub id "
        "(owner/name, where the hub is reachable), a reasoning-gym generator "
        "(reasoning_gym:NAME, scored by the reasoning_gym reward) or an OpenEnv environment "
        "(openenv:MODULE:APP served here, or openenv:http://HOST:PORT; scored by the openenv "
        "reward) or a verifiers environment (verifiers:ENV_ID, a module with "
        "load_environment(); scored by the verifiers reward) instead of a built-in task.",
    )
    format: Literal["auto", "jsonl", "parquet", "datasets", "hub"] = Field(
        "auto",
        description="Format of path and eval_path; auto: from the suffix / directory, and a "
        "missing path shaped owner/name is a hub id; hub: datasets.load_dataset(path).",
    )
    split: str = Field("train", description="Split to train on when path holds a DatasetDict.")
    eval_path: str | None = Field(
        None,
        description="Validation problems from their own file or directory; unset: eval_size "
        "problems held out of path.",
    )
    eval_split: str | None = Field(
        None,
        description="Validation split of a DatasetDict (in eval_path, else in path); unset: "
        "hold problems out of the training split.",
    )
    columns: ColumnsSection = Field(
        default_factory=ColumnsSection, description="Column mapping of data files."
    )
    train_size: int | None = Field(
        None,
        ge=1,
        description=f"Training problems: a built-in task generates this many (unset: "
        f"{BUILTIN_TRAIN_SIZE}); a data file keeps this many after shuffling (unset: all).",
    )
    eval_size: int = Field(200, ge=1, description="Held-out problems for evaluation.")
    difficulty: list[Difficulty] | None = Field(
        None,
        min_length=1,
        description="Train and evaluate only on rows whose difficulty column (written by "
        "`ascent data grade`) is one of these, e.g. ['medium', 'hard']; the held-out "
        "split (and eval_path) is filtered too. Unset: every row.",
    )
    seed: int | None = Field(
        None,
        ge=0,
        description="Seed of the training problems (a built-in task's draw, a file's shuffle); "
        "unset: [run] seed.",
    )
    prompt_template: str = Field(
        "{prompt}",
        description="Format string for what the policy sees: {prompt} is the task's prompt; "
        "the task's columns ({a} {op} {b} of arithmetic, {numbers} {target} of countdown, "
        "[data.columns] extra) may also be used.",
    )
    arithmetic: ArithmeticSection = Field(
        default_factory=ArithmeticSection, description="Arithmetic task settings."
    )
    countdown: CountdownSection = Field(
        default_factory=CountdownSection, description="Countdown task settings."
    )
    reasoning_gym: dict[str, Any] = Field(
        default_factory=dict,
        description="Settings of a reasoning_gym:NAME generator, as its config class names "
        "them (e.g. {min_terms = 2, max_terms = 2} for basic_arithmetic); its size and seed "
        "come from train_size / eval_size and seed.",
    )

    openenv: OpenEnvSection = Field(
        default_factory=OpenEnvSection,
        description="How to talk to an openenv:... environment: its prompt and action fields.",
    )
    verifiers: dict[str, Any] = Field(
        default_factory=dict,
        description="Arguments of a verifiers:ENV_ID environment's load_environment(), as it "
        "names them (e.g. {digits = 3} for ascent.envs.verifiers_addition).",
    )

    @property
    def verifiers_env(self) -> str | None:
        """ENV_ID of `path = "verifiers:ENV_ID"`; None for any other source."""
        if self.path is None or not self.path.startswith(VERIFIERS):
            return None
        return self.path.removeprefix(VERIFIERS)

    @property
    def openenv_target(self) -> str | None:
        """What follows `openenv:` in path (MODULE:APP or a URL); None for any other source."""
        if self.path is None or not self.path.startswith(OPENENV):
            return None
        return self.path.removeprefix(OPENENV)

    @property
    def generated(self) -> bool:
        """Whether the problems come from a generator or environment (no files, no columns)."""
        return any(
            name is not None
            for name in (self.reasoning_gym_name, self.openenv_target, self.verifiers_env)
        )

    @property
    def reasoning_gym_name(self) -> str | None:
        """NAME of `path = "reasoning_gym:NAME"`; None for any other source."""
        if self.path is None or not self.path.startswith(REASONING_GYM):
            return None
        return self.path.removeprefix(REASONING_GYM)

    @property
    def builtin_train_size(self) -> int:
        return self.train_size or BUILTIN_TRAIN_SIZE

    @field_validator("prompt_template")
    @classmethod
    def _template_has_a_field(cls, value: str) -> str:
        """A template without a field would give every problem the same prompt. Which
        fields exist depends on the task, so load_task checks them by rendering one."""
        try:
            fields = [name for _, name, _, _ in string.Formatter().parse(value) if name]
        except ValueError:  # a lone brace: load_task names it with the fix
            return value
        if not fields:
            raise ValueError(
                "[data] prompt_template must contain {prompt} (the task's question) or one of "
                'the task\'s columns, e.g. "Question: {prompt}\\nAnswer:"'
            )
        return value

    @field_validator("reasoning_gym", "verifiers")
    @classmethod
    def _plain(cls, value: dict[str, Any], info: ValidationInfo) -> dict[str, Any]:
        return plain_settings(value, f"[data] {info.field_name}")

    @field_validator("difficulty")
    @classmethod
    def _distinct_buckets(cls, value: list[str] | None) -> list[str] | None:
        if value is not None and len(set(value)) != len(value):
            raise ValueError("[data] difficulty lists a bucket twice; list each once")
        return value

    @field_validator("task")
    @classmethod
    def _known_task(cls, value: str) -> str:
        if value not in names.TASKS:
            raise ValueError(names.unknown_message("task", value, names.TASKS))
        return value

    @model_validator(mode="after")
    def _file_settings_need_a_file(self) -> ProblemSource:
        if self.path is None:
            if self.difficulty is not None:
                raise ValueError(
                    "[data] difficulty: built-in tasks have no graded rows; grade a data file "
                    "with `ascent data grade` and set [data] path to it, or remove the key"
                )
            for key in ("eval_path", "eval_split", "format", "split", "columns"):
                if self.explicitly_set(key):
                    raise ValueError(
                        f"[data] {key}: only data files use it; set [data] path, or remove the key"
                    )
        elif self.explicitly_set("task"):
            raise ValueError(
                f"[data] task: problems come from path ({self.path}), so the built-in task "
                f"'{self.task}' would be ignored; remove one of the two keys"
            )
        if self.openenv_target is None and self.explicitly_set("openenv"):
            raise ValueError(
                "[data] openenv: only an OpenEnv environment uses it; set "
                'path = "openenv:MODULE:APP" (or openenv:http://HOST:PORT), or remove the key'
            )
        if self.reasoning_gym_name is None and self.reasoning_gym:
            raise ValueError(
                "[data] reasoning_gym: only a reasoning-gym generator uses it; set "
                'path = "reasoning_gym:NAME", or remove the key'
            )
        if self.verifiers_env is None and self.verifiers:
            raise ValueError(
                "[data] verifiers: only a verifiers environment uses it; set "
                'path = "verifiers:ENV_ID", or remove the key'
            )
        if not self.generated:
            return self
        if self.reasoning_gym_name is not None:
            what = "a reasoning-gym generator"
        elif self.openenv_target is not None:
            what = "an OpenEnv environment"
        else:
            what = "a verifiers environment"
        for key in ("eval_path", "eval_split", "format", "split", "columns", "difficulty"):
            if self.explicitly_set(key):
                raise ValueError(
                    f"[data] {key}: {what} makes both splits itself and has no files or "
                    "columns; remove the key"
                )
        target = self.openenv_target
        if target is not None:
            if not (target.startswith(("http://", "https://")) or _APP.fullmatch(target)):
                raise ValueError(
                    f"[data] path: {self.path!r} names no environment; write "
                    '"openenv:MODULE:APP" (an app made by openenv\'s create_app, served here, '
                    'e.g. "openenv:my_env.server.app:app") or "openenv:http://HOST:PORT" of a '
                    "running server"
                )
            return self
        if self.verifiers_env is not None:
            if not _ENV_ID.fullmatch(self.verifiers_env):
                raise ValueError(
                    f"[data] path: {self.path!r} names no environment; write "
                    '"verifiers:ENV_ID", the module (or installed environment) whose '
                    'load_environment() makes it, e.g. "verifiers:ascent.envs.verifiers_addition"'
                )
            return self
        if not self.reasoning_gym_name:
            raise ValueError(
                '[data] path: name the generator after the colon, e.g. "reasoning_gym:chain_sum"'
            )
        for key in ("size", "seed"):
            if key in self.reasoning_gym:
                raise ValueError(
                    f"[data] reasoning_gym.{key}: set [data] "
                    f"{'train_size / eval_size' if key == 'size' else 'seed'} instead"
                )
        return self


SOURCE_NAME = re.compile(r"[A-Za-z0-9_-]{1,40}")
# Keys that say what one set of problems is: with [[data.sources]] each source sets its own.
SOURCE_KEYS = tuple(ProblemSource.model_fields)


class DataSourceSection(ProblemSource):
    """`[[data.sources]]`: one of several problem sets a run draws from, with its share of
    the prompts (SRPO's stage 2 trains on math and code together)."""

    name: str = Field(
        description="The source's name, in its metrics (eval/NAME/accuracy) and problem keys."
    )
    weight: float = Field(
        1.0,
        gt=0,
        description="Share of the training prompts drawn from this source, relative to the "
        "other sources' weights (a source smaller than its share is repeated within an epoch).",
    )

    @field_validator("name")
    @classmethod
    def _plain_name(cls, value: str) -> str:
        if not SOURCE_NAME.fullmatch(value):
            raise ValueError(
                f"[[data.sources]] name: {value!r} must be 1-40 letters, digits, '_' or '-' "
                '(it names metrics), e.g. name = "math"'
            )
        return value


class DataSection(ProblemSource):
    """`[data]`: the problems a run trains and evaluates on: one source (these keys), or
    several (`[[data.sources]]`, each with these keys and a weight)."""

    sources: list[DataSourceSection] = Field(
        default_factory=list,
        description="Several problem sets drawn from together, each a table with [data]'s "
        "keys plus name and weight; training batches mix them by weight, evaluation covers each "
        "source's held-out problems and reports accuracy per source.",
    )
    shuffle: bool = Field(True, description="Shuffle training problems each epoch (seeded).")
    chat_template: Literal["auto", "on", "off"] = Field(
        "auto",
        description="Send the rendered prompt as one user message through the tokenizer's chat "
        "template: auto (when the tokenizer has one), on (required), off.",
    )

    @property
    def parts(self) -> list[ProblemSource]:
        """What the problems come from: the sources, or this section itself."""
        return list(self.sources) or [self]

    @model_validator(mode="after")
    def _sources_own_their_keys(self) -> DataSection:
        if not self.sources:
            return self
        names = [s.name for s in self.sources]
        if len(set(names)) != len(names):
            raise ValueError("[[data.sources]] two sources share a name; give each its own")
        for key in SOURCE_KEYS:
            if self.explicitly_set(key):
                raise ValueError(
                    f"[data] {key}: with [[data.sources]] each source sets its own; move the "
                    "key into the sources that need it"
                )
        return self

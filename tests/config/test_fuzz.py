"""Fuzzing the config loader: any TOML document, any bytes, any `--set` override either loads
or fails with one line naming the file (an `AscentError`), never with a traceback or a hang.

The documents are built from the real section and key names (read from the pydantic models),
with values of every TOML type, so they reach the validators and the cross-section rules
instead of stopping at the first unknown key. Every bug the fuzzer found has a plain test at
the end of the file with the input that triggered it.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from types import UnionType
from typing import Any, Literal, Union, get_args, get_origin

import pytest
import tomli_w
from hypothesis import example, given
from hypothesis import strategies as st
from pydantic import BaseModel

from ascent.configfile import load_config
from ascent.errors import AscentError, ConfigError
from ascent.rules import ClassicConfig, LLMConfig
from tests.fuzzing import FUZZ, one_line_or_success

# -- the shape of the real config ------------------------------------------------------------


def _section_model(annotation: Any) -> tuple[type[BaseModel] | None, bool]:
    """(the section model a field holds, whether it is an array of tables)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation, False
    for arg in get_args(annotation):
        model, _ = _section_model(arg)
        if model is not None:
            return model, True
    return None, False


def schema(model: type[BaseModel]) -> dict[str, Any]:
    """key -> its type (a value), a nested schema (a table) or [schema] (an array of tables)."""
    out: dict[str, Any] = {}
    for name, field in model.model_fields.items():
        sub, is_list = _section_model(field.annotation)
        out[name] = field.annotation if sub is None else [schema(sub)] if is_list else schema(sub)
    return out


LLM_SCHEMA = schema(LLMConfig)
# A [[stages]] table's tables override the top-level sections of the same name.
LLM_SCHEMA["stages"][0] |= {k: LLM_SCHEMA[k] for k in LLM_SCHEMA["stages"][0] if k in LLM_SCHEMA}
CLASSIC_SCHEMA = schema(ClassicConfig)
UNKNOWN_KEYS = ["lrr", "optimm", "enabled", "name", "path", "x", "", "a b", "é", "key\nline"]

# Values a user plausibly writes, so that validators past the type check run too.
WORDS = [
    "grpo", "dr_grpo", "gae", "length_adaptive_gae", "ppo_clip", "gspo", "token_mean", "k3",
    "math", "code", "countdown", "arithmetic", "auto", "cpu", "cuda:0", "python", "cpp", "api",
    "local", "policy", "off", "solver", "penalty", "mask", "separate", "head", "jsonl",
    "parquet", "datasets", "humaneval", "ascent:tiny", "ascent:humaneval", "{prompt}",
    "{problem}", "Q: {prompt}\nA:", "vllm", "openai", "http://localhost:8000", "runs",
    "~nobody_here/x", "\x00", "line\nbreak", "\u2028",
]  # fmt: skip
scalars = st.one_of(
    st.integers(-3, 100),
    st.sampled_from([0, 1, 2, 4, 6, 7, 8, 64, 1000, 10**6, -(2**63), 2**63 - 1]),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0.0, 0.001, 0.2, 0.3, 0.5, 1.0, 1e-6, 1e308, float("nan"), float("inf")]),
    st.booleans(),
    st.text(max_size=12),
    st.sampled_from(WORDS),
    st.dates(),
)
values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(
            st.sampled_from(["a", "name", "lr"]) | st.text(max_size=4), inner, max_size=3
        )
    ),
    max_leaves=6,
)
# [env] id imports the module named before a ':', so random ids have no ':' at all.
ENV_IDS = [
    "CartPole-v1", "Pendulum-v1", "NoSuchEnv-v0", "", ":Env-v0", ".rel:Env-v0",
    "ascent_no_such_module:Env-v0", "CartPole-v1\n",
]  # fmt: skip
env_ids = st.sampled_from(ENV_IDS) | values.filter(lambda v: ":" not in str(v))


def typed(annotation: Any) -> st.SearchStrategy[Any]:
    """Values of a field's own type, mostly in range: they pass the type check and reach the
    validators and the cross-section rules."""
    origin, args = get_origin(annotation), get_args(annotation)
    if annotation is bool:
        return st.booleans()
    if annotation is int:
        return st.integers(-1, 70) | st.sampled_from([0, 1, 2, 4, 6, 7, 8, 16, 64, 1000, 2**62])
    if annotation is float:
        return st.floats(-0.5, 3) | st.sampled_from([0.0, 0.2, 1.0, 2.0, float("nan"), 1e308])
    if annotation is str:
        return st.sampled_from(WORDS) | st.text(max_size=8)
    if origin is Literal:
        return st.sampled_from(args)
    if origin in (Union, UnionType):
        return st.one_of([typed(a) for a in args if a is not type(None)])
    if origin is list:
        return st.lists(typed(args[0]), max_size=3)
    if origin is tuple:
        return st.tuples(*map(typed, args)).map(list)
    return values


def table(
    node: dict[str, Any], depth: int = 0, wild: bool = True
) -> st.SearchStrategy[dict[str, Any]]:
    """A TOML table for a schema node: some of its keys with values of their types; `wild`
    adds unknown keys, values of any type, and values where a table belongs."""
    names = list(node) + UNKNOWN_KEYS if wild else list(node)
    keys = st.lists(st.sampled_from(names), unique=True, max_size=5)
    return keys.flatmap(
        lambda chosen: st.fixed_dictionaries(
            {k: value_for(node.get(k), k, depth, wild) for k in chosen}
        )
    )


def value_for(sub: Any, key: str, depth: int, wild: bool) -> st.SearchStrategy[Any]:
    if key == "id" and depth == 1:  # [env] id (no other section has an id key)
        return env_ids
    anything = values if wild else st.nothing()
    if isinstance(sub, dict) and depth < 3:
        return table(sub, depth + 1, wild) | anything
    if isinstance(sub, list) and depth < 3:
        return st.lists(table(sub[0], depth + 1, wild), max_size=2) | anything
    if isinstance(sub, (dict, list)) or sub is None:  # too deep, or a key the section lacks
        return values
    return typed(sub) | anything


def llm_documents(wild: bool = True) -> st.SearchStrategy[dict[str, Any]]:
    return table(LLM_SCHEMA, wild=wild).map(lambda d: {k: v for k, v in d.items() if k != "env"})


def write_config(folder: Path, data: dict[str, Any] | str | bytes) -> Path:
    path = folder / "fuzz.toml"
    if isinstance(data, dict):
        data = tomli_w.dumps(data)
    path.write_bytes(data.encode("utf-8", "surrogatepass") if isinstance(data, str) else data)
    return path


def load_written(data: dict[str, Any] | str | bytes) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = write_config(Path(tmp), data)
        one_line_or_success(lambda: load_config(path), str(path))


# -- properties ------------------------------------------------------------------------------


@FUZZ
@given(llm_documents())
def test_random_llm_config_loads_or_fails_in_one_line(doc):
    load_written(doc)


@FUZZ
@given(llm_documents(wild=False))
def test_random_well_typed_llm_config_loads_or_fails_in_one_line(doc):
    # Real keys with values of their own types: these reach the cross-section rules.
    load_written(doc)


@FUZZ
@given(
    table(CLASSIC_SCHEMA) | table(CLASSIC_SCHEMA, wild=False),
    table(CLASSIC_SCHEMA["env"], 1) | table(CLASSIC_SCHEMA["env"], 1, wild=False),
)
def test_random_classic_config_loads_or_fails_in_one_line(doc, env):
    load_written({**doc, "env": env})


# Fragments of TOML glued at random: closer to a real broken file than uniform random text.
FRAGMENTS = [
    "[optim]\n", "[data]\n", "[[stages]]\n", "[env]\n", "[run]\n", "lr = ", "name = ", "1e-5",
    '"x"', "[1, 2", "]", "}", "{a = 1}", "\n", "=", "'''", '"""', "nan", "inf", "0x1F",
    "1979-05-27", "true", "run.name = 'a'", "# c\n", "\\u00e9", "\x00", "\r\n", " ", "[",
]  # fmt: skip


@FUZZ
@given(st.text(max_size=200) | st.lists(st.sampled_from(FRAGMENTS), max_size=20).map("".join))
def test_random_text_as_config_loads_or_fails_in_one_line(text):
    load_written(text)


@FUZZ
@given(st.binary(max_size=200))
@example(b"\xff\xfe[optim]\n")
def test_random_bytes_as_config_load_or_fail_in_one_line(data):
    load_written(data)


def _dotted(node: dict[str, Any], prefix: str = "") -> list[str]:
    out = []
    for key, sub in node.items():
        out.append(prefix + key)
        if isinstance(sub, dict):
            out += _dotted(sub, prefix + key + ".")
    return out


override_values = st.one_of(
    values.map(lambda v: tomli_w.dumps({"v": v}).partition("=")[2].strip()),
    st.text(max_size=20),
    st.sampled_from(["", "[", "{", "1e-5", "[0.9, 0.95]", '"a\nb"', "nan", "'''", "1 2"]),
)
override_items = st.one_of(
    st.builds("{}={}".format, st.sampled_from([*_dotted(LLM_SCHEMA), "a..b"]), override_values),
    st.builds("{}={}".format, st.text(max_size=10), override_values),
    st.text(max_size=30),
)


@FUZZ
@given(st.lists(override_items, max_size=4), llm_documents() | st.just({}))
def test_random_set_overrides_load_or_fail_in_one_line(overrides, doc):
    with tempfile.TemporaryDirectory() as tmp:
        path = write_config(Path(tmp), doc)
        err = one_line_or_success(lambda: load_config(path, overrides))
        # An error from --set names the override; one from the file names the file.
        assert err is None or str(path) in str(err) or "--set" in str(err), str(err)


@FUZZ
@given(st.text(max_size=30))
@example("a" * 300 + ".toml")
@example("x\x00y.toml")
def test_random_config_file_names_load_or_fail_in_one_line(name):
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / name.replace("/", "_")
        one_line_or_success(lambda: load_config(path))


settings_json = st.one_of(
    st.binary(max_size=60),
    st.dictionaries(
        st.sampled_from(["output_dir", "device", "threads", "deterministic", "seed"]), values
    ).map(lambda d: json.dumps(d, default=str).encode()),
    st.sampled_from([b"[]", b"{", b'{"threads": ' + b"1" * 5000 + b"}", b"[" * 5000]),
)


@FUZZ
@given(settings_json)
def test_random_settings_json_beside_a_classic_config_loads_or_fails_in_one_line(data):
    with tempfile.TemporaryDirectory() as tmp:
        path = write_config(Path(tmp), '[env]\nid = "CartPole-v1"\n')
        (Path(tmp) / "settings.json").write_bytes(data)
        one_line_or_success(lambda: load_config(path), "settings.json")


# -- regressions: what the fuzzer found ------------------------------------------------------


def load_text(tmp_path: Path, text: str | bytes) -> str:
    """The one-line error that loading `text` as a config raises; it starts with the file."""
    path = write_config(tmp_path, text)
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    message = str(caught.value)
    assert message.splitlines() == [message] and message.startswith(str(path)), message
    return message


def test_a_key_with_a_newline_is_named_on_one_line(tmp_path):
    message = load_text(tmp_path, '[reward]\n"key\\nline" = 1\n')
    assert "unknown key 'key\\nline' in [reward]" in message


def test_run_as_a_value_instead_of_a_table_is_a_config_error(tmp_path):
    message = load_text(tmp_path, "run = 1\n")  # crashed setting the default run name
    assert (
        "run must be a table of keys, not a value (got 1); write it as a [run] section" in message
    )
    with pytest.raises(ConfigError, match=r"run must be a table .* \(from --set\)$"):
        load_config(None, ["run="])


def test_config_that_is_not_utf8_names_the_line(tmp_path):
    message = load_text(tmp_path, b'[optim]\nlr = "\xe9"\n')
    assert "line 2 is not UTF-8 text (byte 0xe9); save the config as UTF-8" in message


def test_deeply_nested_toml_is_refused_not_a_recursion_error(tmp_path):
    assert "nested too deeply" in load_text(tmp_path, "a = " + "[" * 5000)
    # Nested as deep as the TOML reader allows: the checks after it must not recurse either.
    load_text(tmp_path, "[train]\nx = " + "[" * 480 + "]" * 480 + "\n")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("[train]\nbatch_size = " + "1" * 5000 + "\n", "an integer is too long"),
        (
            "[train]\nbatch_size = 0x" + "f" * 5000 + "\n",
            "[train] batch_size: integer out of range",
        ),
        ("[optim]\nlr = 0x" + "f" * 20 + "\n", "[optim] lr: integer out of range; TOML integers"),
    ],
)
def test_integers_beyond_64_bits_are_refused(tmp_path, text, expected):
    assert expected in load_text(tmp_path, text)


def test_a_set_value_too_deep_to_parse_is_a_config_error():
    with pytest.raises(ConfigError, match=r"--set optim\.lr: the value is nested too deeply"):
        load_config(None, ["optim.lr=" + "[" * 5000])
    with pytest.raises(ConfigError, match=r"--set train\.batch_size: integer out of range"):
        load_config(None, ["train.batch_size=0x" + "f" * 5000])


def test_config_path_too_long_for_the_file_system_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="cannot read the config"):
        load_config(tmp_path / ("a" * 300 + ".toml"))


@pytest.mark.timeout(30)
@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("[train]\nbatch_size = 9223372036854775807\n", "group_size (8) must divide batch_size"),
        (
            "[train]\nbatch_size = 7999999496\n[sampling]\nreplay_ratio = 0.3\n"
            '[algorithm]\nadvantage = "gae"\nis_cap = 2.0\n',
            "[sampling] replay_ratio",
        ),
        (
            '[env]\nid = "CartPole-v1"\n[train]\nbatch_size = 9223372036854775807\n'
            "rollout_steps = 7\ntotal_timesteps = 100000\n",
            "is not a multiple of batch_size",
        ),
    ],
)
def test_huge_batch_sizes_get_their_message_at_once(tmp_path, text, expected):
    # These hung: the valid values the message proposes were found by trying every divisor.
    assert expected in load_text(tmp_path, text)


def test_batch_size_messages_still_propose_the_nearest_values(tmp_path):
    message = load_text(tmp_path, "[rollout]\ngroup_size = 6\n[train]\nbatch_size = 64\n")
    assert "try group_size 4 or 8, or batch_size 60 or 66" in message


@pytest.mark.parametrize("env_id", [".rel:Env-v0", ":Env-v0"])
def test_env_id_with_a_relative_or_empty_module_is_a_config_error(tmp_path, env_id):
    message = load_text(tmp_path, f'[env]\nid = "{env_id}"\n')
    assert f"[env] id '{env_id}': cannot import module" in message


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (b"\x80", "not UTF-8 text; save it as UTF-8 JSON"),
        (b"[" * 5000, "nested too deeply or a number too long"),
        (b'{"threads": ' + b"1" * 5000 + b"}", "nested too deeply or a number too long"),
    ],
)
def test_unreadable_settings_json_is_a_config_error(tmp_path, data, expected):
    (tmp_path / "settings.json").write_bytes(data)
    with pytest.raises(ConfigError) as caught:
        load_config(write_config(tmp_path, '[env]\nid = "CartPole-v1"\n'))
    assert str(tmp_path / "settings.json") in str(caught.value) and expected in str(caught.value)


def test_a_bad_value_from_settings_json_names_settings_json(tmp_path):
    (tmp_path / "settings.json").write_text('{"output_dir": [1]}')
    message = load_text(tmp_path, '[env]\nid = "CartPole-v1"\n')
    assert "[run] output_dir" in message
    assert f"(from {tmp_path / 'settings.json'})" in message
    (tmp_path / "settings.json").write_text('{"threads": 1' + "0" * 30 + "}")
    with pytest.raises(ConfigError) as caught:
        load_config(tmp_path / "fuzz.toml")
    assert str(caught.value) == (
        f"{tmp_path / 'settings.json'}: [run] threads: integer out of range; TOML integers are "
        "64-bit (-2**63 to 2**63 - 1)"
    )


def test_one_line_errors_escape_what_would_break_the_line():
    assert str(AscentError("column 'a\nb'\x85\u2028")) == "column 'a\\nb'\\x85\\u2028"
    assert str(ConfigError("tab\tstays")) == "tab\tstays"

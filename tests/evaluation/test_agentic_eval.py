"""`ascent eval` with `[eval] mode = "agentic"`: one multi-role episode per problem, judged
in the real sandbox, counted at the first attempt and after feedback, per band and per role;
against a scripted endpoint answering as each role, and against `ascent serve` (tiny model)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ascent.configfile import load_config
from ascent.errors import AscentError, ConfigError
from ascent.evaluation import run_eval
from ascent.evaluation.bands import Skipped
from ascent.evaluation.problem_set import load_problem_set, select_problems
from tests.api.scripted_server import Reply, Seen, models_body, ok
from tests.evaluation.conftest import (
    CHAT,
    MODELS,
    PROJECT,
    data_file,
    prompt_of,
    read_results,
    read_transcripts,
)
from tests.evaluation.test_end_to_end import served_tiny, sets  # noqa: F401 (a fixture)

EXAMPLE = PROJECT / "examples" / "agentic_eval.toml"
WRONG = "print(int(input()) + 1)"  # passes the sample of "double" (1 -> 2), nothing else
HYPOTHESIS = "Multiply. " * 50  # 500 characters: cut in eval_results.json, whole in transcripts


def problem(name: str, factor: int, rating: int | None) -> dict:
    """Read n, print factor * n: one sample, two hidden tests, a Python reference solution."""
    row = {
        "id": name,
        "statement": f"Problem {name}: read n and print {factor} times n.",
        "sample_tests": [{"input": "1\n", "output": f"{factor}\n"}],
        "hidden_tests": [{"input": f"{n}\n", "output": f"{factor * n}\n"} for n in (3, 10)],
        "reference_solution": f"print(int(input()) * {factor})\n",
        "reference_language": "python",
    }
    return row | ({"rating": rating} if rating is not None else {})


def write_problems(tmp_path: Path, rows: list[dict]) -> Path:
    path = tmp_path / "problems.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def agentic_config(
    tmp_path: Path, problems: Path | str, base_url: str, roles: dict[str, str], extra: str = ""
) -> Path:
    """All of [agentic.roles] as given, API roles served at base_url by models named after
    them; [model] points nowhere, so loading it would fail."""
    models = "\n".join(f'{r}_model = "{r}-m"' for r, s in roles.items() if s == "api")
    role_lines = "\n".join(f'{r} = "{s}"' for r, s in roles.items())
    text = f"""
[model]
name_or_path = "{tmp_path / "no-such-model"}"

[api]
base_url = "{base_url}/v1"
api_key_env = ""
max_retries = 1
backoff_sec = 0.01
timeout_sec = 20

[models]
{models}

[agentic]
max_turns = 3

[agentic.roles]
{role_lines}

[sandbox]
workers = 2
time_limit_ms = 1000

[eval]
mode = "agentic"
problems = "{problems}"
output_dir = "{tmp_path / "out"}"
{extra}
"""
    path = tmp_path / "agentic.toml"
    path.write_text(text)
    return path


def role_of(seen: Seen) -> str:
    return seen.body["model"].removesuffix("-m")


def fenced(code: str) -> str:
    return f"Here:\n```python\n{code}\n```"


ALL_API = {"hypothesis": "api", "solver": "api", "testgen": "api", "summarizer": "off"}


def test_a_program_fixed_by_feedback_counts_after_feedback_not_at_the_first_attempt(
    sandbox, server, tmp_path, run_cli
):
    # double: the first program passes the sample, a confirmed generated test breaks it, the
    # second passes (fixed by feedback); triple: right at once; square: never a program.
    rows = [problem("double", 2, 1000), problem("triple", 3, 1500), problem("square", 5, 2000)]
    programs = {"double": [WRONG, "print(2 * int(input()))"], "triple": ["print(3*int(input()))"]}
    tests = {"double": ("5\n", "10\n"), "triple": ("2\n", "6\n"), "square": ("2\n", "10\n")}

    def answer(seen: Seen) -> Reply:
        name = next(n for n in tests if f"Problem {n}:" in prompt_of(seen))
        role = role_of(seen)
        if role == "hypothesis":
            return ok(HYPOTHESIS)
        if role == "testgen":
            test_in, test_out = tests[name]
            return ok(f"```json\n{json.dumps([{'input': test_in, 'output': test_out}])}\n```")
        return ok(fenced(programs[name].pop(0)) if programs.get(name) else "I cannot solve it.")

    server.default(MODELS, Reply(200, models_body("hypothesis-m", "solver-m", "testgen-m")))
    server.default(CHAT, answer)
    config = agentic_config(tmp_path, write_problems(tmp_path, rows), server.url, ALL_API)
    code, out, err = run_cli("eval", str(config), "--set", "agentic.max_turns=2")
    assert code == 0, err

    results = read_results(tmp_path)
    by_id = {p["id"]: p for p in results["problems"]}
    double, triple, square = by_id["double"], by_id["triple"], by_id["square"]
    assert (double["passed_first_attempt"], double["passed"], double["fixed_by_feedback"]) == (
        False,
        True,
        True,
    )
    assert double["first_attempt"]["status"] == "wrong_answer" and double["attempts"] == 2
    assert (triple["passed_first_attempt"], triple["passed"], triple["attempts"]) == (True, True, 1)
    assert (square["passed"], square["first_attempt"]["status"], square["attempts"]) == (
        False,
        "no program",
        2,
    )
    bands = {b["band"]: b for b in results["bands"]}
    assert [bands[b]["solved_first_attempt"] for b in bands] == [0, 1, 0]
    assert [bands[b]["solved"] for b in bands] == [1, 1, 0]
    overall = results["overall"]
    assert (overall["solved_first_attempt"], overall["solved"]) == (1, 2)
    assert overall["fixed_by_feedback"] == 1 and overall["lost_after_feedback"] == 0
    assert overall["pass_first_attempt"] == pytest.approx(1 / 3)
    assert overall["pass"] == pytest.approx(2 / 3)

    # The feedback reached the solver: its second request for "double" showed the broken test.
    solver_prompts = [prompt_of(s) for s in server.requests(CHAT) if role_of(s) == "solver"]
    second = [p for p in solver_prompts if "Problem double:" in p][1]
    assert "A confirmed generated test failed" in second and "Expected:\n10\n" in second

    roles = {r["role"]: r for r in results["roles"]}
    assert roles["hypothesis"] | {"base_url": None} == {
        "role": "hypothesis",
        "source": "api",
        "model": "hypothesis-m",
        "base_url": None,
        "turns_first_attempt": 3,
        "turns_after_feedback": 2,
        "failed_requests": 0,
        "unreadable": 0,
        "hypotheses": 5,
    }
    solver = roles["solver"]
    assert (solver["programs"], solver["programs_first_attempt"]) == (3, 2)
    assert (solver["programs_after_feedback"], solver["unreadable"]) == (1, 2)
    assert (roles["testgen"]["tests_proposed"], roles["testgen"]["tests_confirmed"]) == (3, 3)
    assert roles["summarizer"]["source"] == "off"

    # Each turn's text is cut in the results file and whole in transcripts.jsonl.
    first_turn = double["turns"][0]
    assert first_turn["role"] == "hypothesis" and first_turn["text_chars"] == len(HYPOTHESIS)
    assert len(first_turn["text"]) < len(HYPOTHESIS)
    transcript = {t["id"]: t for t in read_transcripts(tmp_path)}["double"]
    assert transcript["episode"]["turns"][0]["text"] == HYPOTHESIS
    assert [t["role"] for t in transcript["episode"]["turns"]] == 2 * [
        "hypothesis",
        "solver",
        "testgen",
    ]

    for text in ("first attempt", "after feedback", "[0, 1200)", "3 programs (2 1st, 1 later)"):
        assert text in out
    assert "3 tests (3 confirmed)" in out
    assert out.strip().splitlines()[-1] == str(tmp_path / "out" / "eval_results.json")


def test_all_roles_served_by_an_api_never_load_a_local_model(
    sandbox, server, tmp_path, monkeypatch
):
    def no_model(*args, **kwargs):
        raise AssertionError("a local model was loaded")

    monkeypatch.setattr("ascent.evaluation.policy.load_local_policy", no_model)
    monkeypatch.setattr("ascent.models.load_reference", no_model)
    monkeypatch.setattr("ascent.models.load_tokenizer", no_model)

    def answer(seen: Seen) -> Reply:
        role = role_of(seen)
        if role == "solver":
            return ok(fenced("print(2 * int(input()))"))
        if role == "testgen":
            return ok('[{"input": "4\\n", "output": "8\\n"}]')
        return ok(f"{role} text")

    server.default(CHAT, answer)
    roles = ALL_API | {"summarizer": "api"}
    # A summary before every attempt after the first: its threshold is below any transcript.
    extra = "summarize_threshold = 1"
    config = agentic_config(
        tmp_path, write_problems(tmp_path, [problem("double", 2, None)]), server.url, roles
    )
    config.write_text(config.read_text().replace("max_turns = 3", f"max_turns = 3\n{extra}"))
    cfg = load_config(config)
    assert not Path(cfg.model.name_or_path).exists()
    run = run_eval(cfg)
    assert run.rows[-1]["solved"] == 1 == run.rows[-1]["solved_first_attempt"]
    assert {r["role"]: r["source"] for r in run.roles} == dict.fromkeys(roles, "api")
    assert run.results[0].band.label == "unrated"
    assert {role: u["requests"] for role, u in run.header["usage"].items()} == dict.fromkeys(
        roles, 1
    )


def test_a_checkpoint_without_a_policy_role_is_refused(tmp_path):
    roles = {"hypothesis": "off", "solver": "api", "testgen": "off", "summarizer": "off"}
    config = agentic_config(tmp_path, data_file("code_contests_rated.jsonl"), "http://x", roles)
    with pytest.raises(ConfigError, match="--checkpoint loads a local policy, and no"):
        run_eval(load_config(config), checkpoint=tmp_path)


def test_only_bands_evaluates_only_the_problems_rated_inside_the_bands(
    sandbox, server, tmp_path, run_cli
):
    server.default(CHAT, lambda seen: ok("no program today"))  # nothing to run: fast
    roles = {"hypothesis": "off", "solver": "api", "testgen": "off", "summarizer": "off"}
    extra = "rating_bands = [[1000, 1700]]\nonly_bands = true"
    config = agentic_config(tmp_path, "ascent:code_contests_rated", server.url, roles, extra)
    code, out, err = run_cli("eval", str(config), "--set", "agentic.max_turns=1")
    assert code == 0, err
    results = read_results(tmp_path)
    # 17 rated Codeforces problems: 3 B (1200) and 6 C (1500) inside; 3 CodeChef unrated.
    assert [b["band"] for b in results["bands"]] == ["[1000, 1700]"]
    assert results["overall"]["problems"] == 9 == server.count(CHAT)
    assert {p["difficulty"] for p in results["problems"]} == {"B", "C"}
    assert results["skipped"] == {"no_rating": 3, "outside_bands": 8}
    assert "only_bands: 11 problem(s) of the file skipped: 3 without a rating, 8" in out


def test_only_bands_selects_problems_in_single_mode_too(tmp_path):
    rows = [problem("a", 2, 900), problem("b", 2, None), problem("c", 2, 1300)]
    rows += [problem("d", 2, 1400)]
    path = write_problems(tmp_path, rows)
    cfg = load_config(None, ["eval.rating_bands=[[1200, 1800]]", "eval.only_bands=true"]).eval
    kept, skipped = select_problems(path, cfg)
    assert [p.id for p in kept.problems] == ["c", "d"] and skipped == Skipped(1, 1)
    limited, _ = select_problems(path, cfg.model_copy(update={"limit": 1}))
    assert [p.id for p in limited.problems] == ["c"]  # limit counts the problems kept
    assert len(select_problems(path, cfg.model_copy(update={"only_bands": False}))[0].problems) == 4
    with pytest.raises(AscentError, match="no problem is rated inside"):
        select_problems(data_file("code_contests_sample.jsonl"), cfg)


def test_the_rated_sample_is_the_sample_with_letter_estimates_said_to_be_estimates():
    rated = load_problem_set(data_file("code_contests_rated.jsonl")).problems
    sample = load_problem_set(data_file("code_contests_sample.jsonl")).problems
    assert [p.statement for p in rated] == [p.statement for p in sample]
    letters = {"A": 900, "B": 1200, "C": 1500, "D": 1800, "E": 2100, "F": 2400, "H": 3000}
    for p in rated:
        assert p.rating == letters.get(p.difficulty)  # CodeChef levels: no rating
    rows = [
        json.loads(x) for x in data_file("code_contests_rated.jsonl").read_text().split("\n") if x
    ]
    assert all("not the official" in r["rating_source"] for r in rows if "rating" in r)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["eval.num_samples=2"], "does not use it: it runs one episode per problem"),
        (['eval.role="coder"'], "only policy = 'api' uses a [models] role"),
        (['eval.policy="api"', 'eval.role="coder"'], 'role: mode = "agentic" does not use'),
        (['eval.prompt_template="{problem}"'], "each role reads its own prompt"),
        (['eval.mode="single"', "eval.role_instructions=false"], 'only mode = "agentic"'),
    ],
)
def test_settings_an_agentic_eval_cannot_honour_are_refused_at_load(overrides, message):
    with pytest.raises(ConfigError) as err:
        load_config(None, ['eval.mode="agentic"', *overrides])
    assert message in str(err.value)


@pytest.mark.parametrize(
    ("roles", "keys", "message"),
    [
        ({"solver": "policy"}, 'policy = "api"', "no local policy is loaded; set [eval] policy"),
        ({"hypothesis": "api"}, "", 'hypothesis = "api" needs a model'),
        ({}, 'problems = "ascent:gsm8k_test"', "holds math problems"),
    ],
)
def test_roles_the_evaluation_cannot_play_are_refused_before_anything_runs(
    tmp_path, roles, keys, message
):
    all_roles = {"hypothesis": "off", "solver": "api", "testgen": "off", "summarizer": "off"}
    config = agentic_config(
        tmp_path,
        data_file("code_contests_rated.jsonl"),
        "http://127.0.0.1:9",
        all_roles | roles,
        keys,
    )
    text = config.read_text()
    if 'hypothesis = "api"' in text:
        text = text.replace('hypothesis_model = "hypothesis-m"\n', "")
    if "problems = " in keys:
        text = text.replace(f'problems = "{data_file("code_contests_rated.jsonl")}"\n', "")
    config.write_text(text)
    with pytest.raises(ConfigError) as err:
        run_eval(load_config(config))
    assert message in str(err.value)


@pytest.mark.parametrize(
    ("roles", "language", "message"),
    [
        ({"testgen": "scripted"}, None,
         'which confirms generated tests) has no reference_language; add the column (python or '
         'cpp) to the rows, or set [agentic.roles] testgen = "off"'),
        ({"solver": "scripted"}, None,
         "which is the scripted solver's answer) has no reference_language; add the column "
         '(python or cpp) to the rows, or set [agentic.roles] solver = "policy"'),
        ({"testgen": "scripted"}, "java",
         "problem double: reference_language 'java' is not supported; use python or cpp"),
    ],
)  # fmt: skip
def test_a_reference_solution_an_episode_cannot_run_is_refused_before_anything_runs(
    tmp_path, roles, language, message
):
    row = {k: v for k, v in problem("double", 2, 900).items() if k != "reference_language"}
    path = write_problems(tmp_path, [row | ({"reference_language": language} if language else {})])
    all_roles = {"hypothesis": "off", "solver": "api", "testgen": "off", "summarizer": "off"}
    config = agentic_config(tmp_path, path, "http://127.0.0.1:9", all_roles | roles)
    with pytest.raises(AscentError) as err:
        run_eval(load_config(config))
    assert message in str(err.value)


def test_agentic_eval_against_ascent_serve_prints_the_band_table(
    sandbox,
    served_tiny,  # noqa: F811 (the fixture imported above)
    tmp_path,
    run_cli,
    monkeypatch,
):
    monkeypatch.chdir(tmp_path)  # the example names a bundled set: no path to resolve
    overrides = sets(
        f"api.base_url={served_tiny}",
        f'eval.output_dir="{tmp_path}"',
        "eval.limit=6",
        # the tiny model's 256 tokens: no instructions, a cut problem, short answers
        "eval.role_instructions=false",
        "eval.max_problem_chars=40",
        "eval.max_new_tokens=16",
        "agentic.max_turns=2",
        "agentic.summarize_threshold=30",
    )
    code, out, err = run_cli("eval", str(EXAMPLE), *overrides)
    assert code == 0, err
    lines = out.strip().splitlines()
    assert lines[-1] == str(tmp_path / "eval_results.json")
    for text in ("first attempt", "after feedback", "[0, 1200)", "[2400, 4000]", "hypothesis"):
        assert text in out
    results = json.loads((tmp_path / "eval_results.json").read_text())
    assert [b["problems"] for b in results["bands"]] == [1, 2, 2, 1]  # A; B, C; D, D; F
    assert results["skipped"] == {"no_rating": 3, "outside_bands": 0}
    roles = {r["role"]: r for r in results["roles"]}
    assert {r["model"] for r in roles.values()} == {"ascent:tiny"}
    hypothesis, summarizer = roles["hypothesis"], roles["summarizer"]
    assert (hypothesis["turns_first_attempt"], hypothesis["turns_after_feedback"]) == (6, 6)
    assert summarizer["turns_after_feedback"] == 6  # the transcript outgrew 30 tokens
    assert roles["solver"]["programs"] == 0  # the tiny model's alphabet has no backtick
    assert results["overall"]["failed_requests"] == 0
    assert results["usage"]["solver"]["requests"] == 12


def test_a_local_policy_solves_beside_api_and_scripted_roles(sandbox, server, tmp_path):
    server.default(CHAT, lambda seen: ok("try a formula"))
    roles = {"hypothesis": "api", "solver": "policy", "testgen": "scripted", "summarizer": "off"}
    # ascent:tiny reads 256 tokens: no instructions, a cut problem, short answers
    keys = "role_instructions = false\nmax_problem_chars = 30\nmax_new_tokens = 16"
    config = agentic_config(
        tmp_path, write_problems(tmp_path, [problem("double", 2, 1000)]), server.url, roles, keys
    )
    text = config.read_text().replace(str(tmp_path / "no-such-model"), "ascent:tiny")
    config.write_text(text.replace("max_turns = 3", "max_turns = 2"))
    run = run_eval(load_config(config))
    by_role = {r["role"]: r for r in run.roles}
    assert by_role["solver"]["source"] == "policy" and by_role["solver"]["model"] == "ascent:tiny"
    assert by_role["solver"]["turns_first_attempt"] == 1 and by_role["solver"]["programs"] == 0
    assert by_role["hypothesis"]["model"] == "hypothesis-m"
    assert by_role["hypothesis"]["hypotheses"] == run.results[0].episode.attempts
    turns = run.results[0].episode.turns
    assert [t.source for t in turns[:2]] == ["api", "policy"]
    assert turns[1].version is not None  # sampled by the local engine
    assert list(run.header["usage"]) == ["hypothesis"]  # the policy is not an API role


def test_an_api_solver_whose_every_request_fails_evaluated_nothing(sandbox, server, tmp_path):
    """Scripted roles beside it still produce turns; what was evaluated is the API model, and
    none of its requests got an answer."""
    server.default(MODELS, Reply(200, models_body("solver-m")))
    server.default(CHAT, Reply(400, {"error": {"message": "prompt is too long"}}))
    roles = {"hypothesis": "scripted", "solver": "api", "testgen": "scripted", "summarizer": "off"}
    config = agentic_config(
        tmp_path, write_problems(tmp_path, [problem("double", 2, None)]), server.url, roles
    )
    run = run_eval(load_config(config))
    assert any(t.source == "scripted" for t in run.results[0].episode.turns)
    assert run.all_failed and "prompt is too long" in run.first_error

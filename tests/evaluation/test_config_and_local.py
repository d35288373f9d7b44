"""`[eval]` settings: each works or is refused in one line; local policies and run dirs."""

from __future__ import annotations

import json

import pytest

from ascent.configfile import load_config
from ascent.errors import ConfigError
from ascent.evaluation.problem_set import load_problem_set, resolve_problems_path
from tests.evaluation.conftest import PROJECT, data_file, read_results, write_config

EXAMPLE = PROJECT / "examples" / "codeforces_eval.toml"
TINY_FIT = '\nmax_problem_chars = 100\nprompt_template = "{problem}"\nmax_new_tokens = 24\n'


def test_the_example_loads_with_the_settings_it_documents():
    cfg = load_config(EXAMPLE)
    assert cfg.eval.policy == "api" and cfg.eval.role == "solver"
    assert cfg.eval.pass_k == [1, 4] and cfg.eval.num_samples == 4
    assert cfg.eval.rating_bands[-1] == (2400, 4000)


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("eval.pass_k=[1, 8]", "[eval] pass_k: pass@8 needs at least 8 samples per problem"),
        ("eval.temperature=0", "temperature: 0 (greedy) gives 4 identical samples"),
        ("eval.num_sample=3", "unknown key 'num_sample' in [eval] (did you mean 'num_samples'?)"),
        ("eval.policy=remote", "[eval] policy: must be 'local' or 'api'"),
        ("eval.rating_bands=[[0, 1200], [1000, 2000]]", "must not overlap (1200 > 1000)"),
        ("eval.prompt_template='Solve it'", "prompt_template must contain {problem}"),
        ("eval.format=parquet", "[eval] format: must be"),
        ("eval.max_new_tokens=0", "[eval] max_new_tokens: must be greater than or equal to 1"),
    ],
)
def test_bad_settings_are_refused_in_one_line(run_cli, override, message):
    code, _, err = run_cli("eval", str(EXAMPLE), "--set", override)
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1, err


def test_a_role_for_a_local_policy_is_refused():
    with pytest.raises(ConfigError, match=r"role: only policy = 'api' uses a \[models\] role"):
        load_config(EXAMPLE, ["eval.policy=local", "eval.role=judge"])


def test_an_api_role_missing_from_models_is_refused_before_any_request(run_cli):
    code, _, err = run_cli("eval", str(EXAMPLE), "--set", "eval.role=judge")
    assert code == 2 and "role 'judge' has no model" in err
    assert 'add judge_model = "name" to [models] (configured roles: solver)' in err


def test_problem_files_are_found_from_the_cwd_or_beside_the_config(tmp_path, monkeypatch):
    with pytest.raises(ConfigError, match=r"\[eval\] problems is not set"):
        resolve_problems_path("", None)
    (tmp_path / "p.jsonl").write_text("{}\n")
    config = tmp_path / "eval.toml"
    config.write_text("")
    assert resolve_problems_path("p.jsonl", str(config)) == tmp_path / "p.jsonl"
    with pytest.raises(ConfigError, match=r"no file at q.jsonl or .*/q.jsonl; check the path"):
        resolve_problems_path("q.jsonl", str(config))


def test_math_rows_are_detected_and_checked(tmp_path):
    gsm8k = load_problem_set(data_file("gsm8k_test.jsonl"), limit=3)
    assert gsm8k.kind == "math" and gsm8k.problems[0].answer.endswith("#### 18")
    bad = tmp_path / "m.jsonl"
    bad.write_text(json.dumps({"question": "1+1?", "answer": "2"}) + '\n{"question": "x"}\n')
    with pytest.raises(Exception, match=r"m.jsonl:2: 'answer' must be a number or a string"):
        load_problem_set(bad)


def test_humaneval_cannot_be_asked_for_in_cpp(tmp_path, run_cli):
    config = write_config(tmp_path, data_file("humaneval.jsonl.gz"), "http://127.0.0.1:9/v1")
    code, _, err = run_cli("eval", str(config), "--set", "eval.language=cpp")
    assert code == 2 and "call-a-function problems, which are judged in Python" in err


def test_a_checkpoint_with_an_api_policy_is_refused(tmp_path, run_cli, sandbox):
    config = write_config(tmp_path, data_file("humaneval.jsonl.gz"), "http://127.0.0.1:9/v1")
    code, _, err = run_cli("eval", str(config), "--checkpoint", str(tmp_path))
    assert code == 2 and "--checkpoint loads a local model" in err


def test_local_policy_from_a_run_directory(sandbox, tmp_path, run_cli):
    from ascent.models import build_tiny_model

    run = tmp_path / "runs" / "tiny-run"
    model, tokenizer = build_tiny_model()
    model.save_pretrained(run / "final-model")
    tokenizer.save_pretrained(run / "final-model")
    problems = data_file("humaneval.jsonl.gz")
    config = write_config(tmp_path, problems, "http://127.0.0.1:9/v1", "limit = 2" + TINY_FIT)
    text = config.read_text().replace('policy = "api"\nrole = "solver"', 'policy = "local"')
    text = text.replace(f'output_dir = "{tmp_path / "out"}"\n', "")
    (run / "config.toml").write_text(text)
    code, out, err = run_cli("eval", str(run))
    assert code == 0, err
    results_path = run / "eval" / "humaneval" / "eval_results.json"
    assert out.strip().splitlines()[-1] == str(results_path)
    results = json.loads(results_path.read_text())
    assert results["policy"]["policy"] == "local"
    assert results["policy"]["model"] == str(run / "final-model")
    assert results["overall"]["problems"] == 2 and results["overall"]["failed_requests"] == 0
    assert "(local)" in err


def test_local_policy_from_the_model_section(sandbox, tmp_path, run_cli):
    problems = data_file("code_contests_sample.jsonl")
    keys = 'limit = 2\nnum_samples = 2\npass_k = [1, 2]\npolicy = "local"' + TINY_FIT
    config = write_config(tmp_path, problems, "http://127.0.0.1:9/v1", keys)
    config.write_text(config.read_text().replace('policy = "api"\nrole = "solver"\n', ""))
    code, out, err = run_cli("eval", str(config))
    assert code == 0, err
    results = read_results(tmp_path)
    assert results["policy"]["model"] == "ascent:tiny" and results["num_samples"] == 2
    assert results["usage"]["policy"]["requests"] == 4
    assert "MEDIUM (no rating)" in out


def test_requests_over_the_local_models_context_name_the_eval_settings(sandbox, tmp_path, run_cli):
    problems = data_file("code_contests_sample.jsonl")
    keys = 'limit = 1\nnum_samples = 1\npass_k = [1]\npolicy = "local"\nmax_new_tokens = 250\n'
    config = write_config(tmp_path, problems, "http://127.0.0.1:9/v1", keys)
    config.write_text(config.read_text().replace('policy = "api"\nrole = "solver"\n', ""))
    code, _, err = run_cli("eval", str(config))
    error = err.strip().splitlines()[-1]
    assert code == 2 and "every request failed, nothing was evaluated" in error, err
    assert "(the model allows 256 tokens); lower [eval] max_new_tokens or set [eval] " in error

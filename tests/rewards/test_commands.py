"""`ascent reward math|code` and `ascent sandbox run`: the JSON fields are a promise."""

from __future__ import annotations

import io
import json

import pytest

from ascent.cli import main
from tests.rewards.conftest import FAST, isolation_or_skip

pytestmark = pytest.mark.timeout(120)


def run_cli(argv: list[str], capsys, monkeypatch, stdin: str = "") -> tuple[int, list, str]:
    """Run `ascent ARGV`; returns (exit code, stdout JSON lines, stderr)."""
    monkeypatch.setattr("sys.stdin", io.StringIO(stdin))
    code = 0
    try:
        main(argv)
    except SystemExit as stop:
        code = stop.code or 0
    out, err = capsys.readouterr()
    return code, [json.loads(line) for line in out.splitlines()], err


def jsonl(*rows) -> str:
    return "".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows)


def test_reward_math_scores_each_line_and_reports_bad_lines_in_place(capsys, monkeypatch):
    stdin = jsonl(
        {"completion": "so \\boxed{\\frac{1}{2}}", "answer": "0.5"},
        "{not json",
        {"completion": "The answer is 7.", "answer": "#### 8"},
        "",
        {"answer": "3"},
        {"completion": "\\boxed{3}", "answer": 3},
    )
    code, rows, err = run_cli(["reward", "math"], capsys, monkeypatch, stdin)
    assert code == 0 and err == ""
    assert [r["line"] for r in rows] == [1, 2, 3, 5, 6]  # the blank line 4 is skipped
    assert rows[0]["reward"] == 1.0 and rows[0]["extracted"] == "\\frac{1}{2}"
    assert rows[0]["correct"] is True
    assert "not valid JSON" in rows[1]["error"]
    assert (rows[2]["reward"], rows[2]["extracted"], rows[2]["correct"]) == (-1.0, "7", False)
    assert rows[3]["error"] == "'completion' must be a string"
    assert rows[4]["reward"] == 1.0


def test_reward_math_reads_a_file_and_takes_config_overrides(capsys, monkeypatch, tmp_path):
    path = tmp_path / "in.jsonl"
    path.write_text(jsonl({"completion": "\\boxed{2}", "answer": "3"}))
    argv = ["reward", "math", "--input", str(path), "--set", "reward.math.wrong_reward=0.0"]
    code, rows, _ = run_cli(argv, capsys, monkeypatch)
    assert code == 0
    assert rows == [
        {
            "line": 1,
            "reward": 0.0,
            "extracted": "2",
            "gold": "3",
            "outcome": "not_equal",
            "correct": False,
        }
    ]


def test_set_without_config_changes_the_defaults_not_the_training_recipe(capsys, monkeypatch):
    # The built-in recipe sets its own answer_pattern; `--set` alone must start from defaults.
    stdin = jsonl({"completion": "so \\boxed{2}", "answer": "3"})
    argv = [
        "reward",
        "math",
        "--set",
        "reward.math.missing_reward=-2",
        "--set",
        "sandbox.workers=1",
    ]
    code, rows, _ = run_cli(argv, capsys, monkeypatch, stdin)
    assert code == 0
    assert (rows[0]["extracted"], rows[0]["reward"]) == ("2", -1.0)
    code, _, err = run_cli(["reward", "math", "--set", "optim.lr=1"], capsys, monkeypatch)
    assert code == 2 and "--set: [optim] does not apply here; only [reward] and [sandbox]" in err
    argv = ["reward", "math", "--set", "reward.math.wrong_reward=high"]
    code, _, err = run_cli(argv, capsys, monkeypatch)
    assert code == 2 and "--set: [reward.math] wrong_reward: must be a valid number" in err
    assert err.count("\n") == 1


def test_bad_input_exits_2_with_one_line(capsys, monkeypatch, tmp_path):
    code, rows, err = run_cli(
        ["reward", "math", "--input", str(tmp_path / "nope")], capsys, monkeypatch
    )
    assert (code, rows) == (2, [])
    assert err.count("\n") == 1 and "input file not found" in err
    code, _, err = run_cli(["sandbox", "run", str(tmp_path / "x.py")], capsys, monkeypatch)
    assert code == 2 and err.count("\n") == 1 and "program file not found" in err
    script = tmp_path / "prog.txt"
    script.write_text("print(1)")
    code, _, err = run_cli(["sandbox", "run", str(script)], capsys, monkeypatch)
    assert code == 2 and "pass --language" in err and "Traceback" not in err


def test_reward_code_judges_each_line(capsys, monkeypatch):
    isolation_or_skip(FAST)
    add = [{"input": "1 2\n", "output": "3\n"}, {"input": "5 5\n", "output": "10\n"}]
    stdin = jsonl(
        {"code": "print(sum(map(int, input().split())))", "tests": add},
        {"code": "print(0)", "tests": add, "sample_tests": add[:1]},
        {"code": "int main() { return 0 }", "language": "cpp", "tests": add},
        {"code": "print(1)", "tests": []},
        {
            "code": "def f(x):\n    return x * 2\n",
            "entry_point": "f",
            "tests": "def check(c):\n    assert c(2) == 4\n",
        },
        {"code": "while True: pass", "tests": add, "time_limit_ms": 100},
        {"code": "print(1)", "language": "rust", "tests": add},
    )
    code, rows, _ = run_cli(["reward", "code"], capsys, monkeypatch, stdin)
    assert code == 0
    assert [r["line"] for r in rows] == [1, 2, 3, 4, 5, 6, 7]
    brief = [(r.get("reward"), r.get("status"), r.get("passed"), r.get("total")) for r in rows]
    assert brief[0] == (1.0, "ok", 2, 2)
    assert brief[1] == (0.1, "wrong_answer", 0, 2)
    assert brief[2] == (0.0, "compile_error", 0, 2)
    assert "tests is empty" in rows[3]["error"]
    assert brief[4] == (1.0, "ok", 1, 1)
    assert brief[5] == (0.1, "timeout", 0, 2)
    assert "not supported" in rows[6]["error"]
    assert rows[0]["tests"][0]["status"] == "ok"


def test_sandbox_run_prints_one_json_object(capsys, monkeypatch, tmp_path):
    isolation_or_skip(FAST)
    program = tmp_path / "double.py"
    program.write_text(
        "import sys\nn = int(input())\nprint(n * 2)\nprint('log', file=sys.stderr)\n"
    )
    stdin = tmp_path / "in.txt"
    stdin.write_text("21\n")
    code, rows, _ = run_cli(
        ["sandbox", "run", str(program), "--stdin", str(stdin)], capsys, monkeypatch
    )
    assert code == 0 and len(rows) == 1
    result = rows[0]
    assert {"status", "exit_code", "stdout", "stderr", "time_ms"} <= set(result)
    assert (result["status"], result["exit_code"], result["stdout"], result["stderr"]) == (
        "ok",
        0,
        "42\n",
        "log\n",
    )
    slow = tmp_path / "slow.cpp"
    slow.write_text("int main() { volatile long x = 0; for (;;) x++; }\n")
    argv = ["sandbox", "run", str(slow), "--time-limit-ms", "200", "--memory-mb", "64"]
    code, rows, _ = run_cli(argv, capsys, monkeypatch)
    assert (code, rows[0]["status"], rows[0]["exit_code"]) == (0, "timeout", None)

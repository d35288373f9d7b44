"""`ascent data clean`: a hand-written mixed set of dirty and clean problems, each kept or dropped
for the right reason, and the bundled sets (GSM8K, HumanEval, contest sample)."""

from __future__ import annotations

import contextlib
import gzip
import io
import json
import shutil
from pathlib import Path

import pytest

from ascent.config.clean import CleanSection
from ascent.config.rewards import MathRewardSection, SandboxSection
from ascent.data.bundled import bundled_path
from ascent.data.clean import FILTERS, answer_problem
from ascent.data.clean_rules import clean_text, several_questions
from ascent.errors import AscentError
from ascent.names import DROP_REASONS, PATTERN_REASONS

TIMEOUT_S = MathRewardSection().timeout_s


def sandbox_or_skip() -> None:
    from ascent.rewards.sandbox import check_isolation

    if shutil.which("bwrap") is None:
        pytest.skip("bubblewrap is not installed (apt-get install bubblewrap)")
    try:
        check_isolation(SandboxSection())
    except AscentError as err:
        pytest.skip(f"sandbox isolation unavailable here: {err}")


def stdio(pairs):
    return [{"input": i, "output": o} for i, o in pairs]


SUM_TESTS = stdio([("2 3\n", "5\n"), ("-4 10\n", "6\n"), ("0 0\n", "0\n")])
MAX_TESTS = stdio([("3\n1 9 4\n", "9\n"), ("2\n-5 -2\n", "-2\n")])

# id -> the reason it must be dropped for (None: kept). Every row is written by hand.
MATH = [
    # kept, with links and untidy whitespace to clean
    (
        "m_gsm",
        None,
        "A baker sells muffins for $3 each. On Monday she sold 14 muffins and on "
        "Tuesday twice as many. How much money did she make over the two days?",
        "On Tuesday she sold 14*2=<<14*2=28>>28.\nShe sold 14+28=<<14+28=42>>42 in all.\n"
        "She made 42*3=$<<42*3=126>>126.\n#### 126",
    ),
    (
        "m_link",
        None,
        "Problem source: [AoPS thread](https://artofproblemsolving.com/community/"
        "c6h12345)\nLet $x$ satisfy $2x + 3 = 11$. What is $x$?",
        "4",
    ),
    (
        "m_bare",
        None,
        "Find the remainder when $2^{10}$ is divided by 7. (Taken from "
        "https://www.example.edu/contests/2019.pdf)",
        "\\boxed{2}",
    ),
    (
        "m_footnote",
        None,
        "The Fibonacci numbers [1] satisfy $F_1 = F_2 = 1$ and "
        "$F_{n+2} = F_{n+1} + F_n$. What is $F_{12}$?\n\n[1]: https://en.wikipedia.org/wiki/"
        "Fibonacci_number",
        "144",
    ),
    (
        "m_refbracket",
        None,
        "A sequence doubles each term[2](http://oeis.org/A000079) starting "
        "from 3. What is the fifth term?",
        "48",
    ),
    ("m_latex", None, "Simplify $\\frac{6}{8}$ to lowest terms.", "\\frac{3}{4}"),
    (
        "m_space",
        None,
        "  A train travels\t120 km in 2 hours.\u00a0 What is its average speed in km/h?  ",
        "60 ",
    ),
    (
        "m_show_number",
        None,
        "To pass, Mia's four test scores must show that her average is at "
        "least 85. She scored 80, 90 and 82 on the first three. What is the lowest score she can "
        "get on the fourth test?",
        "88",
    ),
    (
        "m_choice",
        None,
        "Which of the following numbers is prime? (a) 21 (b) 27 (c) 29 (d) 33",
        "29",
    ),
    (
        "m_download",
        None,
        "Carla is downloading a 200 GB file at 2 GB per minute from the "
        "internet. How many minutes does the download take?",
        "100",
    ),
    (
        "m_sheet",
        None,
        "Using the spreadsheet Ana shared, the club sold 35 tickets on Friday and "
        "48 on Saturday. How many tickets did it sell?",
        "83",
    ),
    ("m_interval", None, "For which $x$ in $[0, 2\\pi)$ is $\\sin x = 1$?", "\\frac{\\pi}{2}"),
    # dropped
    ("m_proof", "proof", "Prove that the sum of two odd integers is even.", "proof"),
    ("m_show", "proof", "Show that $n^2 + n$ is even for every integer $n$.", ""),
    (
        "m_figure",
        "needs_figure",
        "In the figure below, triangle $ABC$ has $AB = 5$ and "
        "$BC = 12$ with a right angle at $B$. Find $AC$.",
        "13",
    ),
    (
        "m_asy",
        "needs_figure",
        "[asy]\ndraw((0,0)--(4,0)--(4,3)--cycle);\n[/asy]\nWhat is the "
        "area of the triangle drawn above?",
        "6",
    ),
    (
        "m_image",
        "needs_figure",
        "![triangle](https://i.imgur.com/abc123.png)\nWhat is the perimeter of this triangle?",
        "12",
    ),
    (
        "m_table",
        "needs_table",
        "The table below shows how many books each student read. How "
        "many books were read in total?",
        "42",
    ),
    (
        "m_markdown",
        "needs_table",
        "| Day | Rainfall (mm) |\n|-----|---------------|\n| Mon | 12 |"
        "\n| Tue | 7 |\n\nWhat was the total rainfall on Monday and Tuesday?",
        "19",
    ),
    (
        "m_parts",
        "multi_question",
        "A car travels at 60 km/h for 2 hours. (a) How far does it "
        "travel? (b) How long would the same trip take at 80 km/h?",
        "120",
    ),
    (
        "m_numbered",
        "multi_question",
        "A rectangle has a length of 8 cm and a width of 5 cm.\n"
        "1. Find its area.\n2. Find its perimeter.",
        "40",
    ),
    (
        "m_two_q",
        "multi_question",
        "Tom has 12 marbles and gives 5 to Ann. How many marbles does "
        "Tom have left? How many more marbles does Tom have than Ann now?",
        "7",
    ),
    ("m_empty_answer", "bad_answer", "What is 7 times 8?", ""),
    (
        "m_gsm_no_number",
        "bad_answer",
        "Sam has 3 boxes of 4 pens. How many pens does he have?",
        "Multiply the boxes by the pens per box.\n####",
    ),
    (
        "m_prose_answer",
        "bad_answer",
        "What is the largest prime below 20?",
        "See the solution above.",
    ),
    ("m_broken_latex", "bad_answer", "Evaluate $1 - \\frac{1}{2}$.", "\\frac{1}{"),
    ("m_only_link", "empty", "https://example.com/problems/17", "4"),
]

REFERENCE_SUM = "a, b = map(int, input().split())\nprint(a + b)\n"
CODE = [
    (
        "c_sum",
        None,
        {
            "statement": "Read two integers a and b from standard input and print "
            "their sum.\nSee https://example.com/problems/sum for the original.",
            "hidden_tests": SUM_TESTS,
            "reference_solution": REFERENCE_SUM,
        },
    ),
    (
        "c_function",
        None,
        {
            "statement": 'def add(a, b):\n    """Return a + b."""\n',
            "entry_point": "add",
            "test_code": "def check(candidate):\n    assert candidate(2, 3) == 5"
            "\n    assert candidate(-1, 1) == 0\n",
            "reference_solution": "def add(a, b):\n    return a + b\n",
        },
    ),
    (
        "c_story",
        None,
        {
            "statement": "Vasya is downloading a file of s megabytes at v megabytes "
            "per second. Print how many whole seconds it takes.",
            "hidden_tests": stdio([("10 3\n", "4\n"), ("9 3\n", "3\n")]),
            "reference_solution": "s, v = map(int, input().split())\nprint(-(-s // v))\n",
        },
    ),
    (
        "c_no_reference",
        None,
        {"statement": "Print the maximum of n integers.", "hidden_tests": MAX_TESTS},
    ),
    (
        "c_file",
        "file_io",
        {
            "statement": "Read the matrix from input.txt and write its determinant to output.txt.",
            "hidden_tests": stdio([("1\n5\n", "5\n")]),
            "reference_solution": "print(5)\n",
        },
    ),
    (
        "c_csv",
        "file_io",
        {
            "statement": "Your program must read the numbers from a file called "
            "data.csv and print their mean.",
            "hidden_tests": stdio([("", "2\n")]),
        },
    ),
    (
        "c_http",
        "network",
        {
            "statement": "Write a program that sends an HTTP GET request to the "
            "URL given on standard input and prints the status code.",
            "hidden_tests": stdio([("http://127.0.0.1/\n", "200\n")]),
        },
    ),
    (
        "c_requests",
        "network",
        {
            "statement": "Print the title of the page whose address is given on stdin.",
            "hidden_tests": stdio([("http://127.0.0.1/\n", "Home\n")]),
            "reference_solution": "import re\nimport requests\n\n"
            "html = requests.get(input()).text\n"
            "print(re.search('<title>(.*)</title>', html).group(1))\n",
        },
    ),
    (
        "c_gpu",
        "environment",
        {
            "statement": "Using CUDA, multiply two 1024x1024 matrices on the "
            "GPU and print the trace of the product.",
            "hidden_tests": stdio([("", "0\n")]),
        },
    ),
    (
        "c_numpy",
        "environment",
        {
            "statement": "Given n points, print the area of their convex hull.",
            "hidden_tests": stdio([("3\n0 0\n1 0\n0 1\n", "0.5\n")]),
            "reference_solution": "import numpy as np\nprint(0.5)\n",
        },
    ),
    (
        "c_database",
        "environment",
        {
            "statement": "Connect to the PostgreSQL database named in the "
            "DATABASE_URL environment variable and print the number of users.",
            "hidden_tests": stdio([("", "3\n")]),
        },
    ),
    (
        "c_gui",
        "environment",
        {
            "statement": "Open a window with tkinter and draw a red circle of radius r.",
            "hidden_tests": stdio([("5\n", "\n")]),
        },
    ),
    (
        "c_wrong",
        "reference_fails",
        {
            "statement": "Print the maximum of n integers.",
            "hidden_tests": MAX_TESTS,
            "reference_solution": "input()\nprint(min(map(int, input().split())))\n",
        },
    ),
]
HUMANEVAL_WRONG = {  # HumanEval's own format, in the same file
    "task_id": "Mine/0",
    "prompt": 'def double(x):\n    """Return twice x."""\n',
    "entry_point": "double",
    "canonical_solution": "    return x + 2\n",
    "test": "def check(candidate):\n    assert candidate(3) == 6\n    assert candidate(0) == 0\n",
}
EXPECTED = {id_: reason for id_, reason, *_ in MATH + CODE} | {"Mine/0": "reference_fails"}


def mixed_rows() -> list[dict]:
    rows = [{"id": id_, "question": text, "answer": answer} for id_, _, text, answer in MATH]
    rows += [{"id": id_, **row} for id_, _, row in CODE]
    return [*rows, HUMANEVAL_WRONG]


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def read_jsonl(path: Path) -> list[dict]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def row_id(row: dict) -> str:
    return row.get("id") or row["task_id"]


def clean_cli(*args: str) -> tuple[int, str, str]:
    """`ascent data clean ARGS` in-process: exit code, stdout, stderr."""
    from ascent.cli import main

    out, err, code = io.StringIO(), io.StringIO(), 0
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            main(["data", "clean", *args])
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
    return code, out.getvalue(), err.getvalue()


def last_json(stdout: str) -> dict:
    return json.loads(stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def mixed(tmp_path_factory):
    """The hand-written set cleaned once with the defaults: (input rows, kept, dropped, summary)."""
    sandbox_or_skip()
    folder = tmp_path_factory.mktemp("mixed")
    source = write_jsonl(folder / "problems.jsonl", mixed_rows())
    code, stdout, stderr = clean_cli(str(source), "--out", str(folder / "clean.jsonl"))
    assert code == 0, stderr
    kept, dropped = read_jsonl(folder / "clean.jsonl"), read_jsonl(folder / "clean.dropped.jsonl")
    return {row_id(r): r for r in mixed_rows()}, kept, dropped, stdout


def test_every_hand_written_problem_is_kept_or_dropped_for_its_reason(mixed):
    _, kept, dropped, _ = mixed
    outcome = {row_id(r): None for r in kept} | {row_id(r): r["drop_reason"] for r in dropped}
    assert outcome == EXPECTED
    assert all(r["drop_detail"] for r in dropped)


def test_kept_text_has_no_links_left_and_reads_cleanly(mixed):
    _, kept, _, _ = mixed
    by_id = {row_id(r): r for r in kept}
    for row in kept:
        text = row.get("question") or row.get("statement")
        assert "http" not in text and "www." not in text and "](" not in text
    assert by_id["m_link"]["question"] == (
        "Problem source: AoPS thread\nLet $x$ satisfy $2x + 3 = 11$. What is $x$?"
    )
    assert by_id["m_bare"]["question"] == "Find the remainder when $2^{10}$ is divided by 7."
    assert by_id["m_footnote"]["question"] == (
        "The Fibonacci numbers satisfy $F_1 = F_2 = 1$ and $F_{n+2} = F_{n+1} + F_n$. "
        "What is $F_{12}$?"
    )
    assert by_id["m_refbracket"]["question"].startswith("A sequence doubles each term starting")
    assert by_id["m_space"]["question"] == (
        "A train travels 120 km in 2 hours. What is its average speed in km/h?"
    )
    assert by_id["c_sum"]["statement"] == (
        "Read two integers a and b from standard input and print their sum."
    )


def test_answers_tests_and_other_columns_are_never_rewritten(mixed):
    source, kept, dropped, _ = mixed
    for row in kept + dropped:
        original = source[row_id(row)]
        for column in set(original) - {"question", "statement"}:
            assert json.dumps(row[column]).encode() == json.dumps(original[column]).encode()
        if "answer" in original:
            assert row["answer"].encode("utf-8") == original["answer"].encode("utf-8")
    assert {row_id(r): r["answer"] for r in kept if "answer" in r}["m_space"] == "60 "
    for row in dropped:  # dropped rows are written as read, text included
        assert {k: v for k, v in row.items() if not k.startswith("drop_")} == source[row_id(row)]


def test_the_last_line_is_the_json_summary_after_the_table(mixed):
    _, kept, dropped, stdout = mixed
    summary = last_json(stdout)
    counts = {r: list(EXPECTED.values()).count(r) for r in DROP_REASONS if r in EXPECTED.values()}
    assert summary == {"kept": len(kept), "dropped": len(dropped), "by_reason": counts}
    table = stdout.split("data clean", 1)[1]
    assert "dropped: reference_fails" in table and "kept" in table


def test_a_reason_switched_off_keeps_its_rows_and_an_extra_pattern_drops_more(tmp_path):
    config = tmp_path / "clean.toml"
    config.write_text(
        '[clean]\nreasons = ["needs_table", "proof", "bad_answer"]\n'
        'extra_patterns = {needs_table = ["\\\\bspreadsheet\\\\b"]}\n'
    )
    source = write_jsonl(tmp_path / "math.jsonl", [r for r in mixed_rows() if "question" in r])
    out = tmp_path / "out.jsonl"
    code, stdout, stderr = clean_cli(str(source), "--out", str(out), "--config", str(config))
    assert code == 0, stderr
    dropped = {row_id(r): r["drop_reason"] for r in read_jsonl(tmp_path / "out.dropped.jsonl")}
    assert dropped["m_sheet"] == "needs_table"  # the extra pattern
    for figure in ("m_figure", "m_asy", "m_image", "m_parts", "m_two_q", "m_only_link"):
        assert figure not in dropped  # needs_figure, multi_question and empty are off
    summary = last_json(stdout)
    assert set(summary["by_reason"]) == {"needs_table", "proof", "bad_answer"}
    # --set on top of the file: with proof off, the proofs' answers are what is wrong
    code, stdout, _ = clean_cli(
        str(source), "--out", str(out), "--config", str(config),
        "--set", 'clean.reasons=["bad_answer"]', "--set", "clean.extra_patterns={}",
    )  # fmt: skip
    dropped = {row_id(r): r["drop_reason"] for r in read_jsonl(tmp_path / "out.dropped.jsonl")}
    assert dropped["m_proof"] == "bad_answer" and dropped["m_show"] == "bad_answer"


def test_kind_math_reads_a_statement_column_that_auto_takes_for_code(tmp_path):
    rows = [{"statement": "What is 6 times 7? See https://x.org/q.", "answer": "42"}]
    source = write_jsonl(tmp_path / "statements.jsonl", rows)
    out = str(tmp_path / "out.jsonl")
    code, _, stderr = clean_cli(str(source), "--out", out)
    assert code == 2 and "no tests" in stderr and len(stderr.strip().splitlines()) == 1
    config = tmp_path / "cols.toml"
    config.write_text(
        '[data]\npath = "statements.jsonl"\ncolumns = {prompt = "statement", answer = "answer"}\n'
    )
    code, stdout, stderr = clean_cli(str(source), "--out", out, "--kind", "math", "--config",
                                     str(config))  # fmt: skip
    assert code == 0, stderr
    assert last_json(stdout) == {"kept": 1, "dropped": 0, "by_reason": {}}
    assert read_jsonl(Path(out)) == [{"statement": "What is 6 times 7?", "answer": "42"}]
    gsm8k = str(bundled_path("gsm8k_test"))
    code, _, stderr = clean_cli(gsm8k, "--out", out, "--kind", "code")
    assert code == 2 and "gsm8k_test.jsonl:1: not a code problem" in stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["missing.jsonl", "--out", "o.jsonl"], "missing.jsonl: no such file or directory"),
        (["IN", "--out", "o.jsonl", "--kind", "maths"], "--kind 'maths' is unknown"),
        (["IN", "--out", "o.csv"], "give a file name ending in .jsonl"),
        (["in.jsonl", "--out", "in.jsonl"], "is the input"),
        (["ascent:mbpp", "--out", "o.jsonl"], "no such bundled data set"),
        (["IN", "--out", "o.jsonl", "--set", 'clean.reasons=["proff"]'], "did you mean 'proof'"),
        (["IN", "--out", "o.jsonl", "--set", "optim.lr=1"], "only [clean], [reward] and"),
        (["notes.txt", "--out", "o.jsonl"], "cannot tell the format"),
    ],
)
def test_errors_are_one_line_exit_2_and_write_nothing(tmp_path, monkeypatch, args, message):
    monkeypatch.chdir(tmp_path)
    for name in ("IN", "in.jsonl"):
        write_jsonl(tmp_path / name, [{"question": "What is 1+1?", "answer": "2"}])
    (tmp_path / "notes.txt").write_text("1+1")
    code, _, stderr = clean_cli(*args)
    assert code == 2 and message in stderr
    assert stderr.startswith("error: ") and len(stderr.strip().splitlines()) == 1
    assert "Traceback" not in stderr and not (tmp_path / "o.jsonl").exists()


def test_without_a_sandbox_reference_fails_says_so_and_can_be_left_out(tmp_path, monkeypatch):
    import ascent.rewards.sandbox as sandbox

    def no_sandbox(cfg):
        raise AscentError("bubblewrap (bwrap) is not installed; apt-get install bubblewrap")

    monkeypatch.setattr(sandbox, "check_isolation", no_sandbox)
    source = write_jsonl(tmp_path / "code.jsonl", [{"id": i, **row} for i, _, row in CODE])
    out = str(tmp_path / "out.jsonl")
    code, _, stderr = clean_cli(str(source), "--out", out)
    assert code == 2 and len(stderr.strip().splitlines()) == 1
    assert "apt-get install bubblewrap; or leave reference_fails out of [clean] reasons" in stderr
    others = json.dumps([r for r in DROP_REASONS if r != "reference_fails"])
    code, stdout, stderr = clean_cli(str(source), "--out", out, "--set", f"clean.reasons={others}")
    assert code == 0, stderr
    assert "reference_fails" not in last_json(stdout)["by_reason"]


def test_a_bad_row_midway_leaves_no_half_written_output(tmp_path):
    rows = [{"question": "What is 1+1?", "answer": "2"}] * 70 + [{"answer": "3"}]
    source = write_jsonl(tmp_path / "in.jsonl", rows)
    code, _, stderr = clean_cli(str(source), "--out", str(tmp_path / "out.jsonl"))
    assert code == 2 and "in.jsonl:71: no column question/problem/prompt" in stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.jsonl"]


def test_parquet_and_datasets_inputs_give_the_same_rows(tmp_path):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    rows = [{"problem": "Find $3^4$. (see https://x.org)", "answer": "81"},
            {"problem": "Prove that $\\sqrt{2}$ is irrational.", "answer": "proof"}]  # fmt: skip
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "p.parquet")
    code, stdout, stderr = clean_cli(
        str(tmp_path / "p.parquet"), "--out", str(tmp_path / "p.jsonl")
    )
    assert code == 0, stderr
    assert last_json(stdout) == {"kept": 1, "dropped": 1, "by_reason": {"proof": 1}}
    assert read_jsonl(tmp_path / "p.jsonl") == [{"problem": "Find $3^4$.", "answer": "81"}]
    datasets = pytest.importorskip("datasets")
    datasets.Dataset.from_list(rows).save_to_disk(str(tmp_path / "ds"))
    code, stdout, _ = clean_cli(str(tmp_path / "ds"), "--out", str(tmp_path / "d.jsonl"))
    assert code == 0 and read_jsonl(tmp_path / "d.jsonl") == read_jsonl(tmp_path / "p.jsonl")


# -- the rules on their own ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "cleaned"),
    [
        ("See [the rules](http://a.org/r_(1)) first. Find x.", "See the rules first. Find x."),
        ("Read it in Wikipedia: <https://en.wikipedia.org/wiki/XOR>.", "Read it in Wikipedia."),
        ("Visit www.example.org, then compute 3+4.", "then compute 3+4."),
        ("Find x. See https://a.com for details. Then find y.", "Find x. Then find y."),
        ("[http://a.com](http://a.com) Add 1 and 2.", "Add 1 and 2."),
        ("Known [3] result.\n[3] https://x.org/paper\nFind n.", "Known result.\nFind n."),
        ("The set [0,1] and f(a). What is [2](3)?", "The set [0,1] and f(a). What is [2](3)?"),
        ("a\r\n\r\n\r\n\r\nb   c\u200b", "a\n\nb c"),
    ],
)  # fmt: skip
def test_clean_text_removes_links_and_keeps_everything_else(text, cleaned):
    assert clean_text(text) == cleaned


def test_statements_that_are_code_only_lose_their_links():
    code = "def f(x):\n    '''Double x, see https://x.org.'''\n    # two  spaces kept\n"
    assert clean_text(code, "code") == "def f(x):\n    '''Double x.'''\n    # two  spaces kept\n"


@pytest.mark.parametrize(
    ("text", "asks_several"),
    [
        ("Let f(a) = 2 and f(b) = 3. Find f(a) + f(b).", False),
        ("Suppose:\n1. x > 0\n2. y > 0\nFind x + y.", False),
        ('He asked "how old are you?" What is his age now?', False),
        ("Is 91 a prime number? Why or why not?", False),
        ("(i) Compute the area. (ii) Compute the perimeter.", True),
        ("a) What is 2+2?\nb) What is 3+3?", True),
        ("Given $a_1 = 2$, $a_{n+1} = 2a_n$.\n(Ⅰ) Find $a_n$;\n(Ⅱ) Find $S_n$.", True),
        ("Let $a_n = 3n$. (1)Find $a_5$; (2)Find the sum of the first 5 terms.", True),
    ],
)
def test_several_questions_misses_rather_than_misfires(text, asks_several):
    assert (several_questions(text) is not None) == asks_several


@pytest.mark.parametrize(
    ("answer", "bad"),
    [(42, False), ("#### 1,234", False), ("\\boxed{\\sqrt{2}}", False), ("[0, 1)", False),
     ("\\text{Yes}", False), ("N/A", True), ("\\text{proof}", True), (None, True),
     (["3", "4"], True), ("it depends on the value", True)],
)  # fmt: skip
def test_answer_problem_reads_gold_answers_as_the_math_reward_does(answer, bad):
    assert (answer_problem(answer, TIMEOUT_S) is not None) == bad


def test_the_config_names_every_registered_filter_in_order():
    assert sorted(DROP_REASONS) == FILTERS.names()
    assert CleanSection().reasons == list(DROP_REASONS)
    for reason in PATTERN_REASONS:
        assert FILTERS.meta(reason)["kinds"]


@pytest.mark.parametrize(
    ("key", "value", "reason"),
    [("question_sentences", 3, "multi_question"), ("proof_with_number", True, "proof"),
     ("allowed_modules", ["numpy"], "environment")],
)  # fmt: skip
def test_a_filter_setting_is_refused_when_its_filter_is_off(key, value, reason):
    others = [r for r in DROP_REASONS if r != reason]
    with pytest.raises(ValueError, match=f"{key}: only the {reason} filter reads it"):
        CleanSection(reasons=others, **{key: value})
    assert getattr(CleanSection(**{key: value}), key) == value  # with the filter on: accepted


# -- the bundled sets ----------------------------------------------------------------------------


def test_gsm8k_is_kept_whole_and_every_answer_parses(tmp_path):
    out = tmp_path / "gsm8k.jsonl"
    code, stdout, stderr = clean_cli("ascent:gsm8k_test", "--out", str(out))
    assert code == 0, stderr
    assert last_json(stdout) == {"kept": 1319, "dropped": 0, "by_reason": {}}
    source = read_jsonl(bundled_path("gsm8k_test"))
    kept = read_jsonl(out)
    assert [r["answer"] for r in kept] == [r["answer"] for r in source]
    assert all(answer_problem(r["answer"], TIMEOUT_S) is None for r in source)


def test_humaneval_reference_solutions_all_pass_and_nothing_is_dropped(tmp_path):
    sandbox_or_skip()
    out = tmp_path / "humaneval.jsonl"
    code, stdout, stderr = clean_cli("ascent:humaneval", "--out", str(out))
    assert code == 0, stderr
    assert last_json(stdout) == {"kept": 164, "dropped": 0, "by_reason": {}}
    assert read_jsonl(out) == read_jsonl(bundled_path("humaneval"))  # code statements: no links


def test_contest_sample_keeps_its_samples_and_loses_its_one_link(tmp_path):
    from ascent.data.code_problems import load_code_problems

    out = tmp_path / "contests.jsonl"
    code, stdout, stderr = clean_cli("ascent:code_contests_sample", "--out", str(out))
    assert code == 0, stderr
    assert last_json(stdout) == {"kept": 20, "dropped": 0, "by_reason": {}}  # no references
    kept, source = read_jsonl(out), read_jsonl(bundled_path("code_contests_sample"))
    assert sum("http" in r["content"] for r in source) == 1
    assert not any("http" in r["content"] for r in kept)
    assert [r["test"] for r in kept] == [r["test"] for r in source]
    before = load_code_problems(bundled_path("code_contests_sample"))
    after = load_code_problems(out)
    assert [p.sample_tests for p in after] == [p.sample_tests for p in before]

"""`ascent train CONFIG --dry-run`: everything a run needs, checked without training or writing;
exit 0, or 2 with one line per problem naming the fix."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.fake_secrets import FAKE_KEY

SEEDS = Path(__file__).parents[1] / "configfile" / "seed_configs"


@pytest.fixture
def cwd(tmp_path, monkeypatch):
    """An empty working directory (where runs/ would go), with no key in the environment."""
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    monkeypatch.delenv("TAOTOKEN_API_KEY", raising=False)
    return work


def problems(err: str) -> list[str]:
    lines = err.strip().splitlines()
    assert "Traceback" not in err
    assert all(line.startswith("error: ") for line in lines), err  # nothing else on stderr
    return lines


def migrated(run_cli, seed: str, cwd: Path) -> Path:
    code, out, err = run_cli("config", "migrate", str(SEEDS / seed))
    assert code == 0, err
    path = cwd / f"{Path(seed).stem}.toml"
    path.write_text(out, encoding="utf-8")
    return path


def test_the_demo_passes_and_nothing_is_written(cwd, run_cli):
    code, out, err = run_cli("train", "--dry-run")
    assert code == 0, err
    for name in ("model", "data", "ranks", "memory", "run directory"):
        assert any(line.startswith("ok") and f" {name} " in f"{line} " for line in out.splitlines())
    assert "estimated peak" in out and "a new run directory" in out
    assert out.rstrip().endswith("nothing was written")
    assert list(cwd.iterdir()) == []  # no runs/, no config.toml


def test_a_write_up_config_with_a_loose_model_name_and_no_data_is_refused_with_the_fix(
    cwd, run_cli
):
    config = migrated(run_cli, "seed004_vapo.toml", cwd)
    text = config.read_text()
    assert 'did you mean "Qwen/Qwen2.5-32B-Instruct"' in text  # the migrated file says it
    assert "names no data" in text
    code, out, err = run_cli("train", str(config), "--dry-run")
    assert code == 2
    lines = problems(err)
    assert lines == [
        "error: model: model 'qwen-32b' is neither a local directory nor a hub id "
        "(owner/name); did you mean 'Qwen/Qwen2.5-32B-Instruct'?"
    ]
    assert "the config names no data" in out  # said, though the demo task would load
    assert [p.name for p in cwd.iterdir()] == [config.name]


def test_rewards_that_read_a_column_the_data_lacks_and_an_unset_key_are_each_one_line(
    cwd, run_cli, monkeypatch
):
    config = migrated(run_cli, "seed000_grandcode.toml", cwd)  # agentic, code reward, API roles
    assert "names no model" in config.read_text()
    code, out, err = run_cli("train", str(config), "--dry-run")
    assert code == 2
    lines = problems(err)
    assert len(lines) == 2
    assert lines[0].startswith("error: data: the code reward reads a 'tests' column")
    assert "TAOTOKEN_API_KEY is not set" in lines[1] and lines[1].startswith("error: keys:")
    assert "the config names no model" in out

    monkeypatch.setenv("TAOTOKEN_API_KEY", FAKE_KEY)
    code, out, err = run_cli("train", str(config), "--dry-run")
    assert code == 2 and len(problems(err)) == 1  # the data is still wrong; the key is there
    keys = next(line for line in out.splitlines() if " keys " in line)
    assert keys.startswith("ok") and f"'{FAKE_KEY[:4]}…'" in keys and FAKE_KEY[4:9] not in out


def test_ranks_memory_and_the_run_directory_are_checked(cwd, run_cli):
    (cwd / "runs" / "tiny-grpo").mkdir(parents=True)
    (cwd / "runs" / "tiny-grpo" / "notes.txt").write_text("mine")
    huge = ("train.batch_size=1048576", "train.micro_batch_size=1048576")  # 1 Mi completions
    code, _, err = run_cli(
        "train", "--dry-run", "--nproc", "3", *(a for s in huge for a in ("--set", s))
    )
    assert code == 2
    lines = problems(err)
    assert [line.split(":")[1].strip() for line in lines] == ["ranks", "memory", "run directory"]
    assert "--nproc 3" in lines[0]
    assert "needs about" in lines[1] and "[train] micro_batch_size" in lines[1]
    assert "already exists" in lines[2] and "--overwrite" in lines[2]
    code, _, err = run_cli("train", "--dry-run", "--overwrite")
    assert code == 2 and "not a run directory" in err  # --overwrite deletes only runs
    assert (cwd / "runs" / "tiny-grpo" / "notes.txt").read_text() == "mine"


def test_a_classic_config_checks_its_environment(cwd, run_cli):
    config = migrated(run_cli, "seed003_ppo.toml", cwd)
    code, out, err = run_cli("train", str(config), "--dry-run")
    assert code == 0, err
    env = next(line for line in out.splitlines() if " environment " in line)
    assert env.startswith("ok") and "CartPole-v1" in env

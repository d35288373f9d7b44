"""Hostile programs against the sandbox: each one must be contained, and the machine stays well.

Every test runs real hostile code in the real sandbox (bubblewrap, rlimits, unprivileged uid)
and checks the containment from outside: processes left on the host, files on the host,
connections to a listener the test owns, secrets in the program's output.
"""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path

import pytest

from ascent.config.rewards import SandboxSection
from ascent.rewards.sandbox import SandboxPool
from tests.rewards.conftest import FAST, isolation_or_skip

pytestmark = pytest.mark.timeout(60)


def descendants(pid: int) -> set[int]:
    """Host pids of every process below `pid` (the sandbox's bwrap, zygote and its runs)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(entry.name))
    found: set[int] = set()
    stack = [pid]
    while stack:
        for child in children.get(stack.pop(), []):
            if child not in found:
                found.add(child)
                stack.append(child)
    return found


def processes_with_arg(marker: str) -> list[int]:
    """Host pids whose command line contains `marker`, anywhere on the machine."""
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if marker.encode() in (entry / "cmdline").read_bytes():
                    pids.append(int(entry.name))
            except OSError:
                continue
    return pids


def assert_healthy(pool: SandboxPool, baseline: set[int]) -> None:
    """Nothing the run started is left, and the sandbox still runs programs normally."""
    deadline = time.monotonic() + 5
    while descendants(os.getpid()) - baseline and time.monotonic() < deadline:
        time.sleep(0.05)
    assert descendants(os.getpid()) - baseline == set()
    result = pool.run_program("print(6 * 7)", "python")
    assert (result.status, result.stdout) == ("ok", "42\n")


@pytest.fixture
def baseline(pool: SandboxPool) -> set[int]:
    for _ in range(pool.size):  # start every worker first, so they are part of the baseline
        pool.run_program("pass", "python")
    return descendants(os.getpid())


def test_sandbox_kills_fork_bomb(pool, baseline):
    bomb = (
        "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n"
    )
    start = time.monotonic()
    result = pool.run_program(bomb, "python")
    assert result.status == "timeout"
    assert time.monotonic() - start < 10
    assert_healthy(pool, baseline)


def test_sandbox_kills_cpp_fork_bomb(pool, baseline):
    bomb = "#include <unistd.h>\nint main() { for (;;) fork(); }\n"
    result = pool.run_program(bomb, "cpp")
    assert result.status == "timeout"
    assert_healthy(pool, baseline)


def test_sandbox_contains_thread_bomb(pool, baseline):
    # Small stacks, so that the process limit, not the memory limit, is what stops it.
    bomb = (
        "import threading, time\n"
        "threading.stack_size(65536)\n"
        "started = 0\n"
        "try:\n"
        "    while True:\n"
        "        threading.Thread(target=time.sleep, args=(100,), daemon=True).start()\n"
        "        started += 1\n"
        "except RuntimeError:\n"
        "    print(started)\n"
    )
    result = pool.run_program(bomb, "python")
    assert result.status == "ok"
    assert int(result.stdout) < FAST.max_processes  # the process limit stopped it
    assert_healthy(pool, baseline)


def test_sandbox_refuses_8gb_allocation(pool, baseline):
    result = pool.run_program("x = bytearray(8 * 1024**3)\nprint(len(x))\n", "python")
    assert result.status == "memory_limit"
    assert result.memory_kb < FAST.memory_mb * 1024
    assert result.stdout == ""
    assert_healthy(pool, baseline)


def test_sandbox_refuses_8gb_allocation_in_cpp(pool, baseline):
    code = (
        "#include <cstdio>\n#include <cstring>\n#include <cstdlib>\n"
        "int main() { char *p = (char *)malloc(8UL << 30);\n"
        '  if (!p) { fprintf(stderr, "out of memory\\n"); return 3; }\n'
        '  memset(p, 1, 8UL << 30); printf("%d\\n", p[12345]); }\n'
    )
    result = pool.run_program(code, "cpp")
    assert result.status == "memory_limit"
    assert result.stdout == ""
    assert_healthy(pool, baseline)


def test_sandbox_stops_endless_output(pool, baseline):
    start = time.monotonic()
    result = pool.run_program("while True:\n    print('x' * 4096)\n", "python")
    assert result.status == "output_limit"
    assert len(result.stdout) <= FAST.output_limit_kb * 1024
    assert time.monotonic() - start < 10
    assert_healthy(pool, baseline)


def test_sandbox_kills_program_that_sleeps_forever(pool, baseline):
    start = time.monotonic()
    result = pool.run_program("import time\ntime.sleep(10**6)\n", "python")
    elapsed = time.monotonic() - start
    assert result.status == "timeout"
    wall_s = FAST.time_limit_ms * FAST.wall_limit_factor / 1000
    assert wall_s <= elapsed < wall_s + 5
    assert_healthy(pool, baseline)


def test_sandbox_has_no_network_to_a_loopback_listener(pool, baseline):
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    listener.setblocking(False)
    port = listener.getsockname()[1]
    code = (
        "import socket\n"
        "for host in ('127.0.0.1', 'localhost', '10.0.2.2', '8.8.8.8'):\n"
        "    try:\n"
        f"        socket.create_connection((host, {port}), timeout=0.3)\n"
        "        print('connected', host)\n"
        "    except OSError as err:\n"
        "        print('refused', host, type(err).__name__)\n"
    )
    try:
        result = pool.run_program(code, "python")
        assert result.status == "ok"
        assert "connected" not in result.stdout
        assert result.stdout.count("refused") == 4
        with pytest.raises(BlockingIOError):
            listener.accept()  # no connection ever arrived
    finally:
        listener.close()
    assert_healthy(pool, baseline)


def test_sandbox_cannot_write_outside_its_temp_dir(pool, baseline, tmp_path):
    target = tmp_path / "written-by-the-program"
    project_file = Path.cwd() / "written-by-the-program"
    places = ["/tmp/x", "/x", "/usr/x", "/etc/x", "/dev/shm/x", str(target), str(project_file)]
    code = (
        "import os\n"
        f"for path in {places!r}:\n"
        "    try:\n"
        "        with open(path, 'w') as f:\n"
        "            f.write('pwned')\n"
        "        print('wrote', path)\n"
        "    except OSError as err:\n"
        "        print('denied', path, err.errno)\n"
        "with open('mine.txt', 'w') as f:\n"  # its private directory is writable
        "    f.write('ok')\n"
        "print('own dir', open('mine.txt').read(), os.getcwd())\n"
    )
    result = pool.run_program(code, "python")
    assert result.status == "ok"
    assert "wrote" not in result.stdout
    assert result.stdout.count("denied") == len(places)
    assert "own dir ok" in result.stdout
    assert not target.exists()
    assert not project_file.exists()
    assert_healthy(pool, baseline)


def test_sandbox_sees_no_environment_secrets_or_host_files(monkeypatch, tmp_path):
    secret = "sk-ascent-test-secret-0123456789"
    monkeypatch.setenv("ASCENT_TEST_API_KEY", secret)  # before the workers start
    secret_file = tmp_path / ".env"
    secret_file.write_text(f"OPENAI_API_KEY={secret}\n")
    cfg = FAST.model_copy(update={"workers": 1})
    isolation_or_skip(cfg)
    code = (
        "import os\n"
        "print(sorted(os.environ.items()))\n"
        f"for path in ('/proc/1/environ', '/proc/self/environ', {str(secret_file)!r},\n"
        "             '/root/.bash_history', os.path.expanduser('~/.ssh/id_rsa')):\n"
        "    try:\n"
        "        print(open(path).read())\n"
        "    except OSError as err:\n"
        "        print('no', path, err.errno)\n"
    )
    with SandboxPool(cfg) as fresh:
        result = fresh.run_program(code, "python")
    assert result.status == "ok"
    assert secret not in result.stdout + result.stderr
    assert "ASCENT_TEST_API_KEY" not in result.stdout
    env_names = eval(result.stdout.splitlines()[0])  # a printed list of (name, value) pairs
    assert {name for name, _ in env_names} <= {"PATH", "LANG", "HOME", "TMPDIR"}


def test_sandbox_program_cannot_kill_its_parent(pool, baseline):
    code = (
        "import os, signal\n"
        f"for pid in (os.getppid(), 1, -1, 0, {os.getpid()}):\n"
        "    try:\n"
        "        os.kill(pid, signal.SIGKILL)\n"
        "    except OSError as err:\n"
        "        print('failed', pid, err.errno)\n"
        "print('still here')\n"
    )
    result = pool.run_program(code, "python")
    # kill(0) / kill(-1) may only reach the program itself; the sandbox survives either way.
    assert result.status in ("ok", "runtime_error")
    assert_healthy(pool, baseline)


def test_sandbox_leaves_no_double_forked_orphan(pool, baseline):
    marker = "987654321"
    code = (
        "import os, time\n"
        "if os.fork() == 0:\n"
        "    os.setsid()\n"
        "    if os.fork() == 0:\n"
        f"        os.execv('/usr/bin/sleep', ['sleep', '{marker}'])\n"
        "    os._exit(0)\n"
        "os.wait()\n"
        "time.sleep(0.2)\n"  # the grandchild is running now, re-parented and in its own session
        "print('parent done')\n"
    )
    result = pool.run_program(code, "python")
    assert (result.status, result.stdout) == ("ok", "parent done\n")
    assert processes_with_arg(marker) == []
    assert_healthy(pool, baseline)


def test_sandbox_runs_programs_unprivileged(pool):
    code = (
        "import os\n"
        "status = dict(l.split(':', 1) for l in open('/proc/self/status') if ':' in l)\n"
        "print(os.getuid(), os.geteuid(), status['CapEff'].strip(), status['NoNewPrivs'].strip())\n"
    )
    result = pool.run_program(code, "python")
    uid, euid, caps, no_new_privs = result.stdout.split()
    assert int(uid) != 0 and int(euid) != 0
    assert int(caps, 16) == 0
    assert no_new_privs == "1"


def test_sandbox_refuses_without_bubblewrap_unless_unsafe_local(monkeypatch):
    from ascent.errors import AscentError
    from ascent.rewards.sandbox import isolation

    monkeypatch.setattr(isolation.shutil, "which", lambda name: None)
    with pytest.raises(AscentError, match=r"bubblewrap.*unsafe_local = true"):
        SandboxPool(SandboxSection(workers=1))
    with SandboxPool(SandboxSection(workers=1, unsafe_local=True)) as unsafe:
        result = unsafe.run_program("print(input().upper())", "python", "trusted\n")
    assert (result.status, result.stdout) == ("ok", "TRUSTED\n")


def test_sandbox_refuses_outside_linux_even_unsafe(monkeypatch):
    from ascent.errors import AscentError
    from ascent.rewards.sandbox import isolation

    monkeypatch.setattr(isolation.sys, "platform", "darwin")
    with pytest.raises(AscentError, match="Linux only"):
        SandboxPool(SandboxSection(workers=1, unsafe_local=True))

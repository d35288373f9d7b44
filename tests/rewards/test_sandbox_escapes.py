"""Hostile programs that go after the kernel and the zygote rather than the limits.

Each runs for real in the sandbox: user namespaces (capabilities, mounts), SysV IPC objects that
would outlive a run, memory spread over many processes, uids shared between pools, a directory
tree too deep for a recursive cleanup, and output files swapped for FIFOs.
"""

from __future__ import annotations

import os
import time

import pytest

from ascent.config.rewards import SandboxSection
from ascent.rewards.sandbox import Limits, SandboxPool, cgroups
from tests.rewards.conftest import FAST, isolation_or_skip

pytestmark = pytest.mark.timeout(60)

LIBC = "import ctypes, os\nlibc = ctypes.CDLL(None, use_errno=True)\n"
# x86_64 / aarch64 numbers of the calls a filter must refuse
SYSCALLS = {
    "x86_64": {"clone": 56, "clone3": 435, "setns": 308},
    "aarch64": {"clone": 220, "clone3": 435, "setns": 268},
}
CLONE_NEWUSER, CLONE_NEWNS, SIGCHLD = 0x10000000, 0x00020000, 17
EPERM, ENOSYS = 1, 38


def test_program_cannot_make_a_user_namespace_to_gain_capabilities_and_mount(pool):
    # The reviewer's escape: a new user namespace maps the run uid to root with every
    # capability, then mounts a tmpfs far larger than the sandbox's /tmp.
    code = LIBC + (
        "uid, gid = os.getuid(), os.getgid()\n"
        "libc.prctl(4, 1, 0, 0, 0)\n"  # PR_SET_DUMPABLE, so that the uid map is writable
        f"if libc.unshare({CLONE_NEWUSER | CLONE_NEWNS}) != 0:\n"
        "    print('unshare refused', ctypes.get_errno())\n"
        "else:\n"
        "    open('/proc/self/setgroups', 'w').write('deny')\n"
        "    open('/proc/self/uid_map', 'w').write(f'0 {uid} 1')\n"
        "    open('/proc/self/gid_map', 'w').write(f'0 {gid} 1')\n"
        "    status = open('/proc/self/status').read()\n"
        "    print('CapEff', status.split('CapEff:')[1].split()[0])\n"
        "    os.mkdir('m')\n"
        "    print('mount', libc.mount(b'none', b'm', b'tmpfs', 0, b'size=4g'))\n"
    )
    result = pool.run_program(code, "python")
    assert result.status == "ok", result.stderr
    assert result.stdout == f"unshare refused {EPERM}\n"


def test_program_cannot_clone_into_new_namespaces_or_join_others(pool):
    numbers = SYSCALLS.get(os.uname().machine)
    if numbers is None:
        pytest.skip(f"no system-call numbers for {os.uname().machine} in this test")
    code = LIBC + (
        "def attempt(name, *args):\n"
        "    ctypes.set_errno(0)\n"
        "    print(name, libc.syscall(*args), ctypes.get_errno())\n"
        f"attempt('clone', {numbers['clone']}, {CLONE_NEWUSER | SIGCHLD}, 0, 0, 0, 0)\n"
        f"attempt('clone3', {numbers['clone3']}, 0, 0)\n"
        "fd = os.open('/proc/self/ns/net', os.O_RDONLY)\n"
        f"attempt('setns', {numbers['setns']}, fd, 0)\n"
    )
    result = pool.run_program(code, "python")
    assert result.status == "ok", result.stderr
    # clone3 says "not here" (ENOSYS) so that libc falls back to clone for threads and fork.
    assert result.stdout == f"clone -1 {EPERM}\nclone3 -1 {ENOSYS}\nsetns -1 {EPERM}\n"


def test_threads_fork_and_spawn_still_work_under_the_filter(pool):
    code = (
        "import os, subprocess, threading\n"
        "box = []\n"
        "t = threading.Thread(target=box.append, args=('thread',))\n"
        "t.start(); t.join()\n"
        "pid = os.fork()\n"
        "if pid == 0:\n"
        "    os._exit(7)\n"
        "print(box[0], os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]),\n"
        "      subprocess.run(['/bin/echo', 'spawned'], capture_output=True, text=True).stdout)\n"
    )
    result = pool.run_program(code, "python")
    assert (result.status, result.stdout) == ("ok", "thread 7 spawned\n\n"), result.stderr


def test_sysv_shared_memory_cannot_be_created_to_outlive_the_run(pool):
    # 300 MB segments used to survive the run and grow the host's shared memory run after run;
    # a later run could also read what an earlier one left there.
    code = LIBC + (
        "IPC_CREAT = 0o1000\n"
        "for name, args in (('shmget', (0x5EC, 300 << 20, IPC_CREAT | 0o666)),\n"
        "                   ('msgget', (0x5EC, IPC_CREAT | 0o666)),\n"
        "                   ('semget', (0x5EC, 1, IPC_CREAT | 0o666))):\n"
        "    ctypes.set_errno(0)\n"
        "    print(name, getattr(libc, name)(*args), ctypes.get_errno())\n"
        "print('mq_open', libc.mq_open(b'/leak', os.O_CREAT | os.O_RDWR, 0o600, None),\n"
        "      ctypes.get_errno())\n"
        "print(open('/proc/sysvipc/shm').read().count('\\n'))\n"  # just the header line
    )
    first = pool.run_program(code, "python")
    assert first.status == "ok", first.stderr
    assert first.stdout.splitlines() == [
        f"shmget -1 {EPERM}",
        f"msgget -1 {EPERM}",
        f"semget -1 {EPERM}",
        f"mq_open -1 {EPERM}",
        "1",
    ]
    later = pool.run_program(LIBC + "print(libc.shmget(0x5EC, 0, 0))\n", "python")
    assert later.stdout == "-1\n"


def cgroup_or_skip() -> None:
    if not cgroups.available():
        pytest.skip("no cgroup for sandbox workers here (not root, or none delegated)")


FORKED_MEMORY = """
import os, time
children = []
for _ in range({children}):
    pid = os.fork()
    if pid == 0:
        block = b"x" * ({mb} << 20)  # written, so resident
        time.sleep(0.5)
        os._exit(0)
    children.append(pid)
print([os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) for pid in children])
"""


def test_memory_limit_holds_across_forked_children(pool):
    # 4 x 200 MB: each child fits the 256 MB address-space limit, together they do not.
    cgroup_or_skip()
    limits = Limits.for_run(FAST, 3000)
    start = time.monotonic()
    result = pool.run_program(FORKED_MEMORY.format(children=4, mb=200), "python", limits=limits)
    assert result.status == "memory_limit", (result.stdout, result.detail)
    assert "all its processes" in result.detail
    assert time.monotonic() - start < 10
    assert pool.run_program("print(6 * 7)", "python").stdout == "42\n"


def test_memory_used_counts_every_process_of_the_run(pool):
    cgroup_or_skip()
    limits = Limits.for_run(FAST, 3000)
    result = pool.run_program(FORKED_MEMORY.format(children=3, mb=60), "python", limits=limits)
    assert (result.status, result.stdout) == ("ok", "[0, 0, 0]\n"), result.stderr
    assert result.memory_kb >= 3 * 60 * 1024  # the parent alone holds about 10 MB


def test_without_cgroups_a_pool_whose_limits_could_exhaust_memory_says_so(caplog):
    from ascent.rewards.sandbox.pool import warn_if_memory_can_run_out

    ram_mb = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") >> 20
    greedy = SandboxSection(memory_mb=ram_mb, max_processes=2)  # 2 processes x all the RAM
    assert warn_if_memory_can_run_out(greedy, workers=1)
    assert "memory limits are per process" in caplog.text and "max_processes" in caplog.text
    assert not warn_if_memory_can_run_out(SandboxSection(memory_mb=64, max_processes=2), 1)
    assert SandboxSection().max_processes == 16  # threads count too


def test_pools_never_share_a_run_uid():
    # RLIMIT_NPROC counts per host uid: one pool's runs must not eat another's process limit.
    if os.geteuid() != 0:
        pytest.skip("as a normal user, runs are that user in a namespace of their own")
    cfg = FAST.model_copy(update={"workers": 1})
    isolation_or_skip(cfg)
    code = "import os\nprint(os.getuid())\n"
    with SandboxPool(cfg) as first, SandboxPool(cfg) as second:
        uids = {first.run_program(code, "python").stdout, second.run_program(code, "python").stdout}
    assert len(uids) == 2


def test_a_tree_too_deep_for_recursion_is_cleaned_up_and_the_run_keeps_its_result(pool):
    # A recursive cleanup hit RecursionError: the program's own result became sandbox_error
    # (reward None) and its worker restarted.
    code = (
        "import os\n"
        "os.mkdir('locked'); open('locked/f', 'w').close(); os.chmod('locked', 0)\n"
        "for _ in range(3000):\n"
        "    os.mkdir('a')\n"
        "    os.chdir('a')\n"
        "print('deep')\n"
    )
    result = pool.run_program(code, "python", limits=Limits.for_run(FAST, 3000))
    assert (result.status, result.stdout) == ("ok", "deep\n"), result.detail
    listing = pool.run_program("import os\nprint(os.listdir('.'))\n", "python")
    assert listing.stdout == "[]\n"


def test_a_restarted_worker_prepares_its_programs_again(pool):
    def task(worker):
        program = worker.prepare("print(input())", "python")
        try:
            first = worker.run(program, "1\n", Limits.for_run(FAST))
            worker._proc.kill()  # the zygote dies between two tests of one program
            worker._proc.wait()
            return first, worker.run(program, "2\n", Limits.for_run(FAST))
        finally:
            worker.drop(program)

    first, second = pool.submit(task).result()
    assert (first.stdout, second.status, second.stdout) == ("1\n", "ok", "2\n")


# Reads its own anonymous memory (heap and the like, where freed data lingers) with ctypes, as
# /proc/self/mem belongs to root in a process that switched uid.
MEMORY_SCAN = r"""
import ctypes, re
hits = []
for line in open("/proc/self/maps"):
    fields = line.split()
    if fields[1].startswith("r") and (len(fields) < 6 or fields[5] == "[heap]"):
        start, end = (int(x, 16) for x in fields[0].split("-"))
        hits += re.findall(rb"expected-\d{4}", ctypes.string_at(start, end - start))
print(sorted(set(hits)))
"""


def test_a_checkers_expected_answer_never_passes_through_the_zygote(pool):
    # Every run is forked from the zygote and inherits its memory, freed or not: what the
    # zygote once held (a checker's answer.txt), a later program could find there.
    def task(worker):
        limits = Limits.for_run(FAST, 3000)
        checker = worker.prepare("import sys\nprint(open(sys.argv[3]).read())\n", "python")
        scanner = worker.prepare(MEMORY_SCAN, "python")
        try:
            files = {"input.txt": "1\n", "output.txt": "1\n", "answer.txt": "expected-5309"}
            judged = worker.run(checker, "", limits, files=files, args=list(files))
            return judged, worker.run(scanner, "", limits)
        finally:
            worker.drop(checker)
            worker.drop(scanner)

    judged, scan = pool.submit(task).result()
    assert (judged.status, judged.stdout) == ("ok", "expected-5309\n")  # the checker got it
    assert (scan.status, scan.stdout) == ("ok", "[]\n"), scan.stderr


def test_output_files_swapped_for_fifos_cannot_block_the_zygote(tmp_path):
    # Where runs share the zygote's uid (unsafe_local here, bubblewrap as a normal user), a run
    # could replace the files the zygote read its output from with FIFOs.
    cfg = SandboxSection(workers=1, unsafe_local=True, time_limit_ms=500)
    code = (
        "import os\n"
        "for base in ('..', '../io'):\n"
        "    for name in os.listdir(base) if os.path.isdir(base) else []:\n"
        "        path = os.path.join(base, name)\n"
        "        if os.path.isfile(path):\n"
        "            os.unlink(path)\n"
        "            os.mkfifo(path)\n"
        "print('swapped')\n"
    )
    with SandboxPool(cfg) as unsafe:
        start = time.monotonic()
        result = unsafe.run_program(code, "python")
        assert (result.status, result.stdout) == ("ok", "swapped\n"), result.detail
        assert time.monotonic() - start < 5
        assert unsafe.run_program("print(1)", "python").stdout == "1\n"

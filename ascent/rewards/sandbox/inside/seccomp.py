"""The system-call filter every run gets: no namespaces, mounts, tracing or shared IPC objects.

As root the sandbox runs programs as an unprivileged uid, but a program could still create a
user namespace, gain every capability inside it and mount a tmpfs past the size of /tmp; SysV
shared memory would outlive the run; ptrace and process_vm_* would reach the call-a-function test
process. A classic-BPF seccomp filter, installed after PR_SET_NO_NEW_PRIVS and inherited across
fork and exec, refuses those calls:

- unshare, setns, mount and the new mount API, pivot_root, chroot: EPERM;
- clone with any CLONE_NEW* flag: EPERM (plain fork and thread creation stay allowed);
- clone3: ENOSYS, its flags live in memory a filter cannot read, and libc then falls back to
  clone for threads and fork;
- ptrace, process_vm_readv/writev, bpf, userfaultfd, perf_event_open, keyctl, add_key,
  request_key, io_uring_*, shmget, msgget, semget, mq_open: EPERM;
- a system call of another ABI (i386, x32): EPERM or the process is killed.

Run as a script (`python -I -S seccomp.py`) it installs the filter and exits 0, or prints why it
cannot and exits 1: the host's isolation check runs exactly that.
"""

import ctypes
import errno
import os
import struct
import sys

PR_SET_NO_NEW_PRIVS = 38
PR_SET_SECCOMP = 22
SECCOMP_MODE_FILTER = 2
RET_KILL_PROCESS = 0x80000000
RET_ERRNO = 0x00050000
RET_ALLOW = 0x7FFF0000
LD_ABS_W = 0x20  # BPF_LD | BPF_W | BPF_ABS
JEQ = 0x15  # BPF_JMP | BPF_JEQ | BPF_K
JGE = 0x35  # BPF_JMP | BPF_JGE | BPF_K
JSET = 0x45  # BPF_JMP | BPF_JSET | BPF_K
RET = 0x06  # BPF_RET | BPF_K
NR, ARCH, ARG0 = 0, 4, 16  # offsets in struct seccomp_data (little-endian: low word of args[0])
X32_SYSCALL_BIT = 0x40000000
# CLONE_NEWNS | CLONE_NEWCGROUP | CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWUSER | CLONE_NEWPID |
# CLONE_NEWNET (CLONE_NEWTIME shares its bit with the exit signal in clone(); clone3 is refused).
NAMESPACE_FLAGS = 0x7E020000

# name: (x86_64, aarch64) system-call numbers; the errno each gets.
SYSCALLS = {
    "unshare": (272, 97, errno.EPERM),
    "setns": (308, 268, errno.EPERM),
    "mount": (165, 40, errno.EPERM),
    "umount2": (166, 39, errno.EPERM),
    "pivot_root": (155, 41, errno.EPERM),
    "chroot": (161, 51, errno.EPERM),
    "open_tree": (428, 428, errno.EPERM),
    "move_mount": (429, 429, errno.EPERM),
    "fsopen": (430, 430, errno.EPERM),
    "fsconfig": (431, 431, errno.EPERM),
    "fsmount": (432, 432, errno.EPERM),
    "fspick": (433, 433, errno.EPERM),
    "mount_setattr": (442, 442, errno.EPERM),
    "ptrace": (101, 117, errno.EPERM),
    "process_vm_readv": (310, 270, errno.EPERM),
    "process_vm_writev": (311, 271, errno.EPERM),
    "bpf": (321, 280, errno.EPERM),
    "userfaultfd": (323, 282, errno.EPERM),
    "perf_event_open": (298, 241, errno.EPERM),
    "keyctl": (250, 219, errno.EPERM),
    "add_key": (248, 217, errno.EPERM),
    "request_key": (249, 218, errno.EPERM),
    "io_uring_setup": (425, 425, errno.EPERM),
    "io_uring_enter": (426, 426, errno.EPERM),
    "io_uring_register": (427, 427, errno.EPERM),
    "shmget": (29, 194, errno.EPERM),
    "msgget": (68, 186, errno.EPERM),
    "semget": (64, 190, errno.EPERM),
    "mq_open": (240, 180, errno.EPERM),
    "clone3": (435, 435, errno.ENOSYS),
}
CLONE = (56, 220)
# machine: (AUDIT_ARCH_*, column in SYSCALLS)
ARCHES = {"x86_64": (0xC000003E, 0), "aarch64": (0xC00000B7, 1)}


class SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def instructions(machine):
    """The filter for `machine` (os.uname().machine) as (code, jt, jf, k) tuples."""
    if machine not in ARCHES:
        raise OSError(
            f"no system-call filter for {machine} machines (ascent's sandbox supports "
            f"{', '.join(ARCHES)})"
        )
    audit_arch, column = ARCHES[machine]
    code = [
        (LD_ABS_W, 0, 0, ARCH),
        (JEQ, 1, 0, audit_arch),
        (RET, 0, 0, RET_KILL_PROCESS),
        (LD_ABS_W, 0, 0, NR),
    ]
    if machine == "x86_64":
        code += [(JGE, 0, 1, X32_SYSCALL_BIT), (RET, 0, 0, RET_ERRNO | errno.EPERM)]
    for numbers in SYSCALLS.values():
        code += [(JEQ, 0, 1, numbers[column]), (RET, 0, 0, RET_ERRNO | numbers[2])]
    code += [
        (JEQ, 0, 3, CLONE[column]),
        (LD_ABS_W, 0, 0, ARG0),
        (JSET, 0, 1, NAMESPACE_FLAGS),
        (RET, 0, 0, RET_ERRNO | errno.EPERM),
        (RET, 0, 0, RET_ALLOW),
    ]
    return code


class Filter:
    """The compiled filter, built once in the zygote; `install` is one prctl in each run."""

    def __init__(self, machine=None):
        code = instructions(machine or os.uname().machine)
        self.buffer = ctypes.create_string_buffer(b"".join(struct.pack("=HBBI", *i) for i in code))
        self.program = SockFprog(len(code), ctypes.addressof(self.buffer))
        self.prctl = ctypes.CDLL(None, use_errno=True).prctl

    def install(self):
        """Filter this process and everything it starts; needs PR_SET_NO_NEW_PRIVS first."""
        if self.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(self.program), 0, 0):
            err = ctypes.get_errno()
            raise OSError(err, f"seccomp filter refused: {os.strerror(err)}")


def main():
    try:
        seccomp = Filter()
        if seccomp.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0):
            raise OSError(ctypes.get_errno(), "PR_SET_NO_NEW_PRIVS failed")
        seccomp.install()
    except OSError as err:
        print(f"seccomp: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

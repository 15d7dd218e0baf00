"""``python launcher.py [--docker-like] [--no-landlock] [--user UID] -- COMMAND...``: run a server elsewhere.

Test helper (runs as root) that reproduces the environments the sandbox must work in, then execs the
server:

* ``--docker-like``: Docker's default seccomp profile as it applies to a container without added
  capabilities (namespaces, mounts, ``clone`` with namespace flags, ``clone3`` → ENOSYS, io_uring, bpf,
  perf, keyrings, modules... refused; ``no_new_privs`` left unset, as Docker does), and Docker's
  default capability bounding set (no CAP_SYS_ADMIN). The sandbox then nests its own filter in it.
* ``--no-landlock``: a kernel without Landlock (its syscalls answer ENOSYS).
* ``--user UID``: a non-root server (uid and gid UID, no groups). It keeps one ambient capability,
  CAP_DAC_READ_SEARCH, only because this machine's Python lives under ``/root`` (mode 700); the
  sandbox drops every capability in its children, and the probe checks that it did.
"""

from __future__ import annotations

import ctypes
import errno
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from app.sandbox.seccomp import (  # noqa: E402
    CLONE_NAMESPACES,
    CMP_MASKED_EQ,
    EPERM,
    Libseccomp,
    Rule,
    act_errno,
)

libc = ctypes.CDLL(None, use_errno=True)
PR_SET_KEEPCAPS, PR_CAPBSET_DROP, PR_CAP_AMBIENT, PR_CAP_AMBIENT_RAISE = 8, 24, 47, 2
CAP_DAC_READ_SEARCH, CAP_LAST = 2, 40
# Docker's default capabilities: CHOWN DAC_OVERRIDE FOWNER FSETID KILL SETGID SETUID SETPCAP
# NET_BIND_SERVICE NET_RAW SYS_CHROOT MKNOD AUDIT_WRITE SETFCAP.
DOCKER_CAPS = {0, 1, 3, 4, 5, 6, 7, 8, 10, 13, 18, 27, 29, 31}
DOCKER_DENIED = (
    "unshare",
    "setns",
    "mount",
    "umount2",
    "pivot_root",
    "bpf",
    "perf_event_open",
    "keyctl",
    "add_key",
    "request_key",
    "kexec_load",
    "kexec_file_load",
    "init_module",
    "finit_module",
    "delete_module",
    "reboot",
    "swapon",
    "swapoff",
    "acct",
    "settimeofday",
    "clock_settime",
    "io_uring_setup",
    "io_uring_enter",
    "io_uring_register",
    "open_by_handle_at",
    "fsopen",
    "fsmount",
    "move_mount",
    "open_tree",
    "userfaultfd",
    "quotactl",
    "syslog",
)
ENOSYS = act_errno(errno.ENOSYS)


class CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class CapData(ctypes.Structure):
    _fields_ = [
        ("effective", ctypes.c_uint32),
        ("permitted", ctypes.c_uint32),
        ("inheritable", ctypes.c_uint32),
    ]


def load_filter(docker_like: bool, no_landlock: bool) -> None:
    rules: list[Rule] = []
    if docker_like:
        rules += [Rule(name, EPERM) for name in DOCKER_DENIED]
        rules += [Rule("clone", EPERM, ((0, CMP_MASKED_EQ, flag, flag),)) for flag in CLONE_NAMESPACES]
        rules.append(Rule("clone3", ENOSYS))
    if no_landlock:
        rules += [
            Rule(n, ENOSYS)
            for n in ("landlock_create_ruleset", "landlock_add_rule", "landlock_restrict_self")
        ]
    if rules:
        # Docker does not set no_new_privs; as root (with CAP_SYS_ADMIN, for now) we need not either.
        Libseccomp().load(rules, no_new_privs=False)


def docker_capabilities(keep: set[int]) -> None:
    for cap in range(CAP_LAST + 1):
        if (
            cap not in DOCKER_CAPS | keep
            and libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0
            and ctypes.get_errno() != errno.EINVAL
        ):
            raise OSError(ctypes.get_errno(), f"capbset drop {cap}")


def become(uid: int) -> None:
    libc.prctl(PR_SET_KEEPCAPS, 1, 0, 0, 0)
    os.setgroups([])
    os.setresgid(uid, uid, uid)
    os.setresuid(uid, uid, uid)
    bit = 1 << CAP_DAC_READ_SEARCH
    data = (CapData * 2)(CapData(bit, bit, bit), CapData(0, 0, 0))
    if libc.capset(ctypes.byref(CapHeader(0x20080522, 0)), data) != 0:
        raise OSError(ctypes.get_errno(), "capset")
    if libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_RAISE, CAP_DAC_READ_SEARCH, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "ambient raise")


def main(argv: list[str]) -> None:
    split = argv.index("--")
    options, command = argv[:split], argv[split + 1 :]
    load_filter("--docker-like" in options, "--no-landlock" in options)
    if "--docker-like" in options:
        docker_capabilities({CAP_DAC_READ_SEARCH} if "--user" in options else set())
    if "--user" in options:
        become(int(options[options.index("--user") + 1]))
    os.execv(command[0], command)


if __name__ == "__main__":
    main(sys.argv[1:])

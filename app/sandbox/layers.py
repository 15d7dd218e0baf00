"""The OS layers one forked child puts around itself before it reads its job.

Order matters (each step needs what the previous one still allowed):

1. descriptors: only the job and result pipes survive; 0, 1, 2 become ``/dev/null``;
2. ``oom_score_adj`` 1000 (the kernel kills a child before the server), ``no_new_privs``;
3. Landlock (read-only allowlist; paths are opened while we may still traverse them, e.g. as root);
4. static rlimits (core, file size 0, open files, memlock; processes per uid in root mode);
5. identity: a distinct unprivileged uid/gid without groups when the fork server runs as root;
6. not dumpable, die with the fork server;
7. memory rlimits relative to what the child already maps (the torch import is not the user's);
8. seccomp with TSYNC (last: it forbids the identity changes above): an allow-list, and a deny-list
   by argument stacked on it (``app.sandbox.seccomp``).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import resource
import signal
from dataclasses import dataclass, field

from app.sandbox import landlock
from app.sandbox.seccomp import Filters

PR_SET_PDEATHSIG, PR_GET_DUMPABLE, PR_SET_DUMPABLE, PR_SET_NO_NEW_PRIVS = 1, 3, 4, 38
PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, CAPABILITY_VERSION_3 = 47, 4, 0x20080522
SYS_CLOSE_RANGE, UINT_MAX = 436, 0xFFFFFFFF  # the same number on x86-64 and arm64
MIB = 1024 * 1024

_libc = ctypes.CDLL(None, use_errno=True)
_libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
_libc.syscall.restype = ctypes.c_long


def prctl(option: int, value: int = 0) -> int:
    result = _libc.prctl(option, value, 0, 0, 0)
    if result < 0:
        raise OSError(ctypes.get_errno(), f"prctl({option})")
    return result


@dataclass(frozen=True)
class ChildConfig:
    """What every child needs to know; sent by the server to the fork server once, as JSON."""

    memory_mib: int = 512
    cpu_seconds: int = 5
    wall_seconds: float = 5.0
    max_steps: int = 10_000
    max_stdout: int = 64 * 1024
    max_result_bytes: int = 8 * MIB
    max_job_bytes: int = 256 * 1024
    uid_base: int | None = None  # set when the fork server runs as root
    nproc: int = 256  # threads count as processes of the child's uid (root mode only)
    nofile: int = 64
    read_paths: list[str] = field(default_factory=list)
    workdir: str = "/"


def status_fields() -> dict[str, str]:
    fields = {}
    with open("/proc/self/status", encoding="ascii", errors="replace") as stream:
        for line in stream:
            key, _, value = line.partition(":")
            fields[key] = value.strip()
    return fields


def _kib(value: str) -> int:
    return int(value.split()[0]) * 1024


def _close_fds(keep: set[int]) -> None:
    """Close every descriptor but ``keep``: one close_range(2) call per gap between kept ones, where
    listing /proc/self/fd and closing one by one took ~0.3 ms a child; one by one where the kernel
    has no close_range (before Linux 5.9)."""
    low = 0
    for fd in [*sorted(fd for fd in keep if fd >= 0), UINT_MAX + 1]:
        if fd > low and _libc.syscall(SYS_CLOSE_RANGE, ctypes.c_uint(low), ctypes.c_uint(fd - 1),
                                      ctypes.c_uint(0)) != 0:
            _close_listed(keep)
            return
        low = fd + 1


def _close_listed(keep: set[int]) -> None:
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        if fd not in keep:
            with contextlib.suppress(OSError):
                os.close(fd)


def _set_limit(kind: int, soft: int, hard: int | None = None) -> None:
    hard = soft if hard is None else hard
    _, current_hard = resource.getrlimit(kind)
    if current_hard != resource.RLIM_INFINITY:
        hard = min(hard, current_hard)
    resource.setrlimit(kind, (min(soft, hard), hard))


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [
        ("effective", ctypes.c_uint32),
        ("permitted", ctypes.c_uint32),
        ("inheritable", ctypes.c_uint32),
    ]


def drop_capabilities() -> None:
    """Empty effective, permitted, inheritable and ambient capability sets (dropping needs no privilege)."""
    prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL)
    header = _CapHeader(CAPABILITY_VERSION_3, 0)
    data = (_CapData * 2)()
    if _libc.capset(ctypes.byref(header), data) != 0:
        raise OSError(ctypes.get_errno(), "capset")


def harden(
    config: ChildConfig,
    uid: int | None,
    keep_fds: tuple[int, ...],
    fork_server_pid: int,
    filters: Filters,
) -> dict:
    """Apply every layer to this (single-threaded, just forked) process; return what is in force."""
    # 1. Signals as a fresh process has them (the fork server listens for SIGCHLD); own session.
    signal.set_wakeup_fd(-1)
    for sig in (signal.SIGCHLD, signal.SIGINT, signal.SIGTERM, signal.SIGALRM, signal.SIGXCPU):
        signal.signal(sig, signal.SIG_DFL)
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # file size limit: EFBIG, not death
    os.setsid()
    null = os.open("/dev/null", os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    _close_fds({0, 1, 2, *keep_fds})

    # 2.
    try:
        with open("/proc/self/oom_score_adj", "w", encoding="ascii") as stream:
            stream.write("1000")
    except OSError:
        pass
    prctl(PR_SET_NO_NEW_PRIVS, 1)

    # 3.
    # (Not a ruleset made once by the fork server: the /proc/self rules must name the child's own
    # /proc entries, which only the child can open.)
    abi = landlock.restrict([*config.read_paths, config.workdir], ["/dev/null"])

    # 4.
    for kind in (resource.RLIMIT_CORE, resource.RLIMIT_FSIZE, resource.RLIMIT_MEMLOCK):
        _set_limit(kind, 0)
    _set_limit(resource.RLIMIT_NOFILE, config.nofile)

    # 5.
    if uid is not None:
        _set_limit(resource.RLIMIT_NPROC, config.nproc)  # per uid, and ignored for root: hence here only
        os.setgroups([])
        os.setresgid(uid, uid, uid)
        os.setresuid(uid, uid, uid)  # all ids non-zero: the kernel clears every capability
    else:
        drop_capabilities()  # a non-root server may still hold some (file or ambient capabilities)

    # 6. (after the uid change, which resets both)
    prctl(PR_SET_DUMPABLE, 0)
    prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != fork_server_pid:
        os._exit(72)  # the fork server died before we could follow it

    # 7. DATA bounds heap, anonymous maps and thread stacks; AS is the backstop for shared maps.
    status = status_fields()
    data = _kib(status["VmData"]) + config.memory_mib * MIB
    address_space = _kib(status["VmSize"]) + config.memory_mib * MIB + 256 * MIB
    _set_limit(resource.RLIMIT_DATA, data)
    _set_limit(resource.RLIMIT_AS, address_space)

    os.chdir(config.workdir)

    # 8. The deny-list by argument, then the allow-list (deny by default) on top, compiled by the fork
    # server (app.sandbox.seccomp.Filters).
    rules = filters.install(os.getpid())

    return {
        "uid": os.getuid(),
        "landlock_abi": abi,
        "seccomp_rules": rules,
        "dumpable": prctl(PR_GET_DUMPABLE),
    }


def limit_cpu(seconds: int) -> int:
    """CPU limit for the job, counted from now: SIGXCPU at the soft limit, SIGKILL a second later."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    soft = max(1, round(usage.ru_utime + usage.ru_stime + seconds))
    _set_limit(resource.RLIMIT_CPU, soft, soft + 1)
    return soft

"""A minimal ctypes binding to libseccomp and the playground's syscall deny-list.

Why our own binding: ``pyseccomp`` runs ``ctypes.util.find_library`` on import, which may spawn
``ldconfig`` and write temporary files; we open ``libseccomp.so.2`` by its soname instead, once, in the
fork server (before any restriction), so every child already has it mapped.

Two filters, stacked (the kernel applies the most restrictive answer of all of them):

* the allow-list (``allow_rules``, the way Docker's default profile and nsjail work): deny by default
  (ENOSYS, which is also what glibc expects of a call the kernel is too old for), allow what
  ``app.sandbox.syscalls.ALLOWED`` lists, EPERM for the calls a snippet is told "not permitted";
* the deny-list (``deny_rules``): errno by argument for allowed calls used in forbidden ways
  (``clone`` of a process, ``openat`` for writing, signals to other pids, ``prctl`` options...),
  so a learner sees ``PermissionError`` instead of a dead process.

(libseccomp lets an unconditional rule override conditional ones for the same call, hence two filters
instead of one.) Only the native architecture is in either filter; a syscall made through another ABI
(``int 0x80``, x32) hits libseccomp's bad-arch action, which kills.
"""

from __future__ import annotations

import ctypes
import errno
import struct
import tempfile
from dataclasses import dataclass

ACT_ALLOW = 0x7FFF0000


def act_errno(code: int) -> int:
    return 0x00050000 | (code & 0xFFFF)


# enum scmp_compare
CMP_NE, CMP_EQ, CMP_MASKED_EQ = 1, 4, 7
# enum scmp_filter_attr
ATTR_CTL_NNP, ATTR_CTL_TSYNC, ATTR_CTL_OPTIMIZE = 3, 4, 8
OPTIMIZE_BINARY_TREE = 2

CLONE_THREAD = 0x00010000
CLONE_NAMESPACES = (
    0x00020000,
    0x02000000,
    0x04000000,
    0x08000000,
    0x10000000,
    0x20000000,
    0x40000000,
    0x00000080,
)  # NEWNS UTS IPC USER PID NET CGROUP TIME (0x80 = CLONE_NEWTIME)
O_WRITE_FLAGS = (0o1, 0o2, 0o100, 0o1000, 0o2000, 0o20000000)  # WRONLY RDWR CREAT TRUNC APPEND __O_TMPFILE
F_SETOWN, F_SETOWN_EX = 8, 15
FIOSETOWN, SIOCSPGRP, TIOCSTI = 0x8901, 0x8902, 0x5412
PR_SET_DUMPABLE, PR_SET_MM, PR_SET_PTRACER = 4, 35, 0x59616D61
PERSONALITY_QUERY = 0xFFFFFFFF


class ArgCmp(ctypes.Structure):
    _fields_ = [
        ("arg", ctypes.c_uint),
        ("op", ctypes.c_int),
        ("datum_a", ctypes.c_uint64),
        ("datum_b", ctypes.c_uint64),
    ]


@dataclass(frozen=True)
class Rule:
    """``syscall`` answers ``action`` when every (arg, op, a, b) comparison holds (none: always)."""

    syscall: str
    action: int
    conditions: tuple[tuple[int, int, int, int], ...] = ()


EPERM = act_errno(errno.EPERM)
EACCES = act_errno(errno.EACCES)
ENOSYS = act_errno(errno.ENOSYS)

ALWAYS_EPERM = (
    # network
    "socket",
    "socketpair",
    "connect",
    "bind",
    "listen",
    "accept",
    "accept4",
    # new programs and processes (threads are clone with CLONE_THREAD, handled below)
    "execve",
    "execveat",
    "fork",
    "vfork",
    # other processes
    "ptrace",
    "process_vm_readv",
    "process_vm_writev",
    "pidfd_open",
    "pidfd_getfd",
    "pidfd_send_signal",
    "kcmp",
    "tkill",
    "process_madvise",
    "process_mrelease",
    "migrate_pages",
    "move_pages",
    # namespaces, mounts, root
    "unshare",
    "setns",
    "mount",
    "umount2",
    "pivot_root",
    "chroot",
    "fsopen",
    "fsconfig",
    "fsmount",
    "fspick",
    "move_mount",
    "open_tree",
    "mount_setattr",
    # kernel attack surface
    "bpf",
    "perf_event_open",
    "userfaultfd",
    "io_uring_setup",
    "io_uring_enter",
    "io_uring_register",
    "keyctl",
    "add_key",
    "request_key",
    "memfd_create",
    "memfd_secret",
    "init_module",
    "finit_module",
    "delete_module",
    "kexec_load",
    "kexec_file_load",
    "reboot",
    "swapon",
    "swapoff",
    "acct",
    "settimeofday",
    "clock_settime",
    "clock_adjtime",
    "adjtimex",
    "sethostname",
    "setdomainname",
    "iopl",
    "ioperm",
    "modify_ldt",
    "quotactl",
    "quotactl_fd",
    "syslog",
    "vhangup",
    "lookup_dcookie",
    "uselib",
    "name_to_handle_at",
    "open_by_handle_at",
    "fanotify_init",
    "fanotify_mark",
    # inotify sees names appear in folders Landlock hides (another run's files in /tmp, the repo)
    "inotify_init",
    "inotify_init1",
    "inotify_add_watch",
    "inotify_rm_watch",
    # identity
    "setuid",
    "setgid",
    "setreuid",
    "setregid",
    "setresuid",
    "setresgid",
    "setgroups",
    "setfsuid",
    "setfsgid",
    "capset",
    # System V IPC and POSIX message queues outlive the process: a channel to the next run.
    "shmget",
    "shmat",
    "shmctl",
    "msgget",
    "msgsnd",
    "msgrcv",
    "msgctl",
    "semget",
    "semop",
    "semctl",
    "semtimedop",
    "mq_open",
    "mq_unlink",
    "mq_timedsend",
    "mq_timedreceive",
    "mq_notify",
    "mq_getsetattr",
)
ALWAYS_EACCES = (
    "creat",
    "unlink",
    "unlinkat",
    "rename",
    "renameat",
    "renameat2",
    "mkdir",
    "mkdirat",
    "rmdir",
    "link",
    "linkat",
    "symlink",
    "symlinkat",
    "mknod",
    "mknodat",
    "chmod",
    "fchmod",
    "fchmodat",
    "fchmodat2",
    "chown",
    "fchown",
    "lchown",
    "fchownat",
    "truncate",
    "ftruncate",
    "utime",
    "utimes",
    "utimensat",
    "futimesat",
    "setxattr",
    "lsetxattr",
    "fsetxattr",
    "removexattr",
    "lremovexattr",
    "fremovexattr",
    "fallocate",
)
# Their arguments live in a struct seccomp cannot read: glibc and Python fall back to the old calls.
ALWAYS_ENOSYS = ("clone3", "openat2")
# (syscall, index of the pid argument): allowed only when it names this process (0 means "self").
SELF_ONLY_SIGNALS = (("kill", 0), ("tgkill", 0), ("rt_sigqueueinfo", 0), ("rt_tgsigqueueinfo", 0))
SELF_OR_ZERO = (
    ("prlimit64", 0),
    ("sched_setaffinity", 0),
    ("sched_setscheduler", 0),
    ("sched_setparam", 0),
    ("sched_setattr", 0),
    ("setpriority", 1),
    ("ioprio_set", 1),
)


def allow_rules() -> list[Rule]:
    """The allow-list filter (its default action is ENOSYS: ``Libseccomp.load(..., default=ENOSYS)``)."""
    from app.sandbox.syscalls import ALLOWED

    rules = [Rule(name, ACT_ALLOW) for name in sorted(ALLOWED)]
    refused = sorted(set(ALWAYS_EPERM) - ALLOWED)
    rules += [Rule(name, EPERM) for name in refused]
    rules += [Rule(name, EACCES) for name in sorted(set(ALWAYS_EACCES) - ALLOWED)]
    return rules


def deny_rules(own_pid: int) -> list[Rule]:
    """The deny-list for the process ``own_pid`` (signals only to itself)."""
    rules = [Rule(name, EPERM) for name in ALWAYS_EPERM]
    rules += [Rule(name, EACCES) for name in ALWAYS_EACCES]
    rules += [Rule(name, ENOSYS) for name in ALWAYS_ENOSYS]
    # New processes: clone without CLONE_THREAD; and no namespace flags even with it.
    rules.append(Rule("clone", EPERM, ((0, CMP_MASKED_EQ, CLONE_THREAD, 0),)))
    rules += [Rule("clone", EPERM, ((0, CMP_MASKED_EQ, flag, flag),)) for flag in CLONE_NAMESPACES]
    # File writes: any write-ish open flag.
    for name, index in (("open", 1), ("openat", 2)):
        rules += [Rule(name, EACCES, ((index, CMP_MASKED_EQ, flag, flag),)) for flag in O_WRITE_FLAGS]
    for name, index in SELF_ONLY_SIGNALS:
        rules.append(Rule(name, EPERM, ((index, CMP_NE, own_pid, 0),)))
    # prlimit64(0, ...) is how glibc sets its own limits; another pid could be the server.
    for name, index in SELF_OR_ZERO:
        rules.append(Rule(name, EPERM, ((index, CMP_NE, 0, 0),)))
    # SIGIO/SIGURG to another process through a file's owner.
    rules += [Rule("fcntl", EPERM, ((1, CMP_EQ, cmd, 0),)) for cmd in (F_SETOWN, F_SETOWN_EX)]
    rules += [Rule("ioctl", EPERM, ((1, CMP_EQ, cmd, 0),)) for cmd in (FIOSETOWN, SIOCSPGRP, TIOCSTI)]
    # Becoming dumpable again would let same-uid processes read our memory.
    rules += [
        Rule("prctl", EPERM, ((0, CMP_EQ, opt, 0),)) for opt in (PR_SET_DUMPABLE, PR_SET_MM, PR_SET_PTRACER)
    ]
    rules.append(Rule("personality", EPERM, ((0, CMP_NE, PERSONALITY_QUERY, 0),)))
    return rules


class SeccompError(OSError):
    pass


SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_TSYNC = 1, 1
INSTRUCTION = struct.Struct("=HBBI")  # struct sock_filter: code, jt, jf, k


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


class Libseccomp:
    """The handful of libseccomp calls we need. Construct it before any sandbox restriction."""

    def __init__(self, soname: str = "libseccomp.so.2") -> None:
        lib = ctypes.CDLL(soname, use_errno=True)
        lib.seccomp_init.argtypes = [ctypes.c_uint32]
        lib.seccomp_init.restype = ctypes.c_void_p
        lib.seccomp_rule_add_array.argtypes = [
            ctypes.c_void_p,
            ctypes.c_uint32,
            ctypes.c_int,
            ctypes.c_uint,
            ctypes.POINTER(ArgCmp),
        ]
        lib.seccomp_rule_add_array.restype = ctypes.c_int
        lib.seccomp_syscall_resolve_name.argtypes = [ctypes.c_char_p]
        lib.seccomp_syscall_resolve_name.restype = ctypes.c_int
        lib.seccomp_attr_set.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_uint32]
        lib.seccomp_attr_set.restype = ctypes.c_int
        lib.seccomp_load.argtypes = [ctypes.c_void_p]
        lib.seccomp_load.restype = ctypes.c_int
        lib.seccomp_release.argtypes = [ctypes.c_void_p]
        lib.seccomp_release.restype = None
        self._lib = lib
        # Resolve names now: libseccomp's tables are static, but doing it once keeps children lean.
        from app.sandbox.syscalls import ALLOWED

        names = set(ALWAYS_EPERM + ALWAYS_EACCES + ALWAYS_ENOSYS) | ALLOWED | {
            "clone",
            "open",
            "openat",
            "fcntl",
            "ioctl",
            "prctl",
            "personality",
            *(n for n, _ in SELF_ONLY_SIGNALS),
            *(n for n, _ in SELF_OR_ZERO),
        }
        self.numbers = {n: lib.seccomp_syscall_resolve_name(n.encode()) for n in sorted(names)}

        lib.seccomp_export_bpf.argtypes = [ctypes.c_void_p, ctypes.c_int]
        lib.seccomp_export_bpf.restype = ctypes.c_int
        self._libc = ctypes.CDLL(None, use_errno=True)
        self._seccomp_number = lib.seccomp_syscall_resolve_name(b"seccomp")

    def load(self, rules: list[Rule], no_new_privs: bool = True, default: int = ACT_ALLOW) -> int:
        """Install ``rules`` for every thread of this process (TSYNC; no_new_privs unless told, which
        needs CAP_SYS_ADMIN); calls no rule names get ``default``. Returns the number of rules installed."""
        return self._build(rules, no_new_privs, default, self._lib.seccomp_load)[1]

    def compile(self, rules: list[Rule], default: int = ACT_ALLOW) -> tuple[bytes, int]:
        """The BPF program ``load`` would install (``install`` installs it), and its number of rules."""
        with tempfile.TemporaryFile() as out:
            export = self._lib.seccomp_export_bpf
            count = self._build(rules, True, default, lambda ctx: export(ctx, out.fileno()))[1]
            out.seek(0)
            return out.read(), count

    def install(self, program: bytes) -> None:
        """Install a compiled program for every thread (as ``load`` does: no_new_privs must be set)."""
        if not program or len(program) % INSTRUCTION.size or self._seccomp_number < 0:
            raise SeccompError("not a seccomp program")
        buffer = ctypes.create_string_buffer(program, len(program))
        fprog = _SockFprog(len(program) // INSTRUCTION.size, ctypes.addressof(buffer))
        rc = self._libc.syscall(ctypes.c_long(self._seccomp_number), ctypes.c_long(SECCOMP_SET_MODE_FILTER),
                                ctypes.c_long(SECCOMP_FILTER_FLAG_TSYNC), ctypes.byref(fprog))
        if rc != 0:  # -1 and errno, or the id of a thread that could not be synchronised
            code = ctypes.get_errno() if rc < 0 else errno.ESRCH
            raise SeccompError(code, f"seccomp(SET_MODE_FILTER): {errno.errorcode.get(code, code)}")

    def _build(self, rules: list[Rule], no_new_privs: bool, default: int, finish) -> tuple[int, int]:  # noqa: ANN001
        lib = self._lib
        ctx = lib.seccomp_init(default)
        if not ctx:
            raise SeccompError("seccomp_init failed")
        try:
            for attr, value in ((ATTR_CTL_NNP, int(no_new_privs)), (ATTR_CTL_TSYNC, 1)):
                rc = lib.seccomp_attr_set(ctx, attr, value)
                if rc < 0:
                    raise SeccompError(-rc, f"seccomp_attr_set({attr}): {errno.errorcode.get(-rc, rc)}")
            # The syscalls as a binary tree, not a list walked in order: the same rules, the same
            # answers, in a program each child installs faster (the kernel checks it, and presumably
            # emulates it per syscall number for its cache of the always-allowed ones: the tree's
            # paths are short). Both filters' install in a forked child: 651-672 -> 384-408 µs.
            # libseccomp before 2.5 has no such attribute (EINVAL): the program is then the list.
            lib.seccomp_attr_set(ctx, ATTR_CTL_OPTIMIZE, OPTIMIZE_BINARY_TREE)
            count = 0
            for rule in rules:
                number = self.numbers.get(rule.syscall)
                if number is None:
                    number = lib.seccomp_syscall_resolve_name(rule.syscall.encode())
                if number < 0:  # not a syscall on this architecture (e.g. "open" on arm64)
                    continue
                args = (ArgCmp * max(1, len(rule.conditions)))(*[ArgCmp(*c) for c in rule.conditions])
                rc = lib.seccomp_rule_add_array(ctx, rule.action, number, len(rule.conditions), args)
                if rc < 0:
                    raise SeccompError(
                        -rc, f"seccomp rule for {rule.syscall}: {errno.errorcode.get(-rc, rc)}"
                    )
                count += 1
            rc = finish(ctx)
            if rc < 0:
                raise SeccompError(-rc, f"seccomp load or export: {errno.errorcode.get(-rc, rc)}")
            return rc, count
        finally:
            lib.seccomp_release(ctx)


# Stand-ins for a child's pid while the deny-list is compiled ahead (``Filters``): three, so that the
# instructions they fill are told apart from everything else in the program.
_PID_STAND_INS = (0x3ADE0001, 0x3ADE0002, 0x3ADE0003)


class Filters:
    """Both filters compiled once, in the fork server, and installed by each child with one
    ``seccomp()`` call each: compiling them took ~5 ms of a child's ~19 ms of CPU, for every run.

    The deny-list names the child's pid (signals only to itself), known only after the fork: it is
    compiled for stand-in pids and the instructions holding the stand-in are filled with the child's
    pid — only where compiling for different pids changes nothing else, checked here against a
    program compiled for a real pid; otherwise each child compiles its own, as ``Libseccomp.load``
    does."""

    def __init__(self, libseccomp: Libseccomp) -> None:
        self.libseccomp = libseccomp
        self.allow, allowed = libseccomp.compile(allow_rules(), default=ENOSYS)
        programs = [libseccomp.compile(deny_rules(pid)) for pid in _PID_STAND_INS]
        self.deny: bytes | None = programs[0][0]
        self.rules = allowed + programs[0][1]
        self._pid_at = _stand_in_places(programs[0][0], [program for program, _ in programs])
        probe = 4242
        if self._pid_at is None or self.deny_for(probe) != libseccomp.compile(deny_rules(probe))[0]:
            self.deny = None

    def deny_for(self, pid: int) -> bytes:
        """The deny-list program of the process ``pid``."""
        assert self.deny is not None and self._pid_at is not None
        program = bytearray(self.deny)
        for offset in self._pid_at:
            code, jt, jf, _ = INSTRUCTION.unpack_from(program, offset)
            INSTRUCTION.pack_into(program, offset, code, jt, jf, pid)
        return bytes(program)

    def install(self, pid: int) -> int:
        """Install the deny-list of ``pid`` (this process), then the allow-list on top: loading the
        second needs seccomp(), which the allow-list itself does not grant. Returns the rule count."""
        if self.deny is None:
            self.libseccomp.load(deny_rules(pid))
        else:
            self.libseccomp.install(self.deny_for(pid))
        self.libseccomp.install(self.allow)
        return self.rules


def _stand_in_places(template: bytes, programs: list[bytes]) -> list[int] | None:
    """The offsets of the instructions that hold the stand-in pid: every program the same length, and
    differing only in the ``k`` of those instructions, each holding its own stand-in there."""
    if any(len(program) != len(template) or len(program) % INSTRUCTION.size for program in programs):
        return None
    places = []
    for offset in range(0, len(template), INSTRUCTION.size):
        fields = [INSTRUCTION.unpack_from(program, offset) for program in programs]
        if len(set(fields)) == 1:
            continue
        if len({f[:3] for f in fields}) != 1 or [f[3] for f in fields] != list(_PID_STAND_INS):
            return None
        places.append(offset)
    return places or None

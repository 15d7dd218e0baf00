"""The system calls a sandboxed child may make at all: seccomp's allow-list (deny by default).

Two parts, both reviewed by hand:

* ``AUDITED``: what children made for ordinary code, after their filter was in place, in an audit of
  the whole benign corpus (every snippet of the engine, render and diagnostics tests and the gallery,
  the gate's teaching and tutorial snippets with numpy, forward-mode AD, the benchmark snippets):
  ``tests/sandbox/audit_syscalls.py`` (strace of a real pool) regenerates the list to compare.
* ``RUNTIME``: what Python, glibc, OpenMP and torch need on paths the corpus does not reach (a
  signal handler returning, the wall-clock alarm, a sleep, a large ``realloc``, a thread torch starts
  and ends, querying the CPUs), and harmless queries of the process's own state.

Everything else answers ENOSYS (``app.sandbox.seccomp.allow_rules``): in particular the newer forms
of calls the deny-list refuses (``*xattrat``, ``open_tree_attr``, ``file_getattr``/``file_setattr``,
``listmount``/``statmount``, ``lsm_*``, ``mseal``...), inotify (it watches folders Landlock hides),
fanotify, io_uring, namespaces, BPF. Calls listed here may still be refused by argument in the
deny-list filter (``clone`` without CLONE_THREAD, ``openat`` for writing, ``kill`` of another pid,
``prctl`` options...): a call must pass both filters.
"""

from __future__ import annotations

AUDITED = frozenset(
    [
        "arch_prctl", "brk", "close", "exit_group", "futex", "getdents64", "getgid", "getgroups", "getpid",
        "getppid", "getrandom", "getrusage", "getuid", "ioctl", "lseek", "mmap", "munmap", "newfstatat",
        "openat", "prctl", "prlimit64", "read", "rt_sigaction", "setitimer", "write"
    ]
)

RUNTIME = frozenset(
    [
        "rt_sigreturn", "rt_sigprocmask", "rt_sigpending", "rt_sigtimedwait", "rt_sigsuspend",
        "sigaltstack", "restart_syscall", "kill", "tgkill", "getitimer", "alarm", "pause", "nanosleep",
        "clock_nanosleep", "clock_gettime", "clock_getres", "gettimeofday", "time", "times", "mprotect",
        "madvise", "mremap", "mincore", "msync", "clone", "exit", "set_robust_list", "get_robust_list",
        "set_tid_address", "rseq", "gettid", "sched_yield", "membarrier", "futex_waitv",
        "sched_getaffinity", "sched_setaffinity", "sched_getparam", "sched_getscheduler",
        "sched_get_priority_max", "sched_get_priority_min", "getcpu", "get_mempolicy", "open", "stat",
        "lstat", "fstat", "statx", "fstatfs", "statfs", "readlink", "readlinkat", "access", "faccessat",
        "faccessat2", "getcwd", "fcntl", "dup", "dup2", "dup3", "pread64", "readv", "preadv", "writev",
        "pipe", "pipe2", "close_range", "poll", "ppoll", "select", "pselect6", "getrlimit", "setrlimit",
        "uname", "sysinfo", "getpriority", "getpgrp", "getpgid", "getsid", "geteuid", "getegid",
        "getresuid", "getresgid", "capget", "personality",
        # limited to the child itself by the deny-list (pid 0): for another pid a snippet gets EPERM
        "setpriority", "ioprio_get", "ioprio_set", "sched_setscheduler", "sched_setparam",
        "sched_setattr", "sched_getattr",
    ]
)

ALLOWED = AUDITED | RUNTIME

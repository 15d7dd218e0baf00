"""What the OS layers hide from a child even with the gate off (issue #10, 5): the host's network
tables and mounts through /proc/self, directories watched with inotify, the newer syscall forms the
allow-list leaves out. Each is tried by hand in the child; the benign run works after each."""

from __future__ import annotations

import platform

import pytest
from sandbox_support import Server, assert_benign

PROC_FILES = ["net/tcp", "net/tcp6", "net/unix", "net/route", "net/arp", "mountinfo", "mounts", "cgroup",
              "environ", "cmdline", "maps", "mountstats", "net/dev"]

READ_PROC = """\
import os
for name in {names!r}:
    try:
        with open('/proc/self/' + name, 'rb') as f:
            print(name, 'READ', len(f.read()))
    except OSError as e:
        print(name, 'refused', type(e).__name__)
pid = os.getpid()
try:
    print('pid-path', 'READ', len(open(f'/proc/{{pid}}/net/tcp', 'rb').read()))
except OSError as e:
    print('pid-path', 'refused')
print('status', 'ok' if open('/proc/self/status').read() else 'empty')
"""

# inotify and the newer call forms, through libc (the gate off: ctypes is reachable then).
SYSCALLS = """\
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
calls = {'inotify_init1': 294, 'inotify_init': 253, 'fanotify_init': 300, 'setxattrat': 463,
         'getxattrat': 464, 'listxattrat': 465, 'removexattrat': 466, 'open_tree_attr': 467,
         'file_getattr': 468,
         'file_setattr': 469, 'listmount': 458, 'statmount': 457, 'lsm_get_self_attr': 459,
         'lsm_list_modules': 461, 'mseal': 462, 'io_uring_setup': 425}
for name, number in sorted(calls.items()):
    rc = libc.syscall(number, 0, 0, 0, 0, 0)
    print(name, 'ALLOWED' if rc >= 0 else 'refused', ctypes.get_errno())
fd = libc.inotify_init1(0)
print('libc-inotify', 'ALLOWED' if fd >= 0 else 'refused')
"""


def _lines(result: dict) -> list[str]:
    return result["steps"][-1]["stdout"].splitlines() if result["steps"] else []


def test_proc_self_shows_only_what_the_child_needs(ungated_server: Server) -> None:
    result = ungated_server.run(READ_PROC.format(names=PROC_FILES))
    lines = _lines(result)
    assert lines, result
    assert not [line for line in lines if "READ" in line], lines
    assert lines[-1] == "status ok"
    assert_benign(ungated_server)


@pytest.mark.skipif(platform.machine() != "x86_64", reason="x86-64 syscall numbers")
def test_inotify_and_newer_calls_are_refused(ungated_server: Server) -> None:
    result = ungated_server.run(SYSCALLS)
    lines = _lines(result)
    assert len(lines) == 17, result
    assert not [line for line in lines if "ALLOWED" in line], lines
    assert_benign(ungated_server)


def test_the_gate_refuses_the_same_with_a_clear_message(gated_server: Server) -> None:
    result = gated_server.run("import ctypes")
    assert result["error"]["kind"] == "rejected" and "ctypes" in result["error"]["message"]

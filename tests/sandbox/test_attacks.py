"""The attack corpus: hostile snippets through the real HTTP API of a real server.

Every attack runs twice: with the policy gate (a learner-friendly "rejected"), and with the gate
switched off by the test-only setting, where the OS layers alone must hold (seccomp, Landlock, rlimits,
another uid, a clean environment, the wall clock). After each one: the answer keeps the schema, no
secret or privileged data is in it, nothing outlives the request, nothing was written, and a benign
run still gives torch's own answer.
"""

from __future__ import annotations

import glob
import os
import socket
import sysconfig
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from sandbox_support import SECRET, UID_RANGE, Server, assert_benign, assert_no_strays, fork_server_pid, text

from app.config import Settings

Check = Callable[[dict, "Context"], None]
DENIED = ("Permission denied", "Operation not permitted", "[Errno 13]", "[Errno 1]", "not permitted")
MARKER_DIR = Path("/tmp")
SITE_PACKAGES = sysconfig.get_paths()["purelib"]


@dataclass
class Context:
    server: Server
    gate: bool
    listener_port: int
    token: str  # unique per test: names of files an attack tries to create

    @property
    def forker(self) -> int:
        return fork_server_pid(self.server)


@dataclass(frozen=True)
class Attack:
    id: str
    code: str
    check: Check
    gate_rejects: bool = True  # whether the policy gate refuses it (else both modes expect `check`)


# -- checks --------------------------------------------------------------------------------------------


def error_of(result: dict) -> dict:
    assert not result["ok"], result
    assert result["error"] is not None
    return result["error"]


def denied(result: dict, _ctx: Context) -> None:
    error = error_of(result)
    assert any(word in error["message"] for word in DENIED), error


def failed(result: dict, _ctx: Context) -> None:
    error_of(result)


def kind(*kinds: str) -> Check:
    def check(result: dict, _ctx: Context) -> None:
        assert error_of(result)["kind"] in kinds, result["error"]

    return check


def printed(*needles: str) -> Check:
    """The snippet finished and its output shows the refusal (e.g. a return code of -1)."""

    def check(result: dict, _ctx: Context) -> None:
        out = result["steps"][-1]["stdout"] if result["steps"] else ""
        assert any(n in out for n in needles), (out, result["error"])

    return check


def either(*checks: Check) -> Check:
    def check(result: dict, ctx: Context) -> None:
        problems = []
        for candidate in checks:
            try:
                candidate(result, ctx)
                return
            except AssertionError as problem:
                problems.append(problem)
        raise AssertionError(problems)

    return check


def no_file(pattern: str) -> Check:
    def check(_result: dict, ctx: Context) -> None:
        assert not glob.glob(pattern.replace("TOKEN", ctx.token)), pattern

    return check


def all_of(*checks: Check) -> Check:
    def check(result: dict, ctx: Context) -> None:
        for each in checks:
            each(result, ctx)

    return check


def truncated(result: dict, _ctx: Context) -> None:
    steps = len(result["steps"])
    assert result["truncated"] and result["ok"] and steps == Settings().max_steps, result["error"]


def stopped_by_a_limit(result: dict, _ctx: Context) -> None:
    """An endless loop is stopped by the step limit, with exactly that many steps, or, on a machine
    too busy to make them within the 2 s clock, by the time limit with the steps so far. Which one
    comes first is a race this test must not run; the step limit alone is tested where no clock can
    come first (test_pool.py's tight server: 10 steps)."""
    if (result["error"] or {}).get("kind") == "timeout":
        assert_steps(result)
    else:
        truncated(result, _ctx)


def assert_steps(result: dict) -> None:
    assert len(result["steps"]) > 100, len(result["steps"])


def assert_whole(result: dict) -> None:
    assert result["ok"] and not result["truncated"], result["error"]


def truncated_or_timeout(result: dict) -> None:
    assert result["truncated"] or (result["error"] or {}).get("kind") == "timeout", result["error"]


def steps_kept(result: dict, _ctx: Context) -> None:
    assert result["steps"], "the steps recorded before the limit should be kept"


# -- the corpus ---------------------------------------------------------------------------------------

SUBCLASS_WALK = """\
walk = [c for c in ().__class__.__bases__[0].__subclasses__() if c.__name__ == '_wrap_close'][0]
system = walk.__init__.__globals__['system']
print('rc', system('id > /dev/null; echo uid=$(id -u)'))
"""

ATTACKS: list[Attack] = [
    # ---- escapes to the OS --------------------------------------------------------------------
    Attack("dunder-subclass-walk", SUBCLASS_WALK, printed("rc 32512", "rc -1", "rc 256")),
    Attack(
        "fullwidth-dunders",
        "ｏ = ().__ｃｌａｓｓ__.__ｂａｓｅｓ__[0]\nprint(len(ｏ.__ｓｕｂｃｌａｓｓｅｓ__()))\n"
        "g = [c for c in ｏ.__ｓｕｂｃｌａｓｓｅｓ__() if c.__name__ == '_wrap_close']\n"
        "g = g[0].__init__.__globals__\n"
        "print(g['listdir']('/root'))",
        denied,
    ),
    Attack(
        "generator-frame-walk",
        "g = (i for i in [1])\nf = g.gi_frame\nwhile f.f_back is not None:\n"
        "    f = f.f_back\nstack = []\nh = (i for i in [1])\nnext(h)\nimport sys\nf = sys._getframe()\n"
        "while f is not None and 'os' not in f.f_globals:\n    f = f.f_back\n"
        "print('rc', f.f_globals['os'].system('id'))",
        printed("rc 32512", "rc -1"),
    ),
    Attack(
        "traceback-frame-walk",
        "try:\n    1 / 0\nexcept Exception as e:\n    f = e.__traceback__.tb_frame\n"
        "while f is not None and 'os' not in f.f_globals:\n    f = f.f_back\n"
        "print('rc', f.f_globals['os'].system('id'))",
        printed("rc 32512", "rc -1"),
    ),
    Attack(
        "format-string-globals", "print('{0.__globals__[os].environ}'.format(torch.load))", lambda r, c: None
    ),  # prints the child's clean environment at most: the global check finds no secret
    Attack(
        "pickle-reduce",
        "import pickle\nprint('rc', pickle.loads(b\"cos\\nsystem\\n(S'id'\\ntR.\"))",
        printed("rc 32512", "rc -1"),
    ),
    Attack(
        "torch-load-pickle",
        "import io, pickle, os\nclass P:\n    def __reduce__(self):\n"
        "        return (os.system, ('id',))\nb = io.BytesIO()\ntorch.save(P(), b)\nb.seek(0)\n"
        "print('rc', torch.load(b, weights_only=False))",
        printed("rc 32512", "rc -1"),
    ),
    Attack(
        "decorator-exec",
        "@exec\n@(lambda f: \"import os\\nprint('rc', os.system('id'))\")\ndef f():\n    pass",
        printed("rc 32512", "rc -1"),
    ),
    Attack("torch-os-system", "print('rc', torch.os.system('id'))", printed("rc 32512", "rc -1")),
    Attack("torch-os-execv", "torch.os.execv('/bin/sh', ['sh', '-c', 'id'])", denied),
    Attack(
        "torch-ctypes-system",
        "print('rc', torch.ctypes.CDLL(None).system(b'id'))",
        printed("rc -1", "rc 32512"),
    ),
    Attack("torch-builtins-open", "print(torch.builtins.open('/etc/passwd').read())", denied),
    Attack("torch-importlib-socket", "s = torch.importlib.import_module('socket').socket()", denied),
    Attack("torch-sys-modules", "print(torch.sys.modules['os'].listdir('/root'))", denied),
    Attack("torch-hub", "torch.hub.load('pytorch/vision', 'resnet18')", failed),
    Attack(
        "torch-cpp-extension",
        "from torch.utils.cpp_extension import load_inline\nload_inline('x', 'int f() { return 1; }')",
        failed,
    ),
    Attack(
        "torch-compile-cache",
        "f = torch.compile(lambda t: t * 2 + 1)\nprint(f(torch.ones(3)))",
        lambda r, c: None,
    ),  # compiled or not: the global checks find no file the child wrote
    Attack("torch-jit-load", "torch.jit.load('/etc/passwd')", failed),
    Attack("torch-ops-load-library", "torch.ops.load_library('/work/main/app/__init__.py')", failed),
    Attack(
        "torch-library-override",
        "lib = torch.library.Library('aten', 'IMPL')\n"
        "lib.impl('mul.Tensor', lambda a, b: a, 'CPU')\nprint((torch.ones(2) * 5).tolist())",
        lambda r, c: None,
    ),  # may work in its own process; the benign run after it proves no leak
    Attack("torch-multiprocessing", "p = torch.multiprocessing.Process(target=print)\np.start()", failed),
    Attack("torch-distributed-store", "torch.distributed.TCPStore('127.0.0.1', LISTENER, 1, True)", failed),
    Attack(
        "torch-from-file-read", "print(torch.from_file('/etc/shadow', size=16, dtype=torch.uint8))", failed
    ),
    Attack(
        "torch-from-file-create",
        "torch.from_file('/tmp/explorer-TOKEN', shared=True, size=64)",
        all_of(failed, no_file("/tmp/explorer-TOKEN")),
    ),
    Attack(
        "torch-save",
        "torch.save(torch.ones(2), '/tmp/explorer-TOKEN.pt')",
        all_of(failed, no_file("/tmp/explorer-TOKEN.pt")),
    ),
    # ---- secrets and other processes -------------------------------------------------------------
    Attack(
        "environ-secret",
        "import os\nprint(dict(os.environ))\nprint(os.environ.get('EXPLORER_TEST_SECRET'))",
        printed("None"),
    ),
    Attack("proc-self-environ", "print(open('/proc/self/environ', 'rb').read())", denied),
    Attack("server-environ", "print(open('/proc/SERVER_PID/environ', 'rb').read())", denied),
    Attack("fork-server-environ", "print(open('/proc/FORKER_PID/environ', 'rb').read())", denied),
    Attack("server-cmdline-and-maps", "print(open('/proc/SERVER_PID/maps').read())", denied),
    Attack(
        "server-memory-read",
        "import ctypes\nbuf = ctypes.create_string_buffer(16)\n"
        "local = (ctypes.c_void_p * 2)(ctypes.addressof(buf), 16)\nremote = (ctypes.c_void_p * 2)(4096, 16)\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "print('rc', libc.process_vm_readv(SERVER_PID, local, 1, remote, 1, 0), ctypes.get_errno())",
        printed("rc -1 1"),
    ),
    Attack(
        "ptrace-server",
        "import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\n"
        "print('rc', libc.ptrace(16, SERVER_PID, 0, 0), ctypes.get_errno())",
        printed("rc -1 1"),
    ),
    Attack("etc-shadow", "print(open('/etc/shadow').read())", denied),
    Attack("root-home", "import os\nprint(os.listdir('/root'))", denied),
    Attack("app-source", "print(open('/work/main/app/config.py').read())", denied),
    Attack("world-readable-outside-allowlist", "print(open('/etc/passwd').read())", denied),
    Attack("proc-other-pid", "print(open('/proc/1/status').read())", denied),
    # ---- writing files ----------------------------------------------------------------------------
    Attack(
        "write-tmp",
        "open('/tmp/explorer-TOKEN', 'w').write('x')",
        all_of(denied, no_file("/tmp/explorer-TOKEN")),
    ),
    Attack(
        "write-pth",
        f"open('{SITE_PACKAGES}/explorer-TOKEN.pth', 'w').write('import os')",
        all_of(denied, no_file(f"{SITE_PACKAGES}/explorer-TOKEN.pth")),
    ),
    Attack("symlink-cwd", "import os\nos.symlink('/etc/passwd', 'link-TOKEN')", denied),
    Attack(
        "symlink-tmp",
        "import os\nos.symlink('/etc/shadow', '/tmp/explorer-TOKEN')",
        all_of(denied, no_file("/tmp/explorer-TOKEN")),
    ),
    Attack(
        "raw-open-create",
        "import os\nos.open('/tmp/explorer-TOKEN', os.O_WRONLY | os.O_CREAT)",
        all_of(denied, no_file("/tmp/explorer-TOKEN")),
    ),
    Attack(
        "mkdir-rename-unlink",
        "import os\nos.mkdir('/tmp/explorer-TOKEN')",
        all_of(denied, no_file("/tmp/explorer-TOKEN")),
    ),
    Attack("memfd", "import os\nos.memfd_create('x')", denied),
    # ---- network ----------------------------------------------------------------------------------
    Attack(
        "connect-listener", "import socket\ns = socket.socket()\ns.connect(('127.0.0.1', LISTENER))", denied
    ),
    Attack(
        "connect-server-port",
        "import socket\ns = socket.create_connection(('127.0.0.1', SERVER_PORT))\n"
        "s.send(b'GET /healthz HTTP/1.0\\r\\n\\r\\n')\nprint(s.recv(100))",
        denied,
    ),
    Attack(
        "urllib-server",
        "import urllib.request\nprint(urllib.request.urlopen('http://127.0.0.1:SERVER_PORT/healthz'))",
        failed,
    ),
    Attack(
        "udp-send",
        "import socket\nudp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
        "udp.sendto(b'x', ('127.0.0.1', LISTENER))",
        denied,
    ),
    Attack(
        "raw-socket-syscall",
        "import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\n"
        "print('rc', libc.syscall(41, 2, 1, 0), ctypes.get_errno())",
        printed("rc -1 1"),
    ),
    # ---- processes -----------------------------------------------------------------------------------
    Attack("fork-bomb", "import os\nwhile True:\n    os.fork()", denied),
    Attack(
        "subprocess-orphan",
        "import subprocess\nsubprocess.Popen(['sleep', '100'], start_new_session=True)",
        denied,
    ),
    Attack("posix-spawn", "import os\nos.posix_spawn('/bin/sleep', ['sleep', '100'], {})", denied),
    Attack("os-system", "import os\nprint('rc', os.system('sleep 100 &'))", printed("rc 32512", "rc -1")),
    Attack("kill-server", "import os, signal\nos.kill(SERVER_PID, signal.SIGKILL)", denied),
    Attack("kill-fork-server", "import os, signal\nos.kill(FORKER_PID, signal.SIGKILL)", denied),
    Attack("kill-everyone", "import os, signal\nos.kill(-1, signal.SIGKILL)", denied),
    Attack("kill-process-group", "import os, signal\nos.killpg(0, signal.SIGKILL)", denied),
    Attack(
        "unshare-userns",
        "import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\n"
        "print('rc', libc.unshare(0x10000000), ctypes.get_errno())",
        printed("rc -1 1"),
    ),
    Attack(
        "become-dumpable",
        "import ctypes\nprint('rc', ctypes.CDLL(None).prctl(4, 1, 0, 0, 0))",
        printed("rc -1"),
    ),
    Attack(
        "sysv-shm-channel",
        "import ctypes\nprint('rc', ctypes.CDLL(None).shmget(0x5eed, 4096, 0o1666))",
        printed("rc -1"),
    ),
    Attack(
        "thread-bomb",
        "import threading, time\nts = []\nfor i in range(5000):\n"
        "    t = threading.Thread(target=time.sleep, args=(30,))\n    t.start()\n    ts.append(t)",
        either(kind("runtime", "memory", "timeout")),
    ),
    # ---- exhaustion ---------------------------------------------------------------------------------
    Attack("bytearray-2g", "x = bytearray(2 ** 31)", kind("memory"), gate_rejects=False),
    Attack("huge-tensor", "x = torch.empty(10 ** 11)", kind("memory"), gate_rejects=False),
    # The memory limit is on memory reserved, so tensors that are never written reach it at once.
    Attack(
        "growing-tensors",
        "keep = []\nwhile True:\n    keep.append(torch.empty(2 ** 24))",
        all_of(kind("memory"), steps_kept),
        gate_rejects=False,
    ),
    # Filled tensors touch every page first, and on a fresh VM that is slow (0.35-1.1 s per 256 MiB
    # seen on these machines): which limit stops the run, memory or the 2 s clock, depends on the host.
    Attack(
        "growing-filled-tensors",
        "keep = []\nwhile True:\n    keep.append(torch.ones(2 ** 24))",
        all_of(kind("memory", "timeout"), steps_kept),
        gate_rejects=False,
    ),
    Attack(
        "shared-mmap",
        "import mmap\nm = mmap.mmap(-1, 2 ** 32)\nfor i in range(0, 2 ** 32, 4096):\n    m[i] = 1",
        kind("memory", "runtime"),
    ),
    Attack(
        "cpu-loop",
        "n = 0\nn = sum(i for i in range(10 ** 12))",
        all_of(kind("timeout"), steps_kept),
        gate_rejects=False,
    ),
    Attack("native-loop", "n = sum(range(10 ** 13))", kind("timeout"), gate_rejects=False),
    Attack("step-loop", "n = 0\nwhile True:\n    n += 1", stopped_by_a_limit, gate_rejects=False),
    Attack(
        "catch-everything-loop",
        "while True:\n    try:\n        while True:\n            pass\n"
        "    except BaseException:\n        pass",
        kind("timeout"),
        gate_rejects=False,
    ),
    Attack(
        # it swallows the stop at the step limit (raised again at each line, until one lands outside
        # the try), or every alarm after the wall limit (then the child answers by itself with the
        # steps it has, before the server's kill would lose them): the steps are kept either way
        "catch-everything-counting-loop",
        "n = 0\nwhile True:\n    try:\n        n += 1\n    except BaseException:\n        pass",
        lambda r, c: (truncated_or_timeout(r), assert_steps(r)),
        gate_rejects=False,
    ),
    Attack(
        # no line events to stop it in: only the alarms, which it swallows, so the child answers itself
        "catch-everything-after-steps",
        "for i in range(200):\n    x = i\nwhile True:\n    try:\n        while True:\n            pass\n"
        "    except BaseException:\n        pass",
        lambda r, c: (kind("timeout")(r, c), assert_steps(r)),
        gate_rejects=False,
    ),
    # (time is importable: tutorials time their loops)
    Attack("sleep", "import time\ntime.sleep(60)", kind("timeout"), gate_rejects=False),
    Attack(
        "native-matmul",
        "a = torch.randn(3000, 3000)\nfor i in range(1000):\n    a = a @ a",
        kind("timeout"),
        gate_rejects=False,
    ),
    Attack(
        "print-flood",
        "while True:\n    print('x' * 1000)",
        all_of(kind("output"), steps_kept),
        gate_rejects=False,
    ),
    Attack("stderr-flood", "import sys\nwhile True:\n    sys.stderr.write('y' * 10000)", kind("output")),
    Attack(
        "result-fd-flood",
        "import os\nfor fd in map(int, os.listdir('/proc/self/fd')):\n    try:\n"
        "        if os.readlink(f'/proc/self/fd/{fd}').startswith('pipe:'):\n"
        "            while True:\n                os.write(fd, b'x' * 65536)\n"
        "    except OSError:\n        pass",
        kind("output", "internal", "timeout"),
    ),
    Attack(
        "forged-frame",
        "import os, struct, json\nbody = json.dumps({'ok': True, 'steps': []}).encode()\n"
        "for fd in map(int, os.listdir('/proc/self/fd')):\n    try:\n"
        "        os.write(fd, struct.pack('>I', len(body)) + body)\n    except OSError:\n        pass\n"
        "os._exit(0)",
        lambda r, c: None,
    ),  # a forged answer can only fool its own sender
    Attack("deep-recursion", "def f(n):\n    return f(n + 1)\nf(0)", kind("runtime"), gate_rejects=False),
    Attack(
        "recursion-limit-segfault",
        "import sys\nsys.setrecursionlimit(10 ** 7)\ndef f(n):\n    return f(n + 1)\nf(0)",
        kind("runtime", "memory", "timeout"),
    ),
    Attack("huge-int", "x = 7 ** (10 ** 9)", kind("timeout", "memory"), gate_rejects=False),
    Attack("huge-int-str", "print(str(10 ** 100000))", kind("runtime"), gate_rejects=False),
    Attack(
        "huge-graph-loop",
        "x = torch.ones(1, requires_grad=True)\nfor i in range(10 ** 6):\n    x = x * 1.0001",
        lambda r, c: truncated_or_timeout(r),
        gate_rejects=False,
    ),
    Attack(
        "huge-graph-one-line",
        "x = torch.ones(1, requires_grad=True)\nys = [x := x * 1.0001 for _ in range(300000)]",
        lambda r, c: None,
        gate_rejects=False,
    ),
    Attack(
        # v1 repeats all 400 tensors at each of the 401 steps (~90 MiB, answered 413); the delta
        # format carries each step's one write: the whole run, cheaply
        "huge-trace",
        "xs = [torch.ones(64) for _ in range(400)]\nfor i in range(200):\n    xs[i].add_(1)",
        lambda r, c: assert_whole(r),
        gate_rejects=False,
    ),
    Attack("parser-bomb", "x = " + "(" * 5000 + "1" + ")" * 5000, kind("rejected"), gate_rejects=False),
    Attack("null-byte", "x = 1\x00", kind("rejected"), gate_rejects=False),
    # ---- leaks into the next run (checked by the benign run after each) -------------------------
    Attack(
        "monkeypatch-torch",
        "torch.Tensor.backward = lambda *a, **k: None\ntorch.add = None\nmath.pi = 3",
        lambda r, c: None,
    ),
    Attack(
        "global-default-dtype",
        "torch.set_default_dtype(torch.float64)\ntorch.set_grad_enabled(False)\n"
        "torch.manual_seed(1234)\nprint(torch.ones(1).dtype)",
        printed("float64"),
        gate_rejects=False,
    ),
    Attack(
        "sys-modules-poison",
        "import sys\nsys.modules['torch.nn'] = None\nsys.modules['math'] = None",
        lambda r, c: None,
    ),
    Attack("abort-crash", "import os\nos.abort()", kind("runtime")),
    Attack("segfault-crash", "import ctypes\nctypes.string_at(0)", kind("runtime")),
]


def sandbox_owned(folder: str) -> list[str]:
    """Entries of ``folder`` owned by a sandbox uid: a child that managed to create something."""
    found = []
    for entry in os.scandir(folder):
        try:
            if entry.stat(follow_symlinks=False).st_uid in UID_RANGE:
                found.append(entry.path)
        except OSError:
            pass
    return found


def _code(attack: Attack, ctx: Context) -> str:
    code = attack.code.replace("TOKEN", ctx.token).replace("LISTENER", str(ctx.listener_port))
    code = code.replace("SERVER_PORT", str(ctx.server.port)).replace("SERVER_PID", str(ctx.server.pid))
    if "FORKER_PID" in code:
        code = code.replace("FORKER_PID", str(ctx.forker))
    return code


@pytest.mark.parametrize("attack", ATTACKS, ids=[a.id for a in ATTACKS])
def test_attack_is_contained(attack: Attack, server: Server, listener: socket.socket) -> None:
    ctx = Context(server, server.gate, listener.getsockname()[1], uuid.uuid4().hex[:12])
    result = server.run(_code(attack, ctx))

    if server.gate and attack.gate_rejects:
        error = error_of(result)
        assert error["kind"] == "rejected", error
        assert "not available in the playground" in error["message"], error
        assert error["line"] is not None
    else:
        attack.check(result, ctx)

    body = text(result)
    for leaked in (SECRET, "uid=0", "uid=", "root:x:0:0", "EXPLORER_"):
        assert leaked not in body, leaked
    with pytest.raises(BlockingIOError):
        listener.accept()  # nobody knocked
    assert not glob.glob(f"/tmp/*{ctx.token}*") and not glob.glob(f"{SITE_PACKAGES}/*{ctx.token}*")
    assert not sandbox_owned("/tmp") and not sandbox_owned(SITE_PACKAGES)
    assert_no_strays(server)
    assert_benign(server)


def test_corpus_is_large_enough() -> None:
    assert len(ATTACKS) >= 50
    assert len({a.id for a in ATTACKS}) == len(ATTACKS)


def test_uid_and_layers_in_a_real_child(ungated_server: Server) -> None:
    """Seen from inside a child (the gate would refuse `open`): its identity and the kernel's view."""
    result = ungated_server.run(
        "s = open('/proc/self/status').read()\nimport os\n"
        "print(os.getuid(), os.getgroups(), os.listdir('.'), len(os.listdir('/proc/self/fd')))\n"
        "print([l for l in s.splitlines() if l.split(':')[0] in "
        "('Seccomp', 'NoNewPrivs', 'CapEff', 'CapPrm', 'Threads')])"
    )
    out = result["steps"][-1]["stdout"]
    uid = int(out.split()[0])
    if os.geteuid() == 0:
        assert uid in UID_RANGE
    assert "[] [] " in out  # no supplementary groups, an empty working directory
    assert "'Seccomp:\\t2'" in out and "'NoNewPrivs:\\t1'" in out
    assert "'CapEff:\\t0000000000000000'" in out and "'CapPrm:\\t0000000000000000'" in out

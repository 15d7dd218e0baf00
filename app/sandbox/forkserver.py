"""The fork server: a small single-threaded process that imported torch once and forks one child per run.

Started by the pool (``app.sandbox.pool``) with a minimal environment (no server variables: a child's
``/proc/self/environ`` shows the environment this process was *exec*'d with), talks to it over one
``SOCK_SEQPACKET`` socket, one JSON message per packet:

    server -> here:  {"op": "config", ...ChildConfig..., "app_root": str}   (first message)
                     {"op": "spawn"}                 fork a child ahead of demand
                     {"op": "kill", "pid": n}        SIGKILL one of our children (no pid-reuse race:
                                                     only we reap them)
    here -> server:  {"op": "hello", "pid": n, "landlock_abi": n, ...}       once, when ready to fork
                     {"op": "ready", "pid": n, "uid": n}  + the child's job-write and result-read fds
                     {"op": "exit", "pid": n, "status": n, "cpu": s}
                     {"op": "error", "message": str}

It exits, killing its children, when the server's end of the socket closes (the server died or let
go). Children die with it (``PR_SET_PDEATHSIG``).
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
import select
import shutil
import signal
import socket
import sys
import tempfile

MAX_MESSAGE = 1 << 16
MADV_HUGEPAGE, MADV_COLLAPSE = 14, 25
UID_BLOCK, UID_BLOCKS = 64, 64  # children use uid_base .. uid_base + 4095 (below nobody, 65534)


def _preload() -> None:
    """Import everything a child may need: a child cannot read most files (Landlock, other uid)."""
    # Encodings, stdlib and torch submodules that snippets and the engine reach lazily.
    import collections  # noqa: F401
    import encodings.ascii  # noqa: F401
    import encodings.idna  # noqa: F401
    import encodings.latin_1  # noqa: F401
    import encodings.utf_16  # noqa: F401
    import encodings.utf_32  # noqa: F401
    import errno  # noqa: F401
    import itertools  # noqa: F401
    import linecache  # noqa: F401
    import math  # noqa: F401
    import random  # noqa: F401
    import string  # noqa: F401
    import traceback  # noqa: F401
    import warnings  # noqa: F401

    import torch

    torch.set_num_threads(1)
    torch.set_num_interop_threads(1)
    # The first optimizer step imports torch._dynamo (800 modules, about 2 s): pay that once, here.
    import torch._dynamo  # noqa: F401
    import torch.autograd.functional  # noqa: F401
    import torch.autograd.graph  # noqa: F401
    import torch.distributions  # noqa: F401
    import torch.fft  # noqa: F401
    import torch.func  # noqa: F401
    import torch.linalg  # noqa: F401
    import torch.nn.functional  # noqa: F401
    import torch.nn.init  # noqa: F401
    import torch.optim  # noqa: F401
    import torch.special  # noqa: F401

    import app.engine  # noqa: F401
    import app.policy  # noqa: F401
    import app.policy_builtins  # noqa: F401
    import app.sandbox.child  # noqa: F401

    _preload_tutorial_modules()


def _preload_tutorial_modules() -> None:
    """Every module a snippet may import or walk to (``app.policy_names``: what real tutorial code
    imports), and the parts of numpy its C code imports lazily."""
    import importlib

    from app.policy_names import WALKABLE_MODULES

    for name in sorted(WALKABLE_MODULES):
        importlib.import_module(name)
    import numpy._core._methods  # noqa: F401 - imported by numpy's C code on the first reduction


def landlock_paths(app_root: str) -> list[str]:
    """What a child may read: Python's own directories, system libraries, a few device/proc files.

    The directory holding the ``app`` package (the server's files: the repository) is left out. When
    the app is installed into site-packages, that directory's other entries are allowed one by one;
    when an allowed directory is an ancestor of the app, its other entries are.
    """
    app_root = os.path.realpath(app_root)
    installed = os.path.basename(app_root) in ("site-packages", "dist-packages")
    paths: list[str] = []
    for entry in sys.path:
        if not entry or not os.path.isdir(entry):
            continue
        real = os.path.realpath(entry)
        if real == app_root:
            if installed:
                paths += [os.path.join(real, name) for name in os.listdir(real) if name != "app"]
        elif app_root.startswith(real + os.sep):
            paths += [
                os.path.join(real, name)
                for name in os.listdir(real)
                if not (app_root + os.sep).startswith(os.path.join(real, name) + os.sep)
            ]
        else:
            paths.append(real)
    paths += [
        "/usr/lib",
        "/usr/lib64",
        "/lib",
        "/lib64",
        "/usr/local/lib",
        "/etc/ld.so.cache",
        "/etc/localtime",
        "/usr/share/zoneinfo",
        # Of /proc/self only what Python, glibc and the sandbox read (an audit: tests/sandbox/
        # audit_syscalls.py): not net/* (the host's ports and connections), mountinfo, cgroup, environ...
        "/proc/self/status",
        "/proc/self/stat",
        "/proc/self/statm",
        "/proc/self/fd",
        "/proc/cpuinfo",
        "/sys/devices/system/cpu",
        "/dev/urandom",
        "/dev/random",
        "/dev/zero",
    ]
    seen: set[str] = set()
    return [p for p in paths if not (p in seen or seen.add(p))]  # type: ignore[func-returns-value]


FORWARD_AD_WARM_UP = """\
import torch.autograd.forward_ad as fwAD
from torch.func import jvp
with fwAD.dual_level():
    d = fwAD.make_dual(torch.ones(2), torch.ones(2))
    t = fwAD.unpack_dual(d.sin()).tangent
out, tangent = jvp(torch.sin, (torch.ones(2),), (torch.ones(2),))
"""


# The layers, losses and optimizers real training code runs (convolution, batch norm, pooling, a
# DataLoader, recurrent layers with carried state, attention, embeddings, Adam/AdamW/SGD with momentum,
# gradient clipping, a scheduler): their first call pays for torch's and the engine's lazy set-up
# (kernel choices, per-type caches). Paid here, once, not by every child that runs such code.
MODEL_WARM_UP = """\
from torch.utils.data import DataLoader, TensorDataset
images, labels = torch.randn(8, 1, 6, 6), torch.randint(0, 3, (8,))
loader = DataLoader(TensorDataset(images, labels), batch_size=4, shuffle=True)
cnn = nn.Sequential(nn.Conv2d(1, 2, 3, padding=1), nn.BatchNorm2d(2), nn.ReLU(), nn.MaxPool2d(2),
                    nn.Flatten(), nn.Dropout(0.1), nn.Linear(18, 3))
opt = torch.optim.SGD(cnn.parameters(), lr=0.1, momentum=0.9)
sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1)
for xb, yb in loader:
    opt.zero_grad()
    loss = F.cross_entropy(cnn(xb), yb)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(cnn.parameters(), 1.0)
    opt.step()
    sched.step()
cnn.eval()
with torch.no_grad():
    cnn(images)
lstm, gru = nn.LSTM(3, 4, batch_first=True), nn.GRU(3, 4)
emb, norm = nn.Embedding(5, 3), nn.LayerNorm(3)
attention = nn.MultiheadAttention(4, 2, batch_first=True)
head = nn.Sequential(nn.Linear(4, 4), nn.GELU(), nn.Tanh(), nn.Sigmoid())
params = [*lstm.parameters(), *gru.parameters(), *emb.parameters(), *norm.parameters(),
          *attention.parameters(), *head.parameters()]
for make in (torch.optim.Adam, torch.optim.AdamW):
    opt = make(params, lr=0.01)
    x = norm(emb(torch.tensor([[1, 2, 3]])))
    out, state = lstm(x)
    out, state = lstm(x, tuple(s.detach() for s in state))
    seq, h = gru(x.transpose(0, 1))
    mixed, weights = attention(out, out, out)
    loss = head(mixed).softmax(-1).sum() + F.mse_loss(seq, torch.zeros_like(seq)) + h.exp().mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
"""


def _keep_sources() -> None:
    """Mark the source lines ``linecache`` holds as not backed by a file (mtime None): a child's
    ``inspect.getsource`` then uses them instead of statting files it may not reach."""
    import linecache

    for name, entry in list(linecache.cache.items()):
        if len(entry) == 4:
            size, _mtime, lines, fullname = entry
            linecache.cache[name] = (size, None, lines, fullname)


class ServerGone(Exception):
    """The server's end of the control socket is closed: time to go."""


def collapse_huge_pages() -> int:
    """Back the heap with transparent huge pages; returns MiB so backed (0 where the kernel says no).

    ``fork`` copies one page-table entry per 4 KiB page of private memory: about 5 ms for the 200 MiB
    that torch, the engine and torch._dynamo leave here. With 2 MiB pages it copies one entry per
    2 MiB (measured: 5.0 -> 1.1 ms per fork, and a child's CPU 14 -> 9 ms: a write after the fork
    splits the huge page and copies 4 KiB, not 2 MiB). MADV_COLLAPSE needs Linux 6.1; best effort.
    """
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    huge = 2 << 20
    with open("/proc/self/maps", encoding="ascii") as maps:
        regions = [line.split() for line in maps]
    for fields in regions:
        anonymous = len(fields) < 6 or fields[5] == "[heap]"
        if not anonymous or "w" not in fields[1]:
            continue
        start, end = (int(x, 16) for x in fields[0].split("-"))
        start, end = (start + huge - 1) // huge * huge, end // huge * huge
        if end - start >= huge:
            libc.madvise(start, end - start, MADV_HUGEPAGE)
            libc.madvise(start, end - start, MADV_COLLAPSE)
    with open("/proc/self/smaps_rollup", encoding="ascii") as rollup:
        kib = next((int(line.split()[1]) for line in rollup if line.startswith("AnonHugePages:")), 0)
    return kib // 1024


def _no_handler_locks_renewed_after_fork() -> None:
    """Take the logging handlers (38 here, most made by torch's imports) off the list whose locks
    ``logging`` renews in every forked child: a lock is renewed in case another thread held it at the
    fork, and this process forks with one thread, so none can be held. Renewing them was ~75 pages
    copied and ~0.2 ms of CPU in every child, before its layers (child's rusage at the start of
    ``serve_one``, min of 60 forks: 339 -> 265 page faults, 1.20 -> 0.98 ms). A handler made later (in a
    child, by a snippet) is listed and renewed as usual."""
    import logging

    renewed = getattr(logging, "_at_fork_reinit_lock_weakset", None)  # CPython's logging, 3.9+
    if renewed is not None:
        renewed.clear()


def _threads() -> int:
    with open("/proc/self/status", encoding="ascii") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("Threads:"))


class ForkServer:
    def __init__(self, control: socket.socket, config: dict) -> None:
        from app.sandbox.layers import ChildConfig
        from app.sandbox.seccomp import Filters, Libseccomp

        self.control = control
        self.pid = os.getpid()
        self.filters = Filters(Libseccomp())
        app_root = config.pop("app_root")
        self.workdir = tempfile.mkdtemp(prefix="explorer-run-")
        os.chmod(self.workdir, 0o555)
        fields = {
            k: v
            for k, v in config.items()
            if k in ChildConfig.__dataclass_fields__ and k not in ("read_paths", "workdir")
        }
        self.config = ChildConfig(**fields, read_paths=landlock_paths(app_root), workdir=self.workdir)
        self.children: set[int] = set()
        self.spawned = 0
        self.wake_r, self.wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)

    def send(self, message: dict, fds: list[int] | None = None) -> None:
        data = json.dumps(message).encode()
        try:
            if fds:
                socket.send_fds(self.control, [data], fds)
            else:
                self.control.send(data)
        except OSError:
            raise ServerGone from None

    def spawn(self, warm: bool = True) -> None:
        from app.sandbox import child

        uid = None
        if self.config.uid_base is not None:
            # A different uid for every live child (at most a handful live at once), and a block per
            # fork server so that several servers on one host (uvicorn --workers) rarely share one.
            uid = self.config.uid_base + (self.pid % UID_BLOCKS) * UID_BLOCK + self.spawned % UID_BLOCK
        self.spawned += 1
        job_r, job_w = os.pipe()
        result_r, result_w = os.pipe()
        try:
            pid = os.fork()
        except OSError as error:
            for fd in (job_r, job_w, result_r, result_w):
                os.close(fd)
            self.send({"op": "error", "message": f"fork failed: {error}"})
            return
        if pid == 0:  # the child: never returns
            try:
                self.control.detach()
                child.serve_one(job_r, result_w, self.config, uid, self.pid, self.filters, warm)
            finally:
                os._exit(child.EXIT_SETUP_FAILED)
        os.close(job_r)
        os.close(result_w)
        self.children.add(pid)
        try:
            self.send({"op": "ready", "pid": pid, "uid": uid}, [job_w, result_r])
        finally:
            os.close(job_w)
            os.close(result_r)

    def reap(self) -> None:
        while self.children:
            try:
                pid, status, usage = os.wait4(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            self.children.discard(pid)
            self.send({"op": "exit", "pid": pid, "status": status, "cpu": usage.ru_utime + usage.ru_stime})

    def handle(self, message: dict) -> None:
        op = message.get("op")
        if op == "spawn":
            self.spawn(message.get("warm") is not False)
        elif op == "kill":
            pid = int(message["pid"])
            if pid in self.children:
                os.kill(pid, signal.SIGKILL)

    def serve(self) -> None:
        signal.set_wakeup_fd(self.wake_w)
        signal.signal(signal.SIGCHLD, lambda *_: None)
        poller = select.poll()
        poller.register(self.control.fileno(), select.POLLIN)
        poller.register(self.wake_r, select.POLLIN)
        while True:
            for fd, _events in poller.poll():
                if fd == self.wake_r:
                    try:
                        while os.read(self.wake_r, 512):
                            pass
                    except BlockingIOError:
                        pass
                    self.reap()
                    continue
                data = self.control.recv(MAX_MESSAGE)
                if not data:
                    return
                self.handle(json.loads(data))
            self.reap()

    def shutdown(self) -> None:
        for pid in list(self.children):
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        for pid in list(self.children):
            with contextlib.suppress(OSError):
                os.waitpid(pid, 0)
        shutil.rmtree(self.workdir, ignore_errors=True)


def prepare() -> int:
    """Make this process what children are forked from: everything imported, the engine run (lazy
    initialisation done once, in pages every child shares), one thread, the heap on huge pages and
    collected. Returns the MiB on huge pages. (``python -m app.bench engine`` forks its fresh children
    from a process prepared so too: what a run pays for the paths this has not warmed.)"""
    _preload()
    # Run the engine twice here, before any fork: lazy initialisation (dispatch tables, autograd, the
    # engine's own code paths) then happens once, in pages every child shares, instead of in each
    # child. Measured: torch keeps one thread after this (set_num_threads(1), OMP_NUM_THREADS=1),
    # so forking stays safe; the child's own run is 1.5x-2x faster for it.
    from app.sandbox.child import CHILD_WARM_UP, warm_up

    warm_up()
    warm_up()
    # Forward-mode AD and torch.func.jvp compile a TorchScript helper on first use, which reads the
    # standard library's source (enum.py): a child may not be able to (another uid under /root, or
    # Landlock). Do it here, once, and keep every source read so far for the children.
    warm_up(FORWARD_AD_WARM_UP)
    warm_up(MODEL_WARM_UP, max_steps=1000)
    # Last, what a child runs itself (and a small run is like): what is left in the interpreter's
    # caches when it forks (the type attribute cache, among others) is then what a small run looks up,
    # not the model warm-up's, and each child rewrites less of it. Measured at concurrency 4, page
    # copies per child 1,905 / 1,923 against 1,978 / 1,952.
    warm_up(CHILD_WARM_UP)
    _keep_sources()
    if _threads() != 1:
        raise RuntimeError("torch started threads during the warm-up; forking would not be safe")
    _no_handler_locks_renewed_after_fork()
    huge = collapse_huge_pages()
    # A clean heap to fork from. Not gc.freeze(): the engine freezes around each run itself, and
    # counting an already frozen heap (gc.get_freeze_count) walks every object, about 15 ms per run.
    # Full collections do not happen in a child anyway: the import made the long-lived generation
    # so large that a run never allocates the quarter of it that would trigger one.
    gc.collect()
    return huge


def main(control_fd: int) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the server decides when we stop
    control = socket.socket(fileno=control_fd)
    config = json.loads(control.recv(MAX_MESSAGE))
    huge = prepare()
    from app.sandbox import landlock

    server = ForkServer(control, config)
    try:
        server.send(
            {
                "op": "hello",
                "pid": server.pid,
                "landlock_abi": landlock.abi_version(),
                "read_paths": server.config.read_paths,
                "euid": os.geteuid(),
                "huge_page_mib": huge,
                "workdir": server.workdir,
            }
        )
        server.serve()
    except ServerGone:
        pass
    finally:
        server.shutdown()
    # Gone without finalising the interpreter: nothing here is left to flush, and finalising collects
    # and frees the whole heap torch and the warm-ups made (~0.8 s of CPU and ~2 s of wall per fork
    # server, past the 3 s the pool waits on a busy machine before it kills it).
    os._exit(0)

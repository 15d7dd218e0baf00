"""A cluster on one machine, on loopback: Debian's ``redis-server`` and ``haproxy`` and N replicas
(``python -m app serve``, the real sandbox). The cluster tests (tests/cluster) and ``python -m app.bench
cluster`` both build theirs with it.

Addresses: the proxy connects to the replicas from ``PROXY_SOURCE`` (127.0.0.5), the one address the
replicas trust for ``X-Forwarded-For``; a test plays different clients by connecting from other
loopback addresses (``client(address)``), the whole 127.0.0.0/8 being the loopback interface.
"""

from __future__ import annotations

import contextlib
import csv
import io
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import httpx

from app.serving import loopback_socket

ROOT = Path(__file__).resolve().parents[2]
PROXY_SOURCE = "127.0.0.5"
START_SECONDS = 180.0  # a replica imports torch in its fork server: slow on a busy 2-core machine


class Missing(RuntimeError):
    """A Debian tool the cluster needs is not installed."""


def tool(name: str, package: str) -> str:
    for path in (shutil.which(name), f"/usr/sbin/{name}", f"/usr/bin/{name}"):
        if path and os.access(path, os.X_OK):
            return path
    raise Missing(f"{name} is not installed (apt-get install {package})")


def client(base_url: str, address: str = "127.0.0.1", timeout: float = 60) -> httpx.Client:
    """An HTTP client that connects from ``address`` (a loopback address: another client)."""
    return httpx.Client(base_url=base_url, timeout=timeout,
                        transport=httpx.HTTPTransport(local_address=address))


def server_timing(response: httpx.Response) -> dict[str, float]:
    """``Server-Timing``'s entries in milliseconds: sandbox, cache, saved, work."""
    entries = re.findall(r'(\w+)(?:;desc="[^"]*")?;dur=([\d.]+)', response.headers.get("server-timing", ""))
    return {name: float(ms) for name, ms in entries}


class Held:
    """A loopback port this process holds (a bound socket: no other bind and no connection can have
    it, and connections to it are refused) whenever no server of ours listens on it, so that a server
    stopped and started again finds it free (``app.serving.loopback_socket``)."""

    def __init__(self) -> None:
        self.socket: socket.socket | None = loopback_socket()
        self.port = self.socket.getsockname()[1]

    def hold(self) -> None:
        """Hold it again, once the server on it has ended."""
        if self.socket is None:
            with contextlib.suppress(OSError):  # taken in the instant it was free: as a bare port would be
                self.socket = loopback_socket(self.port)

    def release(self) -> None:
        if self.socket is not None:
            self.socket.close()
            self.socket = None


class Redis:
    """One ``redis-server``, nothing saved; ``stop`` (SIGKILL: an outage) and ``start`` again on its port.
    redis binds its port itself: the port is free only while it starts, held otherwise (``Held``)."""

    def __init__(self) -> None:
        self.binary = tool("redis-server", "redis-server")
        self.held = Held()
        self.port = self.held.port
        self.folder = Path(tempfile.mkdtemp(prefix="explorer-redis-"))
        self.process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        self.held.release()
        self.process = subprocess.Popen(
            [self.binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--dir", str(self.folder)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
        )
        deadline = time.monotonic() + 30
        while True:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", self.port), 1) as probe:
                probe.sendall(b"PING\r\n")
                if probe.recv(16).startswith(b"+PONG"):
                    return
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("redis-server did not start")
            time.sleep(0.05)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(timeout=10)
        self.process = None
        self.held.hold()

    def close(self) -> None:
        self.stop()
        self.held.release()
        shutil.rmtree(self.folder, ignore_errors=True)


class Replica:
    """``python -m app serve`` as an operator starts it, on a free loopback port: each process is
    handed the socket (``--fd``), held by this one between them (``Held``)."""

    def __init__(self, name: str, env: dict[str, str], folder: Path) -> None:
        self.name, self.env, self.folder = name, env, folder
        self.held = Held()
        self.port = self.held.port
        self.url = f"http://127.0.0.1:{self.port}"
        self.process: subprocess.Popen | None = None
        self.log_path = folder / f"{name}.log"

    def start(self) -> None:
        clean = {k: v for k, v in os.environ.items()
                 if not k.startswith("EXPLORER_") and k not in ("DATABASE_URL", "EXPLORER_DATABASE_URL")}
        self.held.hold()  # (held since it was made, or since its last process ended)
        held = self.held.socket
        if held is None:
            raise RuntimeError(f"replica {self.name}: port {self.port} was taken while it was down")
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "app", "serve", "--fd", str(held.fileno())],
                cwd=ROOT, env={**clean, "EXPLORER_DATA_DIR": str(self.folder / self.name), **self.env},
                stdout=log, stderr=subprocess.STDOUT, pass_fds=(held.fileno(),),
            )
        self.held.release()  # the process has it: when it ends, connections are refused as before

    def wait_healthy(self) -> None:
        deadline = time.monotonic() + START_SECONDS
        while True:
            assert self.process is not None
            if self.process.poll() is not None:
                raise RuntimeError(f"replica {self.name} exited: {self.log()}")
            with contextlib.suppress(httpx.TransportError):
                if httpx.get(self.url + "/healthz", timeout=5).status_code == 200:
                    return
            if time.monotonic() > deadline:
                raise RuntimeError(f"replica {self.name} not healthy in {START_SECONDS:.0f} s: {self.log()}")
            time.sleep(0.2)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-3000:] if self.log_path.exists() else ""

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def kill(self) -> None:
        """SIGKILL, as a crash or an OOM kill ends it (its fork server sees its socket close and ends)."""
        if self.alive:
            assert self.process is not None
            self.process.kill()
            self.process.wait(timeout=30)
        self.held.hold()

    def stop(self) -> None:
        if self.alive:
            assert self.process is not None
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.held.hold()


HAPROXY = """\
global
    maxconn 512
    stats socket {socket} mode 600 level admin
defaults
    mode http
    # one line a request in haproxy.log (its stdout): what a lost request's termination state says
    log stdout format raw local0
    option httplog
    timeout connect 2s
    timeout client 60s
    timeout server 60s
    # as deploy/haproxy/haproxy.cfg: a replica that refuses the connection or dies before answering
    retries 2
    option redispatch 1
    retry-on conn-failure empty-response
    option http-buffer-request
frontend explorer
    bind fd@{fd}
    option forwardfor
    default_backend replicas
backend replicas
    balance roundrobin
    option httpchk GET /healthz
    http-check expect status 200
    default-server check inter {check_ms} fall 2 rise 2 source {source}
{servers}
"""


class HAProxy:
    """Debian's haproxy in front of the replicas: round robin, health checks on /healthz."""

    def __init__(self, replicas: list[Replica], folder: Path, check_ms: int = 500) -> None:
        self.binary = tool("haproxy", "haproxy")
        self.held = Held()  # its frontend: handed to haproxy (``bind fd@N``)
        self.port = self.held.port
        self.url = f"http://127.0.0.1:{self.port}"
        self.socket = folder / "haproxy.sock"
        servers = "\n".join(f"    server {r.name} 127.0.0.1:{r.port}" for r in replicas)
        self.config = folder / "haproxy.cfg"
        fd = self.held.socket.fileno()  # type: ignore[union-attr]
        self.config.write_text(HAPROXY.format(socket=self.socket, fd=fd, check_ms=check_ms,
                                              source=PROXY_SOURCE, servers=servers))
        self.log_path = folder / "haproxy.log"
        self.process: subprocess.Popen | None = None

    def start(self) -> None:
        held = self.held.socket
        assert held is not None, "haproxy starts once"
        fds = (held.fileno(),)
        check = subprocess.run([self.binary, "-c", "-f", str(self.config)], capture_output=True, text=True,
                               pass_fds=fds)
        if check.returncode != 0:
            raise RuntimeError(f"haproxy refused its configuration: {check.stdout}{check.stderr}")
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen([self.binary, "-db", "-f", str(self.config)], pass_fds=fds,
                                            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        self.held.release()

    def command(self, line: str) -> str:
        """One command on haproxy's admin socket; its answer."""
        with socket.socket(socket.AF_UNIX) as control:
            control.settimeout(5)
            control.connect(str(self.socket))
            control.sendall(line.encode() + b"\n")
            data = b""
            while chunk := control.recv(65536):
                data += chunk
        return data.decode()

    def log_tail(self, lines: int = 40) -> str:
        """The last ``lines`` of haproxy's log (a line a request: its termination state says how a
        lost one ended, e.g. ``SD--`` for an answer cut after its head)."""
        text = self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
        return "\n".join(text.splitlines()[-lines:])

    def serve_with(self, names: list[str]) -> None:
        """Send requests to ``names`` only (the others in maintenance), once haproxy sees them up."""
        for name in self.states():
            self.command(f"{'enable' if name in names else 'disable'} server replicas/{name}")
        for name in names:
            self.wait_for(name, "UP")

    def states(self) -> dict[str, str]:
        """Each server's state as haproxy sees it ("UP", "DOWN", "UP 1/2", "MAINT" ...)."""
        rows = csv.DictReader(io.StringIO(self.command("show stat").lstrip("# ")))
        return {row["svname"]: row["status"] for row in rows if row["pxname"] == "replicas"
                and row["svname"] not in ("BACKEND", "FRONTEND")}

    def wait_for(self, name: str, state: str, seconds: float = 60) -> float:
        """Wait until haproxy reports ``name`` in ``state`` ("UP", "DOWN": settled, not "UP 1/2", a
        server failing its checks on its way down); returns when (monotonic)."""
        deadline = time.monotonic() + seconds
        while True:
            with contextlib.suppress(OSError):
                if self.states().get(name, "") == state:
                    return time.monotonic()
            if time.monotonic() > deadline:
                raise RuntimeError(f"haproxy never saw {name} {state}: {self.states()}")
            time.sleep(0.05)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=10)
        self.held.release()


# Each replica as small as it goes: one run at a time, no standby fork server (~340 MiB each).
REPLICA_ENV = {"EXPLORER_STANDBY": "0", "EXPLORER_MAX_RUNNING": "1", "EXPLORER_PREFORK": "1"}


class Cluster:
    """Redis, ``count`` replicas (``env`` over ``REPLICA_ENV``) and haproxy in front of them."""

    def __init__(self, count: int, env: dict[str, str], redis: Redis | None = None) -> None:
        self.folder = Path(tempfile.mkdtemp(prefix="explorer-cluster-"))
        self.redis = redis
        self.env = {**REPLICA_ENV, "EXPLORER_TRUSTED_PROXIES": PROXY_SOURCE, **env}
        self.replicas = [Replica(f"r{n + 1}", self.env, self.folder) for n in range(count)]
        self.proxy = HAProxy(self.replicas, self.folder)

    def start(self) -> None:
        for replica in self.replicas:
            replica.start()  # all at once: their fork servers warm up side by side
        for replica in self.replicas:
            replica.wait_healthy()
        self.proxy.start()
        for replica in self.replicas:
            self.proxy.wait_for(replica.name, "UP")

    def restart(self, env: dict[str, str]) -> None:
        """The replicas again with ``env`` over their settings (on the same ports: the proxy stays)."""
        for replica in self.replicas:
            replica.stop()
        for replica in self.replicas:  # seen gone, so that "UP" below is the new process's
            self.proxy.wait_for(replica.name, "DOWN")
        self.env.update(env)
        for replica in self.replicas:
            replica.env = self.env
            replica.start()
        for replica in self.replicas:
            replica.wait_healthy()
        for replica in self.replicas:
            self.proxy.wait_for(replica.name, "UP")

    def close(self) -> None:
        self.proxy.stop()
        for replica in self.replicas:
            replica.stop()
            replica.held.release()
        shutil.rmtree(self.folder, ignore_errors=True)


@contextlib.contextmanager
def running(count: int, env: dict[str, str]) -> Iterator[Cluster]:
    cluster = Cluster(count, env)
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.close()

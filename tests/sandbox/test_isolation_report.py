"""``/healthz`` says plainly what the sandbox does and does not do, and it is true (issue 25, 7 and the
layers left from round 2): no sockets and no processes (seccomp), threads not refused by the OS
layers (the policy gate refuses the ways a snippet asks for them), and no network namespace of the
child's own. Each sentence is checked against what a real child does, with the gate off."""

from __future__ import annotations

from sandbox_support import Server, text

THREAD = """\
import threading
seen = []
worker = threading.Thread(target=lambda: seen.append(1))
worker.start()
worker.join()
print('thread ran', seen)
"""
SOCKET = "import socket\nsocket.socket()\n"
FORK = "import os\nos.fork()\n"


def test_healthz_says_what_is_refused_and_what_is_not(gated_server: Server) -> None:
    report = gated_server.health().json()
    said = report["isolation"]
    assert "no sockets" in said["network"] and "EPERM" in said["network"]
    assert "no network namespace of its own" in said["network"]
    assert said["processes"].startswith("refused") and "EPERM" in said["processes"]
    assert said["threads"].startswith("not refused") and "allowed" in said["threads"]
    assert "none used" in said["namespaces"]
    assert "only what Landlock allows" in said["files"]


def test_what_healthz_says_is_what_a_child_meets(ungated_server: Server) -> None:
    assert "thread ran [1]" in text(ungated_server.run(THREAD))
    for code in (SOCKET, FORK):
        error = ungated_server.run(code)["error"]
        assert error is not None and "Operation not permitted" in error["message"], error
    gated = ungated_server.health().json()["isolation"]
    assert gated["threads"].startswith("not refused")


def test_the_gate_refuses_the_ways_a_snippet_asks_for_threads(gated_server: Server) -> None:
    for code in (THREAD, "import concurrent.futures\n", "torch.set_num_threads(4)\n"):
        error = gated_server.run(code)["error"]
        assert error is not None and error["kind"] == "rejected", (code, error)

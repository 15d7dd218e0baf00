"""What the layers a child is under are, proved by children themselves.

Every child says in its hello (its first frame) the layers it put on; the server checks it against the
layers it requires before it writes a job (``hello_ok``). Once per fork server a probe child also
tries what the layers must refuse (a socket, a fork, a file write, a read outside Landlock...) and
reports what happened (``probe``): ``evaluate_layers`` turns that into ``/healthz``'s layers and
``isolation`` into plain words.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

from app.sandbox import frames
from app.sandbox.launch import Child, fork_server_env

HELLO_BYTES = 1 << 14
HELLO_TIMEOUT = 15.0  # a child still warming up

# Variables torch writes into its own process environment when a module is imported (the fork server
# preloads torch._dynamo, which sets the inductor cache dir). A server process that ran torch itself
# (tests do) has the same name, which is no leak.
SET_BY_TORCH = frozenset({"TORCHINDUCTOR_CACHE_DIR"})


def required_layers(server_is_root: bool) -> list[str]:
    base = [
        "fork_server",
        "clean_env",
        "seccomp",
        "no_new_privs",
        "no_capabilities",
        "not_dumpable",
        "rlimits",
        "no_file_writes",
    ]
    # Landlock in every mode: as root, another uid hides files owned by the server's uid, but not the
    # world-readable ones (the repository, app/config.py, .git/config); only Landlock hides those.
    return [*base, "landlock", *(["separate_uid"] if server_is_root else [])]


def read_hello(child: Child) -> dict | None:
    """The child's first frame, the layers it is under; None if it sent none fit to read in time."""
    try:
        hello = json.loads(
            frames.read_frame_before(child.result_fd, HELLO_BYTES, time.monotonic() + HELLO_TIMEOUT)
        )
    except (frames.FrameError, frames.Deadline, ValueError, OSError):
        return None
    return hello if isinstance(hello, dict) else None


def hello_ok(hello: dict, child: Child, required: list[str], unsafe_dev: bool) -> bool:
    """Whether ``child`` may be given a job: it says it is under every required layer (or the
    operator said this is a private development machine)."""
    if hello.get("seccomp") != 2 or hello.get("no_new_privs") != 1 or hello.get("dumpable") != 0:
        return unsafe_dev
    if "separate_uid" in required and hello.get("uid") != child.uid:
        return unsafe_dev
    if "landlock" in required and not hello.get("landlock_abi"):
        return unsafe_dev
    return True


def probe(child: Child, server_euid: int) -> dict[str, Any]:
    """Give ``child`` the probe job and read what it found: the layers in force (``evaluate_layers``,
    with the probe child's ``uid``). The caller closes the child."""
    hello = read_hello(child)
    if hello is None:
        raise RuntimeError("the probe child did not start")
    frames.write_before(
        child.job_fd, frames.encode_frame(b'{"kind":"probe"}'), time.monotonic() + HELLO_TIMEOUT
    )
    data, _ = frames.read_to_eof(child.result_fd, HELLO_BYTES * 4, time.monotonic() + HELLO_TIMEOUT)
    found = json.loads(frames.decode_frame(data, HELLO_BYTES * 4))
    server_only = set(os.environ) - set(fork_server_env()) - SET_BY_TORCH
    layers = evaluate_layers(hello, found, server_euid, server_only)
    layers["uid"] = found.get("uid")
    return {"layers": layers, "isolation": isolation(found, layers)}


def evaluate_layers(hello: dict, probe: dict, server_euid: int, server_only_env: set[str]) -> dict[str, Any]:
    """Which layers a probe child showed to be in force (``server_only_env``: the server's variables
    that the fork server was not given; none may reach a child)."""
    limits = probe.get("rlimits", {})

    def limited(name: str) -> bool:
        soft, hard = limits.get(name, (-1, -1))
        return soft != -1 and hard != -1

    return {
        "fork_server": True,
        "clean_env": "env" in probe and not set(probe["env"]) & server_only_env,
        "seccomp": probe.get("seccomp") == 2
        and probe.get("socket") == "EPERM"
        and probe.get("fork") == "EPERM",
        "no_new_privs": probe.get("no_new_privs") == 1,
        "no_capabilities": bool(probe.get("capabilities"))
        and all(int(c, 16) == 0 for c in probe["capabilities"]),
        "not_dumpable": probe.get("dumpable") == 0,
        "rlimits": all(limited(n) for n in ("AS", "DATA", "CPU", "FSIZE", "NOFILE", "CORE"))
        and list(limits.get("FSIZE", [1]))[0] == 0
        and list(limits.get("CORE", [1]))[0] == 0,
        "no_file_writes": probe.get("write_file") in ("EACCES", "EPERM", "EROFS"),
        "separate_uid": probe.get("uid") not in (None, 0, server_euid) and not probe.get("groups"),
        "landlock": hello.get("landlock_abi", 0) > 0 and probe.get("read_outside") == "EACCES",
    }


def isolation(probe: dict, layers: dict[str, Any]) -> dict[str, str]:
    """What the layers mean for a snippet, in plain words (``/healthz``), from what the probe child
    tried. No namespace is used: the child shares the server's network, PID and mount namespaces,
    and seccomp, Landlock and the limits are what stand between a snippet and them."""
    nproc = (probe.get("rlimits", {}).get("NPROC") or [-1])[0]
    bound = f"at most {nproc} processes and threads of its uid" if nproc not in (-1, None) else \
        "no bound of their own (the server's uid)"
    return {
        "network": f"no sockets: seccomp refuses socket() (the probe child got {probe.get('socket', '?')}); "
                   "no network namespace of its own: the child shares the server's",
        "processes": "refused: seccomp refuses fork and the clone of a process "
                     f"(probe: {probe.get('fork', '?')})",
        "threads": f"not refused by the OS layers (probe: {probe.get('thread', '?')}; torch starts its own), "
                   f"{bound}, within the run's CPU and memory limits; the policy gate refuses the ways a "
                   "snippet asks for them (threading, concurrent.futures, torch.set_num_threads)",
        "files": f"writing refused (probe: {probe.get('write_file', '?')}); reading "
                 + ("only what Landlock allows" if layers.get("landlock") else "NOT limited by Landlock")
                 + f" (probe outside it: {probe.get('read_outside', '?')})",
        "namespaces": "none used (network, PID, user, mount): the layers above are seccomp, Landlock, "
                      "resource limits, no capabilities, not dumpable"
                      + (", a uid of its own" if layers.get("separate_uid") else ""),
    }

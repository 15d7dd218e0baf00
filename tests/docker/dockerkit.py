"""Helpers for the container smoke test: the docker CLI, the image, containers started like a user would.

Kept out of conftest.py so test modules can import them by a name no other test folder uses.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCKER_LOCAL = ROOT.parent / "shared" / "tools" / "docker-local"
BASE_IMAGE = "local/python:3.11-bookworm"
TAG = "autograd-explorer:smoke-test"


def unavailable(reason: str) -> None:
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"Docker is required under CI=true: {reason}", pytrace=False)
    pytest.skip(f"Docker unavailable: {reason}")


def docker(*args: str, timeout: float = 120, check: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(["docker", *args], capture_output=True, text=True, timeout=timeout)
    if check and done.returncode != 0:
        raise AssertionError(f"docker {' '.join(args[:3])} failed ({done.returncode}): {done.stderr[-3000:]}")
    return done


def engine_up() -> bool:
    if shutil.which("docker") is None:
        return False
    ok = docker("info", timeout=30, check=False).returncode == 0
    return ok and docker("image", "inspect", BASE_IMAGE, timeout=30, check=False).returncode == 0


@dataclass(frozen=True)
class Image:
    tag: str
    build_seconds: float | None


@dataclass(frozen=True)
class Container:
    id: str
    url: str
    secret: str
    volume: str

    def exec(self, *command: str) -> subprocess.CompletedProcess[str]:
        return docker("exec", self.id, *command, check=False)


def start(image: Image, volume: str, env: dict[str, str] | None = None) -> str:
    """``docker run -d -p 127.0.0.1::8000`` with Docker's defaults: default seccomp, no added caps."""
    # No --rm: a container that dies at start-up keeps its logs for the failure message.
    args = ["run", "-d", "-p", "127.0.0.1::8000", "-v", f"{volume}:/data"]
    for key, value in (env or {}).items():
        args += ["-e", f"{key}={value}"]
    return docker(*args, image.tag).stdout.strip()


def wait_answering(container_id: str, timeout: float = 120) -> str:
    port = docker("port", container_id, "8000/tcp").stdout.split("\n")[0].rsplit(":", 1)[1]
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            # Any answer means the server is up; whether it is healthy is for the tests to judge.
            httpx.get(f"{url}/healthz", timeout=5)
            return url
        except httpx.TransportError:
            pass
        running = docker("inspect", "--format", "{{.State.Running}}", container_id, check=False).stdout
        if running.strip() != "true":
            break
        time.sleep(0.5)
    logs = docker("logs", container_id, check=False)
    raise AssertionError(f"container never answered /healthz:\n{(logs.stdout + logs.stderr)[-3000:]}")


def stop(container_id: str) -> None:
    docker("rm", "-f", "-v", container_id, check=False)  # -v: and any anonymous volume


@contextlib.contextmanager
def running(image: Image, env: dict[str, str] | None = None) -> Iterator[Container]:
    volume = f"explorer-smoke-{secrets.token_hex(4)}"
    secret = f"smoke-secret-{secrets.token_hex(8)}"
    container_id = start(image, volume, {"EXPLORER_SMOKE_SECRET": secret, **(env or {})})
    try:
        yield Container(container_id, wait_answering(container_id), secret, volume)
    finally:
        stop(container_id)
        docker("volume", "rm", "-f", volume, check=False)

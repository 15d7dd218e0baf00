"""Fixtures for the container smoke test: a Docker engine, the project's image, running containers.

The engine and base image come from ``../shared/tools/docker-local`` (no Docker Hub here). Under
``CI=true`` a missing engine fails the run instead of skipping it. ``EXPLORER_TEST_IMAGE`` names an
image to test instead of building one (e.g. one built from python:3.11-slim-bookworm elsewhere).
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator

import httpx
import pytest
from dockerkit import (
    BASE_IMAGE,
    DOCKER_LOCAL,
    ROOT,
    TAG,
    Container,
    Image,
    docker,
    engine_up,
    running,
    unavailable,
)


@pytest.fixture(scope="session")
def docker_engine() -> None:
    """A running engine with the local base image, brought up by docker-local when needed."""
    if engine_up():
        return
    if not DOCKER_LOCAL.is_file():
        unavailable(f"no running engine and no {DOCKER_LOCAL}")
    done = subprocess.run(["bash", str(DOCKER_LOCAL)], capture_output=True, text=True, timeout=1200)
    if done.returncode != 0 or not engine_up():
        unavailable(f"docker-local failed: {(done.stdout + done.stderr)[-2000:]}")


@pytest.fixture(scope="session")
def image(docker_engine: None) -> Image:
    prebuilt = os.environ.get("EXPLORER_TEST_IMAGE", "").strip()
    if prebuilt:
        docker("image", "inspect", prebuilt)
        return Image(prebuilt, None)
    previous = docker("image", "inspect", "--format", "{{.Id}}", TAG, check=False).stdout.strip()
    started = time.monotonic()
    # Exactly the documented local build: the local base image, and pip's own settings for torch
    # (PyTorch's CPU index is unreachable here; the base image's pip.conf finds the local wheel).
    done = subprocess.run(
        ["docker", "build", "--network", "host", "--build-arg", f"BASE_IMAGE={BASE_IMAGE}",
         "--build-arg", "TORCH_INDEX_URL=", "-t", TAG, str(ROOT)],
        capture_output=True, text=True, timeout=1800,
    )
    if done.returncode != 0:
        raise AssertionError(f"docker build failed:\n{(done.stdout + done.stderr)[-5000:]}")
    seconds = time.monotonic() - started
    current = docker("image", "inspect", "--format", "{{.Id}}", TAG).stdout.strip()
    if previous and previous != current:  # keep the disk from filling with old 1 GB images
        docker("image", "rm", previous, check=False)
    return Image(TAG, seconds)


@pytest.fixture(scope="module")
def container(image: Image) -> Iterator[Container]:
    """The image as a user runs it."""
    with running(image) as started:
        yield started


@pytest.fixture(scope="module")
def gateless(image: Image) -> Iterator[Container]:
    """The policy gate switched off (a test-only setting): the OS layers alone must hold."""
    with running(image, {"EXPLORER_TESTING": "1", "EXPLORER_POLICY_GATE": "0"}) as started:
        body = httpx.get(f"{started.url}/healthz", timeout=10).json()
        assert body.get("policy_gate") is False, body
        yield started

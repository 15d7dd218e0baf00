"""Which runner an app runs snippets with, and one pool per configuration and process: many apps
(tests!) must not mean many fork servers."""

from __future__ import annotations

import atexit
import threading

from app.config import Settings
from app.sandbox.pool import ForkServerPool

_POOLS: dict[tuple, ForkServerPool] = {}
_POOLS_LOCK = threading.Lock()


# What a pool is made of; apps that differ only elsewhere (data folder, database...) share one.
POOL_SETTINGS = (
    "sandbox",
    "prefork",
    "standby",
    "sandbox_uid_base",
    "unsafe_dev",
    "policy_gate",
    "testing",
    "max_steps",
    "max_stdout_bytes",
    "max_code_bytes",
    "max_result_bytes",
    "wall_seconds",
    "cpu_seconds",
    "memory_mib",
)


def _key(settings: Settings) -> tuple:
    return tuple(str(getattr(settings, name)) for name in POOL_SETTINGS)


def shared_pool(settings: Settings) -> ForkServerPool:
    with _POOLS_LOCK:
        key = _key(settings)
        pool = _POOLS.get(key)
        if pool is None:
            pool = _POOLS[key] = ForkServerPool(settings)
        return pool


@atexit.register
def _close_all() -> None:
    for pool in list(_POOLS.values()):
        pool.close()


def default_runner(settings: Settings):  # noqa: ANN201 - a Runner
    """What ``create_app`` runs snippets with unless given a runner."""
    if settings.sandbox == "subprocess":
        # Unconfined: the snippet runs with the server's powers. Fail closed unless the operator said
        # explicitly that this is a private development machine.
        if not settings.unsafe_dev:
            raise RuntimeError(
                "EXPLORER_SANDBOX=subprocess runs snippets without the sandbox; "
                "it needs EXPLORER_UNSAFE_DEV=1 as well (a private development machine only)"
            )
        from app.sandbox.runner import SubprocessRunner

        return SubprocessRunner(settings)
    return shared_pool(settings)

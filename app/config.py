"""Settings, read from the environment (prefix ``EXPLORER_``), with embedded defaults."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from pydantic import AliasChoices, Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="EXPLORER_", extra="ignore", populate_by_name=True)

    host: str = "127.0.0.1"
    port: int = 8000

    # Limits of one run.
    max_steps: int = 10_000
    max_stdout_bytes: int = 64 * 1024
    max_code_bytes: int = 20 * 1024
    max_result_bytes: int = 8 * 1024 * 1024
    wall_seconds: float = 5.0
    cpu_seconds: int = 5
    memory_mib: int = 512

    # Sandbox (app/sandbox): "forkserver" (default, the OS layers) or "subprocess" (slow, unconfined,
    # for debugging the engine only; refused unless unsafe_dev is set too).
    sandbox: str = "forkserver"
    prefork: int = 2  # children forked ahead of requests
    # A second fork server kept warm (its own children forked ahead): a fork server that dies is
    # replaced in milliseconds instead of the seconds a new one takes to import torch.
    standby: bool = True
    sandbox_uid_base: int = 61000  # as root, each child runs as base + n
    # Serve even when required sandbox layers are missing (a private development machine only).
    unsafe_dev: bool = False
    # Test-only: EXPLORER_POLICY_GATE=0 switches the AST gate off, honoured only with EXPLORER_TESTING=1.
    policy_gate: bool = True
    testing: bool = False

    # Backpressure: runs at once, runs waiting (beyond: 503 + Retry-After), per-client rate (429).
    max_running: int = 2
    max_queued: int = 8
    queue_wait_seconds: float = 10.0
    rate_per_minute: float = 120.0
    rate_burst: int | None = None  # runs at once; unset: rate_per_minute (a minute's worth)

    # Replicas (docs/self-host.md): where the per-client rate is counted (app/web/rate.py) —
    # memory:// (this process) or redis://host:port/db (shared, so a client has one budget whichever
    # replica it reaches); the proxies whose X-Forwarded-For is believed (addresses or networks,
    # comma-separated; app/web/clients.py).
    rate_storage: str = "memory://"
    trusted_proxies: str = ""
    # The run cache (app/web/runcache.py): this process's own LRU (MiB; 0: none), and one shared by the
    # replicas in Redis (redis://host:port/db; unset: none), bounded in MiB by the cache itself.
    cache_mib: int = 64
    cache_url: str | None = None
    cache_shared_mib: int = 256

    # The server's own work per request (validation, diagnostics, layout, rendering): a time budget,
    # cancelled when the client leaves; past it the answer is a partial view (app/budget.py). Wall
    # time: the largest legitimate trace (1000 steps) takes about 2 s of CPU to draw, and a busy 2-core
    # machine stretches that threefold.
    server_seconds: float = 10.0

    # Requests and connections (app/web/limits.py, app/serving.py): the largest body any route
    # accepts (0: derived from max_code_bytes, whose JSON escapes can take 6 bytes a byte), the time a
    # body may take to arrive, open connections at once (beyond: closed at once, or 503 from uvicorn),
    # idle keep-alive, the time a request's head may take, the header size, the listen backlog.
    max_body_bytes: int = 0
    body_seconds: float = 10.0
    max_connections: int = 512
    keep_alive_seconds: int = 5
    header_seconds: float = 10.0
    max_header_bytes: int = 16 * 1024
    backlog: int = 256
    # Answers (app/web/pacing.py, app/serving.py): a client that reads nothing of its answer for
    # this long is dropped, and the answers one client leaves unread hold at most these bytes.
    send_seconds: float = 10.0
    client_pending_bytes: int = 32 * 1024 * 1024

    # Short links: SQLite under data_dir, unless DATABASE_URL names a PostgreSQL server
    # (postgresql://...), which lets several replicas share links. Nothing else is stored.
    data_dir: Path = Path("data")
    database_url: str | None = Field(
        default=None, validation_alias=AliasChoices("DATABASE_URL", "EXPLORER_DATABASE_URL")
    )
    database_pool_size: int = 4
    # Their bounds (app/shortlinks/store.py): all snippets together, what one client may share in a
    # day, and the days a link never opened is kept after it was last shared.
    links_max_bytes: int = 256 * 1024 * 1024
    links_client_bytes: int = 1024 * 1024
    links_client_links: int = 200
    links_unopened_days: float = 14.0


    @property
    def body_limit(self) -> int:
        return self.max_body_bytes or 6 * self.max_code_bytes + 4096


@lru_cache
def get_settings() -> Settings:
    return Settings()

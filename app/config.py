"""Settings, read from the environment (prefix ``EXPLORER_``), with embedded defaults."""

from __future__ import annotations

from functools import lru_cache

from pydantic_settings import BaseSettings, SettingsConfigDict


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="EXPLORER_", extra="ignore")

    host: str = "127.0.0.1"
    port: int = 8000

    # Limits of one run.
    max_steps: int = 1000
    max_stdout_bytes: int = 64 * 1024
    max_code_bytes: int = 20 * 1024
    max_result_bytes: int = 8 * 1024 * 1024
    wall_seconds: float = 5.0
    cpu_seconds: int = 5
    memory_mib: int = 512


@lru_cache
def get_settings() -> Settings:
    return Settings()

"""The gates every run passes, whoever asks (API, page, embed, SVG): the per-client rate (429),
bounded concurrency with a bounded queue (503), and a sandbox that proved its layers (503)."""

from __future__ import annotations

from dataclasses import dataclass
from math import ceil

from fastapi import Request

from app.schema import DeltaTrace, RunError


@dataclass(frozen=True)
class Refusal:
    """A run that did not happen: the HTTP status, Retry-After seconds and a plain sentence."""

    status: int
    retry_after: int
    title: str
    message: str
    error_type: str = "Busy"

    def as_result(self) -> DeltaTrace:
        error = RunError(kind="internal", type=self.error_type, message=self.message)
        return DeltaTrace(ok=False, steps=[], error=error)


async def run_gated(request: Request, code: str) -> DeltaTrace | Refusal:
    state = request.app.state
    # The client is the peer address (behind a proxy, uvicorn's --proxy-headers rewrites it).
    wait = state.rate_limiter.take(request.client.host if request.client else "unknown")
    if wait > 0:
        return Refusal(429, ceil(wait), "Slow down", "You are running snippets faster than the playground "
                       f"allows. Please wait {ceil(wait)} s.")
    if not await state.admission.acquire():
        return Refusal(503, 1, "Busy", "The playground is busy right now. Please try again in a moment.")
    try:
        runner = state.runner
        if hasattr(runner, "ready") and not await runner.ready():
            return Refusal(503, 30, "Not available", runner.unavailable_message(), "SandboxUnavailable")
        return await runner.run(code)
    finally:
        state.admission.release()

"""JSON API: run a snippet, health."""

from __future__ import annotations

import math

from fastapi import APIRouter, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse

from app.diagnostics import analyze
from app.schema import RunError, RunRequest, RunResponse, RunResult

router = APIRouter()


def _runner(request: Request):  # noqa: ANN202
    return request.app.state.runner


@router.post("/api/run", response_model=RunResponse, response_model_exclude_none=False)
async def run_snippet(body: RunRequest, request: Request) -> RunResponse | JSONResponse:
    """Run a snippet and return its line-by-line trace."""
    settings = request.app.state.settings
    if len(body.code.encode()) > settings.max_code_bytes:
        error = RunError(
            kind="rejected", type="CodeTooLong",
            message=f"The snippet is longer than {settings.max_code_bytes // 1024} KB.",
        )
        return JSONResponse(RunResult(ok=False, steps=[], error=error).model_dump(), status_code=413)
    busy = _admit(request)
    if busy is not None:
        return busy
    admission = request.app.state.admission
    if not await admission.acquire():
        return _refusal(503, "busy", "The playground is busy right now. Please try again in a moment.", 1)
    try:
        runner = _runner(request)
        if hasattr(runner, "ready") and not await runner.ready():
            return _refusal(503, "internal", runner.unavailable_message(), 30, "SandboxUnavailable")
        result = await runner.run(body.code)
    finally:
        admission.release()
    # Diagnostics and memory accounting are the server's own reading of the validated trace.
    return await run_in_threadpool(analyze, result, body.code)


def _admit(request: Request) -> JSONResponse | None:
    """The per-client rate limit (429); the client is the peer address (a trusted proxy rewrites it)."""
    client = request.client.host if request.client else "unknown"
    wait = request.app.state.rate_limiter.take(client)
    if wait <= 0:
        return None
    return _refusal(429, "rate", "You are running snippets faster than the playground allows. "
                                 f"Please wait {math.ceil(wait)} s.", math.ceil(wait))


def _refusal(status: int, why: str, message: str, retry_after: int, error_type: str = "Busy") -> JSONResponse:
    kind = "internal"
    error = RunError(kind=kind, type=error_type, message=message)
    body = RunResult(ok=False, steps=[], error=error).model_dump()
    return JSONResponse(body, status_code=status, headers={"Retry-After": str(max(1, retry_after))})


@router.get("/healthz")
async def healthz(request: Request) -> JSONResponse:
    """200 when the server can run snippets; the sandbox layers in force either way."""
    runner = request.app.state.runner
    if hasattr(runner, "health"):
        health = runner.health()
        return JSONResponse(health, status_code=200 if health["ok"] else 503)
    return JSONResponse({"ok": True, "runner": type(runner).__name__})

"""JSON API: run a snippet, health."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse

from app.diagnostics import analyze
from app.schema import RunError, RunRequest, RunResponse, RunResult
from app.web.gates import Refusal, run_gated

router = APIRouter()


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
    result = await run_gated(request, body.code)
    if isinstance(result, Refusal):
        return JSONResponse(result.as_result().model_dump(), status_code=result.status,
                            headers={"Retry-After": str(result.retry_after)})
    # Diagnostics and memory accounting are the server's own reading of the validated trace.
    return await run_in_threadpool(analyze, result, body.code)


@router.get("/healthz")
async def healthz(request: Request) -> JSONResponse:
    """200 when the server can run snippets; the sandbox layers in force either way."""
    runner = request.app.state.runner
    if hasattr(runner, "health"):
        health = runner.health()
        return JSONResponse(health, status_code=200 if health["ok"] else 503)
    return JSONResponse({"ok": True, "runner": type(runner).__name__})

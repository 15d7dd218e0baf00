"""JSON API: run a snippet, health."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse

from app.diagnostics import analyze, analyze_v1
from app.render.fmt import nbytes
from app.schema import DeltaResponse, DeltaTrace, RunError, RunRequest, RunResponse
from app.trace.delta import expanded_size
from app.web.gates import Refusal, run_gated

router = APIRouter()


@router.post("/api/run", response_model=RunResponse | DeltaResponse, response_model_exclude_none=False)
async def run_snippet(body: RunRequest, request: Request) -> RunResponse | DeltaResponse | JSONResponse:
    """Run a snippet and return its line-by-line trace: v1 (every step whole) by default, the delta
    format for ``"format": "delta"``."""
    settings = request.app.state.settings
    if len(body.code.encode()) > settings.max_code_bytes:
        error = RunError(
            kind="rejected", type="CodeTooLong",
            message=f"The snippet is longer than {settings.max_code_bytes // 1024} KB.",
        )
        return _failure(DeltaTrace(ok=False, steps=[], error=error), body.format, 413)
    result = await run_gated(request, body.code)
    if isinstance(result, Refusal):
        retry = {"Retry-After": str(result.retry_after)}
        return _failure(result.as_result(), body.format, result.status, retry)
    # Diagnostics and memory accounting are the server's own reading of the validated trace.
    if body.format == "delta":
        return await run_in_threadpool(analyze, result, body.code)
    size = await run_in_threadpool(expanded_size, result)
    if size > settings.max_result_bytes:
        error = RunError(
            kind="output", type="ResponseTooLarge",
            message=f"This trace is about {nbytes(size)} in the v1 format, which repeats every tensor at "
                    f"every step; the limit is {nbytes(settings.max_result_bytes)}. Ask for "
                    f'the delta format instead: {{"code": ..., "format": "delta"}} (each step holds only '
                    f"what its line changed).",
        )
        return _failure(DeltaTrace(ok=False, steps=[], error=error), "v1", 413)
    return await run_in_threadpool(analyze_v1, result, body.code)


def _failure(trace: DeltaTrace, form: str, status: int, headers: dict[str, str] | None = None
             ) -> JSONResponse:
    """A run that did not happen (or cannot be answered), in the format asked for."""
    body = trace.model_dump()
    if form != "delta":
        del body["format"]
    return JSONResponse(body, status_code=status, headers=headers)


@router.get("/healthz")
async def healthz(request: Request) -> JSONResponse:
    """200 when the server can run snippets; the sandbox layers in force either way."""
    runner = request.app.state.runner
    if hasattr(runner, "health"):
        health = runner.health()
        return JSONResponse(health, status_code=200 if health["ok"] else 503)
    return JSONResponse({"ok": True, "runner": type(runner).__name__})

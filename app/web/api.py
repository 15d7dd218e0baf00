"""JSON API: run a snippet, health."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from app.schema import RunError, RunRequest, RunResult

router = APIRouter()


def _runner(request: Request):  # noqa: ANN202
    return request.app.state.runner


@router.post("/api/run", response_model=RunResult, response_model_exclude_none=False)
async def run_snippet(body: RunRequest, request: Request) -> RunResult | JSONResponse:
    """Run a snippet and return its line-by-line trace."""
    settings = request.app.state.settings
    if len(body.code.encode()) > settings.max_code_bytes:
        error = RunError(
            kind="rejected", type="CodeTooLong",
            message=f"The snippet is longer than {settings.max_code_bytes // 1024} KB.",
        )
        return JSONResponse(RunResult(ok=False, steps=[], error=error).model_dump(), status_code=413)
    return await _runner(request).run(body.code)


@router.get("/healthz")
async def healthz(request: Request) -> dict:
    """200 when the server can run snippets."""
    return {"ok": True, "runner": type(request.app.state.runner).__name__}

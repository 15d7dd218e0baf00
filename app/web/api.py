"""JSON API: run a snippet, health."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from pydantic import ValidationError

from app.diagnostics import analyze
from app.schema import Diagnostic, RunError, RunRequest, RunResponse, RunResult
from app.web.gates import Refusal, run_gated, take_token

router = APIRouter()
# The body is read by the route itself (after the rate-limit token), so the schema is declared here.
REQUEST_BODY = {"requestBody": {"required": True, "content": {"application/json": {
    "schema": RunRequest.model_json_schema()}}}}


def _json(body: str, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    return Response(body, status_code=status, headers=headers, media_type="application/json")


def _partial(result: RunResult, note: str) -> str:
    """The trace without the server's analysis, and a note that says why."""
    fields = {name: getattr(result, name) for name in RunResult.model_fields}
    diagnostic = Diagnostic(rule="server-budget", severity="info", title="Analysis skipped",
                            message=note, fix="Try a smaller snippet (fewer tensors or steps).")
    return RunResponse(**fields, diagnostics=[diagnostic], memory=[]).model_dump_json()


@router.post("/api/run", response_model=RunResponse, response_model_exclude_none=False,
             openapi_extra=REQUEST_BODY)
async def run_snippet(request: Request) -> Response:
    """Run a snippet and return its line-by-line trace."""
    settings = request.app.state.settings
    refusal = take_token(request)  # before the body is read
    if refusal is None:
        try:
            body = RunRequest.model_validate_json(await request.body())
        except ValidationError as error:
            raise RequestValidationError(error.errors(include_input=False)) from None
        if len(body.code.encode()) > settings.max_code_bytes:
            error = RunError(
                kind="rejected", type="CodeTooLong",
                message=f"The snippet is longer than {settings.max_code_bytes // 1024} KB.",
            )
            return JSONResponse(RunResult(ok=False, steps=[], error=error).model_dump(), status_code=413)
        # Diagnostics and memory accounting are the server's own reading of the validated trace,
        # serialized in the worker thread too (a trace is megabytes of JSON).
        code = body.code
        answer = await run_gated(request, code, lambda result: analyze(result, code).model_dump_json(),
                                 _partial)
        if not isinstance(answer, Refusal):
            return _json(answer)
        refusal = answer
    return _json(refusal.as_result().model_dump_json(), refusal.status,
                 {"Retry-After": str(refusal.retry_after)})


@router.get("/healthz")
async def healthz(request: Request) -> JSONResponse:
    """200 when the server can run snippets; the sandbox layers in force either way."""
    runner = request.app.state.runner
    if hasattr(runner, "health"):
        health = runner.health()
        return JSONResponse(health, status_code=200 if health["ok"] else 503)
    return JSONResponse({"ok": True, "runner": type(runner).__name__})

"""JSON API: run a snippet, health."""

from __future__ import annotations

from collections.abc import Callable

from fastapi import APIRouter, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from pydantic import TypeAdapter, ValidationError

from app.diagnostics import Analysis, Found, analyze, analyze_v1
from app.i18n import gettext as _
from app.i18n import say
from app.run_errors import Message, english
from app.schema import (
    DeltaResponse,
    DeltaStep,
    DeltaTrace,
    Diagnostic,
    RunError,
    RunRequest,
    RunResponse,
    RunResult,
)
from app.trace.delta import expand, expanded_size
from app.units import nbytes
from app.web.gates import Refusal, run_gated, run_gated_streamed, take_token
from app.web.streamed import Streamed

router = APIRouter()
# The body is read by the route itself (after the rate-limit token), so the schema is declared here.
REQUEST_BODY = {"requestBody": {"required": True, "content": {"application/json": {
    "schema": RunRequest.model_json_schema()}}}}

Answer = tuple[int, str]  # HTTP status, JSON body


def _json(body: str, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    return Response(body, status_code=status, headers=headers, media_type="application/json")


def _as_format(trace: DeltaTrace, form: str) -> str:
    """A trace that carries no steps (a run that did not happen, or cannot be answered) as JSON."""
    return trace.model_dump_json() if form == "delta" else trace.model_dump_json(exclude={"format"})


def _too_large_for_v1(size: int, limit: int) -> Answer:
    params = {"size": nbytes(size), "limit": nbytes(limit)}
    error = RunError(kind="output", type="ResponseTooLarge", message=english("output.v1_too_large", params),
                     code="output.v1_too_large", params=params)
    return 413, _as_format(DeltaTrace(ok=False, steps=[], error=error), "v1")


def _nothing_found() -> Found | None:
    return None


def _answer(trace: DeltaTrace, code: str, form: str, limit: int,
            found: Callable[[], Found | None] = _nothing_found) -> Answer:
    """Diagnostics and memory accounting are the server's own reading of the validated trace
    (``found()``: from the steps as they came, when they were fed); v1 is ``expand`` of it, refused
    (never cut) when it would not fit the response cap, before any rule runs for an answer that is
    not sent."""
    if form == "delta":
        return 200, analyze(trace, code, found()).model_dump_json()
    size = expanded_size(trace)
    if size > limit:
        return _too_large_for_v1(size, limit)
    return 200, analyze_v1(trace, code, found()).model_dump_json()


class _Analysed:
    """``_answer``'s analysis made from the steps while the run goes on (``app.web.streamed``), so
    only the rules and the JSON are left when it ends. The delta format's steps are written as JSON
    as they come too (``DUMP_EVERY`` at a time): the answer is those steps' JSON within the rest of
    it, the same text ``_answer`` writes."""

    def __init__(self, code: str, form: str, limit: int) -> None:
        self.code, self.form, self.limit = code, form, limit
        self.analysis = Analysis(None, code)
        self._pending: list[DeltaStep] = []  # steps fed and not yet written
        self._written: list[str] = []  # the JSON of the steps before them, without the list's brackets
        self._count = 0  # steps fed

    def add(self, delta: DeltaStep) -> None:
        self.analysis.add(delta)
        self._count += 1
        if self.form == "delta":
            self._pending.append(delta)
            if len(self._pending) >= DUMP_EVERY:
                self._write()

    def _write(self) -> None:
        if self._pending:
            self._written.append(STEPS.dump_json(self._pending)[1:-1].decode())
            self._pending = []

    def finish(self, trace: DeltaTrace) -> Answer:
        self.analysis.bind(trace)
        if self.form != "delta" or len(trace.steps) != self._count:
            return _answer(trace, self.code, self.form, self.limit, self.analysis.result)
        self._write()
        steps, self._written = ",".join(self._written), []
        return 200, _with_steps(analyze(trace.model_copy(update={"steps": []}), self.code,
                                        self.analysis.result()).model_dump_json(), steps)


DUMP_EVERY = 256  # steps written as JSON at a time while the run goes on
STEPS = TypeAdapter(list[DeltaStep])
NO_STEPS = '"steps":[]'


def _with_steps(document: str, steps: str) -> str:
    """A response's JSON written without its steps (``"steps":[]``), with ``steps`` (the JSON of each
    step, comma-separated) in their place. The only such text in it is that field: any other
    ``"`` is escaped inside a string, and no other field holds a list under the key ``steps``."""
    at = document.index(NO_STEPS)
    return f'{document[:at]}"steps":[{steps}]{document[at + len(NO_STEPS):]}'


def _partial(trace: DeltaTrace, form: str, limit: int, note: Message) -> Answer:
    """The trace without the server's analysis, and a note that says why."""
    diagnostic = Diagnostic(rule="server-budget", severity="info", title=_("Analysis skipped"),
                            message=say(note), fix=_("Try a smaller snippet (fewer tensors or steps)."))
    if form == "delta":
        fields = {name: getattr(trace, name) for name in DeltaTrace.model_fields}
        return 200, DeltaResponse(**fields, diagnostics=[diagnostic], memory=[]).model_dump_json()
    size = expanded_size(trace)
    if size > limit:
        return _too_large_for_v1(size, limit)
    v1 = expand(trace)
    fields = {name: getattr(v1, name) for name in RunResult.model_fields}
    return 200, RunResponse.model_construct(**fields, diagnostics=[diagnostic], memory=[]).model_dump_json()


@router.post("/api/run", response_model=RunResponse | DeltaResponse, response_model_exclude_none=False,
             openapi_extra=REQUEST_BODY)
async def run_snippet(request: Request) -> Response:
    """Run a snippet and return its line-by-line trace: v1 (every step whole) by default, the delta
    format (each step only what its line changed) for ``"format": "delta"``."""
    settings = request.app.state.settings
    refusal = await take_token(request)  # before the body is read
    form = "v1"
    if refusal is None:
        try:
            body = RunRequest.model_validate_json(await request.body())
        except ValidationError as error:
            raise RequestValidationError(error.errors(include_input=False)) from None
        form, code, limit, cuda = body.format, body.code, settings.max_result_bytes, body.cuda_on_cpu
        if len(code.encode()) > settings.max_code_bytes:
            params = {"kb": settings.max_code_bytes // 1024}
            error = RunError(kind="rejected", type="CodeTooLong", code="rejected.too_long_api", params=params,
                             message=english("rejected.too_long_api", params))
            return _json(_as_format(DeltaTrace(ok=False, steps=[], error=error), form), 413)
        # Worked out (and serialised) in the worker thread, under the request's budget.
        work = lambda trace: _answer(trace, code, form, limit)  # noqa: E731
        partial = lambda trace, note: _partial(trace, form, limit, note)  # noqa: E731
        if getattr(request.app.state.runner, "streams", False):
            streamed = Streamed(lambda: _Analysed(code, form, limit), work)
            answer = await run_gated_streamed(request, code, streamed, partial, cuda_on_cpu=cuda)
        else:
            answer = await run_gated(request, code, work, partial, cuda_on_cpu=cuda)
        if not isinstance(answer, Refusal):
            return _json(answer[1], answer[0])
        refusal = answer
    return _json(_as_format(refusal.as_result(), form), refusal.status,
                 {"Retry-After": str(refusal.retry_after)})


@router.get("/healthz")
async def healthz(request: Request) -> JSONResponse:
    """200 when the server can run snippets; the sandbox layers in force either way."""
    state = request.app.state
    runner = state.runner
    health = runner.health() if hasattr(runner, "health") else {"ok": True, "runner": type(runner).__name__}
    # The shared parts never decide "ok": a replica that lost Redis still serves (app.web.rate), and
    # a load balancer that took every replica out over it would turn a Redis outage into a site one.
    health["rate"] = await run_in_threadpool(state.rate_limiter.health)
    # How busy this replica is: runs holding a slot and requests waiting for one (app.sandbox.admission).
    health["admission"] = {"running": state.admission.running, "queued": state.admission.queued}
    health["cache"] = await run_in_threadpool(state.run_cache.health)
    return JSONResponse(health, status_code=200 if health["ok"] else 503)

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
from app.web.gzipped import Gzipped, Part, member, part
from app.web.streamed import Streamed

router = APIRouter()
# The body is read by the route itself (after the rate-limit token), so the schema is declared here.
REQUEST_BODY = {"requestBody": {"required": True, "content": {"application/json": {
    "schema": RunRequest.model_json_schema()}}}}

Answer = tuple[int, str | Gzipped]  # HTTP status, JSON body (or gzip-encoded already)


def _json(body: str | Gzipped, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    if isinstance(body, Gzipped):  # (said as GZipMiddleware says it, which passes it on as it is)
        headers = {**(headers or {}), "Content-Encoding": "gzip", "Vary": "Accept-Encoding"}
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
    it, the same text ``_answer`` writes. ``gzip``: the client takes gzip; a run of more steps than
    that has them compressed as they are written too, and its answer is gzip-encoded here
    (``app.web.gzipped``: the same bytes once decoded)."""

    def __init__(self, code: str, form: str, limit: int, gzip: bool = False) -> None:
        self.code, self.form, self.limit, self.gzip = code, form, limit, gzip
        self.analysis = Analysis(None, code)
        self._pending: list[DeltaStep] = []  # steps fed and not yet written
        self._written: list[bytes] = []  # the JSON of the steps before them, commas between
        self._deflated: Part | None = None  # and compressed, once there were DUMP_EVERY
        self._count = 0  # steps fed

    def add(self, delta: DeltaStep) -> None:
        self.analysis.add(delta)
        self._count += 1
        if self.form == "delta":
            self._pending.append(delta)
            if len(self._pending) >= DUMP_EVERY:
                if self.gzip and self._deflated is None:
                    self._deflated = Part()
                self._write()

    def _write(self) -> None:
        if self._pending:
            text = STEPS.dump_json(self._pending)[1:-1]
            self._pending = []
            if self._written:
                text = b"," + text
            self._written.append(text)
            if self._deflated is not None:
                self._deflated.add(text)

    def finish(self, trace: DeltaTrace) -> Answer:
        self.analysis.bind(trace)
        if self.form != "delta" or len(trace.steps) != self._count:
            return _answer(trace, self.code, self.form, self.limit, self.analysis.result)
        self._write()
        document = analyze(trace.model_copy(update={"steps": []}), self.code,
                           self.analysis.result()).model_dump_json().encode()
        at = document.index(NO_STEPS)  # the only such text in it: ``"`` is escaped in strings
        head, end = document[:at] + b'"steps":[', b"]" + document[at + len(NO_STEPS):]
        written, self._written = self._written, []
        if self._deflated is None:
            return 200, b"".join((head, *written, end)).decode()
        return 200, member((part(head), self._deflated.end(), part(end, last=True)), (head, *written, end))


DUMP_EVERY = 256  # steps written as JSON at a time while the run goes on
STEPS = TypeAdapter(list[DeltaStep])
NO_STEPS = b'"steps":[]'


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
            gzip = "gzip" in request.headers.get("accept-encoding", "")  # as GZipMiddleware asks
            streamed = Streamed(lambda: _Analysed(code, form, limit, gzip), work)
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

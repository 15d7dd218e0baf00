"""The playground: the page at ``/`` and the ``POST /run`` fragment htmx swaps into it.

All HTML comes from Jinja templates with autoescape on; user strings (names, prints, error messages)
only ever reach the page as escaped text or inside ``<script type="application/json">`` through
``tojson``. The Content-Security-Policy forbids inline scripts and styles altogether.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar, cast
from urllib.parse import urlencode

from fastapi import APIRouter, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import FileResponse, HTMLResponse, PlainTextResponse, Response

from app import i18n
from app.diagnostics import Analysis, report
from app.gallery import EXAMPLES, Example, get_example, localized
from app.i18n import gettext as _
from app.render.compare import CompareView, code_pair, compare_view, heading, shown, twin_pair
from app.render.explorer import ExplorerBuild
from app.render.notices import RunLimits
from app.run_errors import TEMPLATES, Message, english
from app.schema import DeltaStep, DeltaTrace, RunError

# The templates' environment lives beside the standalone page's renderer (no FastAPI there); its names
# are still importable from here.
from app.templating import GRAPH_VENDOR, fragment_context, render, run_context
from app.templating import templates as templates
from app.templating import tojson as tojson
from app.units import fmt_bytes
from app.web.forms import BAD_FORM, TOO_LONG, read_form
from app.web.gates import (
    Drawing,
    Refusal,
    finish,
    run_gated,
    run_gated_all,
    run_gated_streamed,
    run_options,
    take_token,
)
from app.web.permalink import PermalinkError, decode_code, decode_pair, encode_code
from app.web.streamed import Streamed

T = TypeVar("T")

ROOT = Path(__file__).resolve().parents[2]
HTMX = ROOT / "node_modules" / "htmx.org" / "dist" / "htmx.min.js"
SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; base-uri 'self'; form-action 'self'; object-src 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
}


router = APIRouter()


def html_response(body: str, status: int = 200) -> Response:
    """HTML with the security headers (GZipMiddleware compresses the large ones: a 1000-step run is
    megabytes of markup)."""
    # One URL answers a page or a fragment, in the reader's language (app.web.locale)
    headers = {**SECURITY_HEADERS, "Vary": "HX-Request, Accept-Language, Cookie",
               "Content-Language": i18n.current_tag()}
    return Response(body, status_code=status, headers=headers, media_type="text/html; charset=utf-8")


def run_limits(settings: Any) -> RunLimits:
    """The limits the notices quote: the server's settings."""
    return RunLimits(settings.max_steps, settings.wall_seconds, settings.cpu_seconds,
                     settings.max_result_bytes, settings.max_stdout_bytes, settings.memory_mib)


class StreamedRunContext:
    """``run_context`` for steps fed as the run makes them (``app.web.streamed``; the pool validated
    and checked each one, ``app.sandbox.runner.AnswerReader``)."""

    def __init__(self, code: str, step: int | None, limits: RunLimits) -> None:
        self.code, self.step, self.limits = code, step, limits
        self.analysis = Analysis(None, code)
        self.build = ExplorerBuild([self.analysis])

    def add(self, delta: DeltaStep) -> None:
        self.build.add(delta)

    def finish(self, result: DeltaTrace) -> dict[str, Any]:
        self.analysis.bind(result)
        view = self.build.finish(result, self.code, self.step, self.limits)
        return playground(fragment_context(view, result, self.code, self.analysis,
                                           try_link=try_fix_link(self.code)), self.code)


def compare_link(code: str, other: str, fix: bool = False) -> str:
    """The compare page of two codes (``fix``: the second is a finding's fix of the first)."""
    query = {"code": encode_code(code), "compare_code": encode_code(other)}
    if fix:
        query["fix"] = "1"
    return "/compare?" + urlencode(query)


def try_fix_link(code: str) -> Callable[[str], str]:
    """"Try this fix": the user's code beside the code a finding's patch makes of it."""
    return lambda fixed: compare_link(code, fixed, fix=True)


async def posted_form(request: Request) -> tuple[dict[str, str], str]:
    """The posted form and its ``code`` (shared by the page and the embed). A client over its rate
    gets an empty form: its body is never read (``run_posted_code`` answers the 429 message)."""
    if await take_token(request) is not None:
        return {}, ""
    # Form encoding can triple a byte (%E2%80%A6); the exact bound is checked after decoding.
    form = await read_form(request, 3 * request.app.state.settings.max_code_bytes + 1024)
    return form, form.get("code", "").replace("\r\n", "\n")  # browsers send textarea lines with CRLF


async def run_posted_code(request: Request, form: dict[str, str], code: str,
                          work: Callable[[DeltaTrace], T],
                          streamed: Callable[[], Streamed[T]] | None = None,
                          drawn_as: tuple[str, ...] = ()) -> T:
    """Run posted code (or say why not), then ``work`` on the answer under the request's budget.
    ``streamed``: the same work, able to start on the steps while the run goes on. ``drawn_as``: what
    besides the code the drawing depends on (its template, step, view): then a drawing this process
    made before is the answer (``gates.Drawing``)."""
    settings = request.app.state.settings
    refusal = await take_token(request)
    if refusal is not None:
        result = refusal.as_result()
    elif TOO_LONG in form or len(code.encode()) > settings.max_code_bytes:
        result = _rejected("rejected.too_long", {"kb": settings.max_code_bytes // 1024})
    elif BAD_FORM in form:
        result = _rejected("rejected.bad_form")
    elif not code.strip():
        result = _rejected("rejected.no_code")
    else:
        cuda = form.get("cuda_on_cpu", "") in ("1", "on", "true")  # the page's "Run cuda on the CPU"
        drawing = Drawing.of(request, code, run_options(cuda), *drawn_as) if drawn_as else None
        if drawing is not None:
            drawn = await drawing.lookup()
            if drawn is not None:
                return cast(T, drawn)
            work = drawing.watch(work)
        partial = lambda r, note: work(partial_result(r, note))  # noqa: E731
        streams = streamed is not None and getattr(request.app.state.runner, "streams", False)
        with request.app.state.stops.open(form.get("run_id")) as stop:  # the reader's Stop (app.web.stops)
            if streams and streamed:
                fed = streamed()
                fed.made = drawing.made if drawing is not None else None
                ran = await run_gated_streamed(request, code, fed, partial, cuda_on_cpu=cuda, stop=stop)
            else:
                ran = await run_gated(request, code, work, partial, cuda_on_cpu=cuda)
        if not isinstance(ran, Refusal):
            if drawing is not None and isinstance(ran, str):
                drawing.keep(ran)
            return ran
        result = ran.as_result()
    return await finish(request, work, lambda r, note: work(partial_result(r, note)), result)


def download_href(code: str) -> str:
    """The Download button's link for a run of ``code`` (``app.web.download``)."""
    return "/download.html?" + urlencode({"code": encode_code(code)})


def playground(context: dict[str, Any], code: str) -> dict[str, Any]:
    """What the playground's fragment adds to a run's context: the Download button's link."""
    return {**context, "download": download_href(code)}


def partial_result(result: DeltaTrace, note: Message) -> DeltaTrace:
    """What a page shows when the server could not draw ``result`` (its budget ran out, or the answer
    is inconsistent): the run's output and a plain sentence, no views."""
    stdout = "".join(step.stdout for step in result.steps)
    message, params = str(note), dict(note.params)
    if stdout:
        params["output"] = stdout[-2000:]
        message += TEMPLATES["output.run_output"] + params["output"]
    error = RunError(kind="output", type="ServerBudget", message=message, code=note.code, params=params)
    return DeltaTrace(ok=False, steps=[], error=error)


def _rejected(code: str, params: dict[str, int] | None = None) -> DeltaTrace:
    error = RunError(kind="rejected", type="Rejected", message=english(code, params), code=code,
                     params=params or {})
    return DeltaTrace(ok=False, steps=[], error=error)


def _parse_step(raw: str | None) -> int | None:
    """``step`` in URLs and forms counts from 1; the view models count from 0."""
    if raw is None or not raw.strip().isdigit():
        return None
    return max(int(raw) - 1, 0)


@router.post("/run", response_class=HTMLResponse)
async def run_fragment(request: Request) -> HTMLResponse:
    """Run the posted snippet and answer the ``_run.html`` fragment (both views, all steps)."""
    settings = request.app.state.settings
    form, code = await posted_form(request)
    step = _parse_step(form.get("step"))

    limits = run_limits(settings)

    def draw(result: DeltaTrace) -> str:
        context = run_context(result, code, step, limits, try_fix_link(code))
        return render("_run.html", **playground(context, code))

    def streamed() -> Streamed[str]:
        return Streamed(lambda: Drawn.run(code, step, limits), draw)

    drawn_as = ("_run.html", str(step))
    return html_response(await run_posted_code(request, form, code, draw, streamed, drawn_as))


class Drawn:
    """Steps fed as the run makes them (``add``), then ``template`` drawn from ``context(result)``: the
    page's and the embed's fragments (``app.web.streamed``). The context is kept with the drawing:
    a large run's views are ~0.25 s to free, which is done beside the sending of the answer
    (``gates.run_gated_streamed`` holds the spent speculation until then)."""

    def __init__(self, template: str, add: Callable[[DeltaStep], None],
                 context: Callable[[DeltaTrace], dict[str, Any]]) -> None:
        self.template, self.add, self._context = template, add, context
        self.drawn: dict[str, Any] | None = None

    def finish(self, result: DeltaTrace) -> str:
        self.drawn = self._context(result)
        return render(self.template, **self.drawn)

    @classmethod
    def run(cls, code: str, step: int | None, limits: RunLimits) -> Drawn:
        """The playground's ``_run.html``."""
        context = StreamedRunContext(code, step, limits)
        return cls("_run.html", context.add, context.finish)


MAX_SHOWN_ADDRESS = 200  # characters of a failing address quoted on the error page


def error_page(request: Request, status: int, title: str, message: str) -> Response:
    """The one error page for a link the playground cannot open: the reason, the address as given
    (the browser's address bar keeps it too: no redirect), and a way on."""
    address = str(request.url.path) + (f"?{request.url.query}" if request.url.query else "")
    if len(address) > MAX_SHOWN_ADDRESS:
        address = address[:MAX_SHOWN_ADDRESS] + "…"
    body = render("error.html", status=status, title=title, message=message, address=address,
                  examples=[localized(e) for e in EXAMPLES])
    return html_response(body, status)


@router.get("/", response_class=HTMLResponse)
async def index(request: Request) -> Response:
    """The playground. ``?code=<token>&step=<n>`` is a permalink, ``?s=<id>`` a stored short link
    (``/s/<id>`` sends snippets too long for a URL here), ``?example=<slug>`` a gallery example; a
    link that names none of these opens the first example, one that cannot be opened the error page."""
    params = request.query_params
    settings = request.app.state.settings
    code, selected = localized(EXAMPLES[0]).code, EXAMPLES[0].slug
    if params.get("code"):
        try:
            code, selected = decode_code(params["code"], settings.max_code_bytes), ""
        except PermalinkError as error:
            return error_page(request, 400, _("This link's code cannot be opened"), str(error))
    elif params.get("s"):
        stored = await _stored_code(request, params["s"])
        if stored is None:
            return error_page(request, 404, _("This short link does not exist here"),
                              _("No snippet is stored under this id on this server (or short links are "
                                "unavailable right now)."))
        code, selected = stored, ""
    elif params.get("example"):
        example = get_example(params["example"])
        if example is None:
            return error_page(request, 404, _("There is no such example"),
                              _("The gallery has no example called {name}.").format(
                                  name=repr(params["example"][:60])))
        code, selected = localized(example).code, example.slug
    step = _parse_step(params.get("step"))
    examples = [localized(e) for e in EXAMPLES]
    body = render(
        "index.html", code=code, examples=examples, selected=selected,
        step=None if step is None else step + 1, gallery=[_example_json(e) for e in examples],
        cuda_on_cpu=params.get("cuda") == "1",
    )
    return html_response(body)


async def _stored_code(request: Request, link_id: str) -> str | None:
    store = getattr(request.app.state, "links", None)
    if store is None:
        return None
    try:
        return await run_in_threadpool(store.get, link_id)  # sqlite / PostgreSQL: blocking
    except Exception:  # noqa: BLE001 - a store that is down is a link that cannot be opened now
        return None


async def run_compare(request: Request, pair: tuple[Example, Example], step: int | None,
                      draw: Callable[[CompareView, tuple[DeltaTrace, ...]], T],
                      partial: Callable[[Message], T], is_fix: bool = False) -> T | Refusal:
    """Run both sides of a gallery pair (counted as two runs: ``run_gated_all``) and ``draw`` them
    (with the answers they were drawn from, whose errors say whether the drawing may be kept);
    ``partial(note)`` when the server could not draw them within its budget."""
    bug, fix = pair
    limits = run_limits(request.app.state.settings)
    codes = shown(bug, fix).code, shown(fix, bug).code

    def both(traces: tuple[DeltaTrace, ...]) -> T:
        # the web layer asks for the analyses (the rules run here) and hands them to the view
        found = (report(traces[0], codes[0]), report(traces[1], codes[1]))
        return draw(compare_view(bug, fix, traces, step, limits, found, try_link=try_fix_link(codes[0]),
                                 is_fix=is_fix), traces)

    return await run_gated_all(request, codes, both, lambda _traces, note: partial(note))


@router.get("/compare", response_class=HTMLResponse)
async def compare_page(request: Request) -> Response:
    """Bug vs fix: ``?example=<slug>`` (either side of a gallery pair), or any two codes
    ``?code=<token>&compare_code=<token>``; ``&step=N`` (the first side's)."""
    query = request.query_params
    is_fix, edit = query.get("fix") == "1", None
    if query.get("code", "").strip() or query.get("compare_code", "").strip():
        tokens = query.get("code", "").strip(), query.get("compare_code", "").strip()
        try:
            pair = code_pair(*decode_pair(*tokens, request.app.state.settings.max_code_bytes))
        except PermalinkError as error:
            return error_page(request, 400, _("This link's code cannot be opened"), str(error))
        labels = ((_("Open your code in the playground"), _("Open the fix in the playground")) if is_fix else
                  (_("Open code A in the playground"), _("Open code B in the playground")))
        opens = [(f"/?{urlencode({'code': token})}", label, testid) for token, label, testid in (
            (tokens[0], labels[0], "open-bug"), (tokens[1], labels[1], "open-fix"))]
        # the second side can be edited and both run again
        edit = {"code": tokens[0], "fix": "1" if is_fix else ""}
    else:
        is_fix = False
        slug = query.get("example", "")
        pair = twin_pair(slug)
        if pair is None:
            return error_page(request, 404, _("There is nothing to compare"),
                              _("Only a gallery example with a fixed twin can be compared with it; {name} is "
                                "not one.").format(name=repr(slug[:60])))
        opens = [(f"/?{urlencode({'example': bug.slug})}", label, testid) for bug, label, testid in (
            (pair[0], _("Open the bug in the playground"), "open-bug"),
            (pair[1], _("Open the fix in the playground"), "open-fix"))]
    title = heading(shown(pair[0], pair[1]), shown(pair[1], pair[0]), is_fix)

    def page(view: CompareView | None = None, problem: tuple[str, str] | None = None) -> str:
        return render("compare.html", heading=title, compare=view, which="both", problem=problem,
                      opens=opens, compare_peak=fmt_bytes(view.peak) if view else "", edit=edit)

    ran = await run_compare(request, pair, _parse_step(request.query_params.get("step")),
                            lambda view, _traces: page(view),
                            lambda note: page(problem=(_("Cannot draw this run"), i18n.say(note))), is_fix)
    if isinstance(ran, Refusal):
        refused = html_response(page(problem=(ran.heading, ran.message)), ran.status)
        refused.headers["Retry-After"] = str(ran.retry_after)
        return refused
    return html_response(ran)


@router.post("/compare", response_class=HTMLResponse)
async def compare_edited(request: Request) -> Response:
    """The compare's second side, edited and run again: ``code`` (the first side's token, unchanged),
    ``compare_source`` (the edited code) and ``fix``; answered with the compare page's address (303),
    so the page after it is a link like any other."""
    settings = request.app.state.settings
    form = await read_form(request, 3 * 2 * settings.max_code_bytes + 1024)
    if TOO_LONG in form or BAD_FORM in form:
        kb = settings.max_code_bytes // 1024
        return error_page(request, 413, _("This code is too long to compare"),
                          _("Each side may hold at most {kb} KB of code.").format(kb=kb))
    edited = form.get("compare_source", "").replace("\r\n", "\n")
    try:
        first = decode_code(form.get("code", ""), settings.max_code_bytes)
        if len(edited.encode()) > settings.max_code_bytes:
            raise PermalinkError(_("The edited code is longer than {kb} KB.").format(
                kb=settings.max_code_bytes // 1024))
    except PermalinkError as error:
        return error_page(request, 400, _("This code cannot be compared"), str(error))
    address = compare_link(first, edited, fix=form.get("fix") == "1")
    return Response(status_code=303, headers={**SECURITY_HEADERS, "Location": address})


def _example_json(example: Any) -> dict[str, str]:
    return {"slug": example.slug, "title": example.title, "summary": example.summary, "code": example.code}


@router.get("/static/vendor/htmx.min.js", include_in_schema=False, response_model=None)
async def htmx_script() -> FileResponse | PlainTextResponse:
    """htmx from the npm package (``npm ci`` in scripts/setup installs it); never from a CDN."""
    if not HTMX.is_file():
        return PlainTextResponse("htmx is not installed: run scripts/setup (npm ci).", status_code=503)
    return FileResponse(HTMX, media_type="text/javascript", headers={"Cache-Control": "public, max-age=3600"})


@router.get("/static/vendor/{name}.min.js", include_in_schema=False, response_model=None)
async def graph_vendor_script(name: str) -> FileResponse | PlainTextResponse:
    """The graph viewer's d3 modules from their npm packages (pinned in package-lock.json)."""
    if name not in GRAPH_VENDOR:
        return PlainTextResponse("Not found", status_code=404)
    path = ROOT / "node_modules" / name / "dist" / f"{name}.min.js"
    if not path.is_file():
        return PlainTextResponse(f"{name} is not installed: run scripts/setup (npm ci).", status_code=503)
    return FileResponse(path, media_type="text/javascript", headers={"Cache-Control": "public, max-age=3600"})

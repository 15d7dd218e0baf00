"""Runs at real size (issue 9): the leak the product exists to show, through the real server and a
real Chromium, and the page's own share measured in process on the same traces.

Scenarios: a 6-line loop that appends a 16-element loss tensor to a list, 100 and 1,000 times, and a
100-epoch Adam loop on a small MLP that appends its loss tensor. For each: how many steps and whether
the run was whole, ``POST /api/run`` with ``"format": "delta"`` and ``POST /run`` (the fragment) —
time and gzipped bytes on the wire —, then in Chromium click → drawn (and the part after the answer
arrived), the longest main-thread task after the draw (PerformanceObserver ``longtask``), and step
switching on the ×1000 run. In process, on the trace the API answered, every server stage after
the engine: reading the worker's bytes (schema validation, the consistency check), the API's
analysis and its JSON, ``build_explorer``, the template render and the page's diagnostics, so the
server's figure is visible apart from the engine's.

The bench server runs on the embedded defaults (the 5 s wall and CPU limits, 512 MiB), as a user
meets it: "not whole" says a limit cut the run (the steps row then says which limit, from the
trace's error). ``EXPLORER_BENCH_SCALE`` picks scenarios (``leak100,leak1000,adam,backward,
nobackward``; default: all). Needs the test extras (playwright) and Debian's chromium for the
browser rows.
"""

from __future__ import annotations

import math
import os
import statistics
import time
from dataclasses import dataclass

import httpx

from app.bench import Row
from app.bench.cluster_kit import server_timing
from app.bench.http import BenchServer
from app.bench.snippets import ADAM, DEEP_BACKWARD, LEAK
from app.bench.stepping import MEASURE, launch_chromium, playwright_here

HTTP_TIMEOUT = 120
SETTLE_SECONDS = 2.0  # after the draw, how long long tasks are watched for
IN_PROCESS_PASSES = 3


@dataclass(frozen=True)
class Scenario:
    key: str
    name: str
    code: str
    api_ms: float | None = None  # targets (issue 9's table); None: informative
    fragment_ms: float | None = None
    wire_kb: float | None = None
    drawn_ms: float | None = None
    stepping: bool = False


SCENARIOS = [
    Scenario("leak100", "leak ×100", LEAK.format(n=100), 500, 1000, 150, 1000),
    Scenario("leak1000", "leak ×1000", LEAK.format(n=1000), 2000, None, None, 3000, stepping=True),
    Scenario("adam", "Adam ×100", ADAM, 1500, 1500),
    # issue 13: the page's cost of a 402-node backward pass (one step per node), against the same
    # 200-iteration chain without it; the page's share is the difference of the in-process rows
    Scenario("backward", "chain ×200, backward (402 nodes)", DEEP_BACKWARD.format(last="loss.backward()"),
             stepping=True),
    Scenario("nobackward", "chain ×200, no backward", DEEP_BACKWARD.format(last="pass")),
]

# Installed before the click: when the click happened, when the answer arrived, when the new run
# was on screen (two frames after the explorer took it), and every long task.
WATCH = """() => {
  const bench = window.__bench = {tasks: [], runs: AX.runs};
  new PerformanceObserver((list) => {
    for (const e of list.getEntries()) bench.tasks.push([e.startTime, e.duration]);
  }).observe({type: "longtask"});
  document.querySelector("[data-testid=run]").addEventListener("click", () => {
    bench.clicked = performance.now();
  }, {capture: true, once: true});
  document.body.addEventListener("htmx:beforeSwap", () => {
    bench.answered = performance.now();
  }, {once: true});
  const check = () => {
    if (AX.runs > bench.runs) {
      requestAnimationFrame(() => requestAnimationFrame(() => { bench.drawn = performance.now(); }));
    } else requestAnimationFrame(check);
  };
  requestAnimationFrame(check);
}"""


API_REPEATS = 3


def _timed_post(client: httpx.Client, url: str, **kwargs) -> tuple[httpx.Response, float]:
    started = time.perf_counter()
    response = client.post(url, **kwargs)
    return response, (time.perf_counter() - started) * 1000


def _server_timing(response: httpx.Response, name: str) -> float:
    """One entry of the answer's ``Server-Timing`` (``app.web.limits``), in ms (NaN: not sent)."""
    return server_timing(response).get(name, math.nan)


def _in_process(delta: dict, code: str) -> dict[str, float]:
    """The server's own work on the trace the API answered: reading the worker's bytes (schema,
    consistency), the API's analysis and JSON, and the page's view model, template, diagnostics —
    with the cyclic collector paused, as the server does all of it (app/sandbox/runner.py,
    app/web/work.py; unpaused, the page's diagnostics measured the collector's rescans too)."""
    from app.heap import collector_paused

    with collector_paused():
        return _stages(delta, code)


def _stages(delta: dict, code: str) -> dict[str, float]:
    import json

    from app.diagnostics import Analysis, analyze
    from app.render import build_explorer, client_payload, frame_at
    from app.render.findings import findings_context
    from app.schema import DeltaTrace
    from app.trace.consistency import Bounds, problem
    from app.web.pages import render

    fields = {name: delta[name] for name in DeltaTrace.model_fields if name in delta}
    # the bytes the worker sends: strict JSON, compact (app/sandbox/child.py)
    sent = json.dumps(fields, allow_nan=False, separators=(",", ":"), ensure_ascii=False).encode()
    started = time.perf_counter()
    trace = DeltaTrace.model_validate_json(sent)
    validated = time.perf_counter()
    problem(trace, Bounds(lines=code.count("\n") + 1))
    checked = time.perf_counter()
    analyze(trace, code).model_dump_json()
    answered = time.perf_counter()
    reading = {"validate": (validated - started) * 1000, "consistency": (checked - validated) * 1000,
               "answer": (answered - checked) * 1000}
    started = time.perf_counter()
    fed = Analysis(trace, code)  # as app.web.pages.run_context: one replay feeds views and diagnostics
    view = build_explorer(trace, code, also=[fed])
    built = time.perf_counter()
    diagnostics = findings_context(fed.report(), code, view.initial)
    diagnosed = time.perf_counter()
    html = render("_run.html", view=view, frame=frame_at(view), payload=client_payload(view), **diagnostics)
    rendered = time.perf_counter()
    return {**reading, "build": (built - started) * 1000, "diagnostics": (diagnosed - built) * 1000,
            "render": (rendered - diagnosed) * 1000, "page": (rendered - started) * 1000,
            "html_kb": len(html.encode()) / 1024,
            "elements": html.count("data-k="), "runs": view.tracks.runs()}


def _browser(url: str, scenarios: list[Scenario]) -> dict[str, dict[str, float]]:
    sync_playwright = playwright_here("scale")
    if sync_playwright is None:
        return {}

    found: dict[str, dict[str, float]] = {}
    with sync_playwright() as playwright:
        browser = launch_chromium(playwright)
        page = browser.new_page(viewport={"width": 1440, "height": 900})
        page.set_default_timeout(HTTP_TIMEOUT * 1000)
        page.goto(url + "/")
        page.wait_for_function("() => window.AX && AX.runs > 0")
        for scenario in scenarios:
            page.get_by_test_id("code").fill(scenario.code)
            page.evaluate(WATCH)
            page.get_by_test_id("run").click()
            page.wait_for_function("() => window.__bench.drawn !== undefined", polling=100)
            time.sleep(SETTLE_SECONDS)
            bench = page.evaluate("window.__bench")
            after = [d for start, d in bench["tasks"] if start >= bench["drawn"]]
            during = [d for start, d in bench["tasks"] if start >= bench.get("answered", 0)]
            figures = {
                "drawn": bench["drawn"] - bench["clicked"],
                "page": bench["drawn"] - bench.get("answered", bench["clicked"]),
                "longest_after": max(after, default=0.0),
                "longest_drawing": max(during, default=0.0),
                "count": page.evaluate("AX.explorer.count"),
                "setup": page.evaluate("AX.setupMs"),
                "dom": page.evaluate("document.querySelectorAll('#run *').length"),
            }
            if scenario.stepping:
                stats = page.evaluate(MEASURE)
                figures |= {"switch_median": stats["median"], "switch_p95": stats["p95"],
                            "switches": stats["count"]}
            found[scenario.name] = figures
        browser.close()
    return found


def _chosen() -> list[Scenario]:
    names = os.environ.get("EXPLORER_BENCH_SCALE", "")
    if not names.strip():
        return SCENARIOS
    wanted = {n.strip() for n in names.split(",")}
    return [s for s in SCENARIOS if s.key in wanted]


def run() -> list[Row]:
    scenarios = _chosen()
    server = BenchServer()
    rows: list[Row] = []
    try:
        with httpx.Client(timeout=HTTP_TIMEOUT) as client:
            for s in scenarios:
                body = {"code": s.code, "format": "delta"}
                # The first request of a size also pays the server's own first growth (heap, the
                # fork server's next child): the median of a few is the figure, the first is said too.
                timed = [_timed_post(client, f"{server.url}/api/run", json=body) for _ in range(API_REPEATS)]
                api, first_ms = timed[0]
                api_ms = statistics.median(ms for _, ms in timed)
                # the median request's own split, as the server measured it
                median_answer = sorted(timed, key=lambda pair: pair[1])[len(timed) // 2][0]
                delta = api.json()
                fragment, fragment_ms = _timed_post(client, f"{server.url}/run", data={"code": s.code},
                                                    headers={"HX-Request": "true"})
                steps = len(delta.get("steps", []))
                error = delta.get("error") or {}
                whole = api.status_code == 200 and not delta.get("truncated") and not error
                cut = "" if whole else f" (cut: {error.get('type') or 'truncated'})"
                rows += [
                    Row("scale", s.name, "steps" + cut, steps, "steps"),
                    Row("scale", s.name, "not whole (0: whole)", 0 if whole else 1, "", 0),
                    Row("scale", s.name, f"/api/run delta (median of {API_REPEATS})", api_ms, "ms", s.api_ms),
                    Row("scale", s.name, "/api/run delta, the first request", first_ms, "ms"),
                    Row("scale", s.name, "/api/run delta: sandbox (Server-Timing)",
                        _server_timing(median_answer, "sandbox"), "ms"),
                    Row("scale", s.name, "/api/run delta: server work (Server-Timing)",
                        _server_timing(median_answer, "work"), "ms"),
                    Row("scale", s.name, "POST /run fragment", fragment_ms, "ms", s.fragment_ms),
                    Row("scale", s.name, "/api/run delta, gzip on the wire", api.num_bytes_downloaded / 1024,
                        "KB", s.wire_kb),
                    Row("scale", s.name, "fragment, gzip on the wire", fragment.num_bytes_downloaded / 1024,
                        "KB", s.wire_kb),
                ]
                # the best of a few: on a shared machine one pass also measures the neighbours (and
                # the first pays for warming up: the catalog, graphviz's wasm)
                passes = [_in_process(delta, s.code) for _ in range(IN_PROCESS_PASSES)]
                own = {key: min(p[key] for p in passes) for key in passes[0]}
                rows += [
                    Row("scale", s.name, "in process: schema validation", own["validate"], "ms"),
                    Row("scale", s.name, "in process: consistency check", own["consistency"], "ms"),
                    Row("scale", s.name, "in process: /api/run analysis + JSON", own["answer"], "ms"),
                    Row("scale", s.name, "in process: build_explorer (+ the diagnostics index, one replay)",
                        own["build"], "ms"),
                    Row("scale", s.name, "in process: template render", own["render"], "ms"),
                    Row("scale", s.name, "in process: diagnostics (rules, chart)", own["diagnostics"], "ms"),
                    Row("scale", s.name, "in process: the page (build + diagnostics + render)", own["page"],
                        "ms"),
                    Row("scale", s.name, "fragment, uncompressed", own["html_kb"], "KB"),
                    Row("scale", s.name, "elements with a key (data-k)", own["elements"], ""),
                    Row("scale", s.name, "runs the page replays", own["runs"], ""),
                ]
        for name, b in _browser(server.url, scenarios).items():
            s = next(x for x in scenarios if x.name == name)
            rows += [
                Row("scale", name, "click → drawn (Chromium)", b["drawn"], "ms", s.drawn_ms),
                Row("scale", name, "answer → drawn (the page's part)", b["page"], "ms"),
                Row("scale", name, "explorer.js set-up (parse, index, first step)", b["setup"], "ms"),
                Row("scale", name, "longest task after the draw", b["longest_after"], "ms", 200),
                Row("scale", name, "longest task while drawing", b["longest_drawing"], "ms"),
                Row("scale", name, "elements in #run", b["dom"], ""),
            ]
            if "switch_median" in b:
                case = f"{name}: step switch ({b['switches']:.0f} switches)"
                rows += [Row("scale", case, "median", b["switch_median"], "ms", 16),
                         Row("scale", case, "p95", b["switch_p95"], "ms", 50)]
    finally:
        server.stop()
    return rows


"""The graph view at real size: layout engines compared, server time, labels on screen, ``/run``.

Rows:

* **layout engines** — grandalf (the old engine), igraph's Sugiyama and Graphviz dot (the one we use)
  on the same vertices and edges: time and layered edge crossings (edges cut at every rank they
  pass; pairs whose order flips between two ranks). grandalf and igraph come with the
  ``layout-candidates`` extra (``pip install -e '.[layout-candidates]'``); missing ones are skipped.
* **server** — the graph's own work for a whole run: the delta replay fed to ``GraphBuilder``,
  folding, layout (dot warm) and the ``_graph.html`` markup of the first step. The traces come from
  ``app.engine.trace_delta`` in process (the engine's time is not counted); the 1,000-iteration leak
  is the engine's 3-iteration trace extended to 1,000 iterations (``extend_loop``; a test checks the
  extension against the engine's own trace), since today's engine names at most 256 list items and
  takes minutes at 3,000 steps.
* **browser** — the 20-step RNN at 1440×900 in Chromium: label size on screen (font size × zoom)
  at the default view and after one "Zoom in" click.
* **http** — ``POST /run`` of a one-line snippet making 2,000 unconnected tensors, through a real
  server and its sandbox (engine included).
"""

from __future__ import annotations

import copy
import re
import time
from collections import Counter
from typing import Any

from app.bench import Row

RNN = (
    "W = torch.randn(8, 8, requires_grad=True)\n"
    "U = torch.randn(8, 4, requires_grad=True)\n"
    "xs = torch.randn(20, 4)\n"
    "h = torch.zeros(8)\n"
    "for t in range(20):\n"
    "    h = torch.tanh(W @ h + U @ xs[t])\n"
    "loss = h.sum()\n"
)
CNN = (
    "model = nn.Sequential(nn.Conv2d(1, 4, 3), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(4, 8, 3), nn.ReLU(),\n"
    "                      nn.Flatten(), nn.Linear(8 * 4 * 4, 10))\n"
    "x = torch.randn(2, 1, 14, 14)\n"
    "loss = F.cross_entropy(model(x), torch.tensor([1, 3]))\n"
    "loss.backward()\n"
)
UNCONNECTED = "ps = [[torch.zeros(1, requires_grad=True) for _ in range(50)] for _ in range(40)]\n"


def leak(iterations: int) -> str:
    return (
        "w = torch.randn(4, requires_grad=True)\n"
        "losses = []\n"
        f"for i in range({iterations}):\n"
        "    loss = (w * i).exp().sum()\n"
        "    losses.append(loss)\n"
    )


LEAK_FIRST, LEAK_PERIOD = 2, 3  # leak(): two set-up steps, then 3 steps (lines 3, 4, 5) per iteration
_ID = re.compile(r"^([tsn])(\d+)$")
_INDEX = re.compile(r"\[(\d+)\]")


def extend_loop(trace: dict, first: int, period: int, iterations: int) -> dict:
    """The engine's trace of a loop, extended to ``iterations``: iteration k repeats iteration 1
    (the second, in steady state) with every id born in it moved on by k - 1 times the ids one
    iteration takes, and list indices ``[1]`` read ``[k]``. The steps after the loop follow."""
    steps = trace["steps"]
    one = steps[first + period:first + 2 * period]
    two = steps[first + 2 * period:first + 3 * period]
    tail = steps[first + period * _iterations(steps, first, period):]
    born = {kind: _born(one, kind) for kind in "tsn"}
    shift = {kind: min(_born(two, kind) or {0}) - min(born[kind] or {0}) for kind in "tsn"}

    def move(value: Any, k: int) -> Any:
        if isinstance(value, str):
            found = _ID.match(value)
            if found and int(found.group(2)) in born[found.group(1)]:
                kind, number = found.group(1), int(found.group(2))
                return f"{kind}{number + shift[kind] * (k - 1)}"
            return value
        if isinstance(value, list):
            return [move(v, k) for v in value]
        if isinstance(value, dict):
            return {_index(move(key, k), k): move(v, k) for key, v in value.items()}
        return value

    out = copy.deepcopy(trace)
    out["steps"] = steps[:first + period] + [move(s, k) for k in range(1, iterations) for s in one] + tail
    return out


def _index(key: Any, k: int) -> Any:
    if not isinstance(key, str):
        return key
    return _INDEX.sub(lambda m: f"[{k}]" if m.group(1) == "1" else m.group(0), key)


def _born(steps: list[dict], kind: str) -> set[int]:
    group = {"t": "tensors", "s": "storages", "n": "nodes"}[kind]
    return {int(ident[1:]) for step in steps for ident in step.get(group, {})}


def _iterations(steps: list[dict], first: int, period: int) -> int:
    """How many iterations the trace holds: each starts at the loop's line and goes into its body."""
    lines = [step["line"] for step in steps]
    count = 0
    while first + count * period + 1 < len(lines):
        start = first + count * period
        if lines[start] != lines[first] or lines[start + 1] == lines[first]:
            break
        count += 1
    return count


# ---------- the layout engines compared ---------------------------------------------------------

def _graph_of(trace) -> tuple[list[tuple[str, float, float]], list[tuple[str, str]]]:  # noqa: ANN001
    """Every vertex and edge the run ever shows (the unfolded view's union), with box sizes."""
    from app.render.graph_draw import unit_size
    from app.render.graph_events import GraphEvents
    from app.render.graph_fold import fold
    from app.render.steps import drive

    observer = GraphEvents()
    drive(trace, [observer])
    folding = fold(observer.events, "all", Counter())
    boxes = [(key, *unit_size(unit)[:2]) for key, unit in folding.units.items()]
    return boxes, list(folding.edges)


def _dot(boxes, edges):  # noqa: ANN001, ANN202
    from app.render import layout as engine

    # dot itself on every component, however large (none of the server's bounds or fuel ceilings)
    lifted = {"DOT_MAX": 10**9, "MAX_EDGES": 10**9, "MAX_CROSSED": 10**9, "MAX_RANK": 10**9,
              "CALL_FUEL": 10**15}
    saved = {name: getattr(engine, name) for name in lifted}
    vars(engine).update(lifted)
    try:
        placed = engine.lay_out([engine.Box(k, w, h, 0, 0) for k, w, h in boxes], edges,
                                engine.LayoutCache(fuel_left=10**15))
    finally:
        vars(engine).update(saved)
    return placed.centres, placed.routes


def _grandalf(boxes, edges):  # noqa: ANN001, ANN202
    import sys

    try:  # the layout-candidates extra
        from grandalf.graphs import Edge, Graph, Vertex
        from grandalf.layouts import SugiyamaLayout
        from grandalf.routing import EdgeViewer
    except ImportError:
        return None

    class View:
        def __init__(self, w: float, h: float) -> None:
            self.w, self.h, self.xy = w, h, (0.0, 0.0)

    limit = sys.getrecursionlimit()  # grandalf raises it and never puts it back
    vertices = {}
    for key, w, h in boxes:
        vertices[key] = Vertex(key)
        vertices[key].view = View(w, h)
    graph_edges = []
    for a, b in edges:
        edge = Edge(vertices[a], vertices[b])
        edge.view = EdgeViewer()
        graph_edges.append(edge)
    centres, routes, x = {}, {}, 0.0
    for component in Graph(list(vertices.values()), graph_edges).C:
        if len(component.sV) > 1:
            layout = SugiyamaLayout(component)
            layout.xspace, layout.yspace = 28, 34
            layout.init_all()
            layout.draw(3)
        left = min(v.view.xy[0] - v.view.w / 2 for v in component.sV)
        for v in component.sV:
            centres[v.data] = (v.view.xy[0] - left + x, v.view.xy[1])
        for e in component.sE:
            points = getattr(e.view, "_pts", [])
            routes[(e.v[0].data, e.v[1].data)] = [(px - left + x, py) for px, py in points]
        x += max(v.view.xy[0] + v.view.w / 2 for v in component.sV) - left + 32
    sys.setrecursionlimit(limit)
    return centres, routes


def _igraph(boxes, edges):  # noqa: ANN001, ANN202
    try:  # the layout-candidates extra
        import igraph
    except ImportError:
        return None

    index = {k: i for i, (k, _, _) in enumerate(boxes)}
    graph = igraph.Graph(n=len(boxes), edges=[(index[a], index[b]) for a, b in edges], directed=True)
    layout = graph.layout_sugiyama(hgap=1, vgap=1, maxiter=100)
    unit = max((w for _, w, _ in boxes), default=1) + 28  # igraph knows no box widths
    centres = {k: (layout[i][0] * unit, layout[i][1] * 64) for i, (k, _, _) in enumerate(boxes)}
    routes = {(a, b): [(x * unit, y * 64) for x, y in layout.edge_routing[n]]
              for n, (a, b) in enumerate(edges)}
    return centres, routes


ENGINES = {"grandalf": _grandalf, "igraph": _igraph, "dot": _dot}


def _x_at(points: list[tuple[float, float]], y: float) -> float | None:
    for (x1, y1), (x2, y2) in zip(points, points[1:], strict=False):
        if min(y1, y2) <= y <= max(y1, y2) and y1 != y2:
            return x1 + (x2 - x1) * (y - y1) / (y2 - y1)
    return None


def crossings(centres: dict, routes: dict) -> int:
    """Layered crossings: cut every edge at each rank between its ends; between two neighbouring
    ranks, count the pairs of edge pieces whose left-to-right order flips (ties and shared ends do
    not count). Engines draw routes differently (dot: Bézier control points, which the curve
    follows closely), so all are read as polylines through their points."""
    ranks = sorted({round(y) for _, y in centres.values()})
    gaps: dict[int, list[tuple[float, float]]] = {}
    for (a, b), points in routes.items():
        (ax, ay), (bx, by) = centres[a], centres[b]
        if ay > by:
            (ax, ay), (bx, by) = (bx, by), (ax, ay)
        line = sorted([(ax, ay), *points, (bx, by)], key=lambda p: p[1])
        inside = [r for r in ranks if round(ay) <= r <= round(by)]
        xs = [ax] + [(_x_at(line, r) or ax) for r in inside[1:-1]] + [bx] if len(inside) > 1 else []
        for i in range(len(xs) - 1):
            gaps.setdefault(inside[i], []).append((round(xs[i], 1), round(xs[i + 1], 1)))
    total = 0
    for pieces in gaps.values():
        pieces.sort()
        for i, (top, bottom) in enumerate(pieces):  # small per gap; fine for a benchmark
            total += sum(1 for t2, b2 in pieces[i + 1:] if t2 > top and b2 < bottom)
    return total


def compare(cases: list[tuple[str, Any]]) -> list[Row]:
    rows = []
    for engine in ENGINES.values():  # imports and start-up are not what is compared
        engine([("a", 40, 30), ("b", 40, 30)], [("a", "b")])
    for label, trace in cases:
        boxes, edges = _graph_of(trace)
        for name, engine in ENGINES.items():
            if name == "grandalf" and len(boxes) > 800:
                print(f"[graph] grandalf on {label} ({len(boxes)} vertices): skipped, it takes minutes")
                continue
            started = time.perf_counter()
            placed = engine(boxes, edges)
            elapsed = (time.perf_counter() - started) * 1000
            if placed is None:
                print(f"[graph] {name} is not installed (pip install -e '.[layout-candidates]'): skipped")
                continue
            centres, routes = placed
            case = f"layout {label} ({len(boxes):,} vertices, {len(edges):,} edges)"
            rows.append(Row("graph", case, f"{name} time", elapsed, "ms"))
            if len(edges) <= 5000:
                rows.append(Row("graph", case, f"{name} crossings", crossings(centres, routes), ""))
    return rows


# ---------- the server's share of a run -----------------------------------------------------------

def server_time(trace, code: str) -> tuple[float, float, Any]:  # noqa: ANN001
    """The graph's work for one run: replay, fold, lay out, and the panel's markup of one step.
    Wall-clock and this process's CPU time (the machine is shared: CPU time is our share).
    With the cyclic collector paused, as the server runs every piece of its work (``app.web.work``;
    ``app/heap.py``): unpaused, it rescans the growing heap at every step of the replay."""
    from app.heap import collector_paused
    from app.render.graph import GraphBuilder
    from app.render.steps import drive
    from app.render.tracks import Frame, Tracks
    from app.web.pages import templates

    started, cpu = time.perf_counter(), time.process_time()
    with collector_paused():
        tracks = Tracks()
        builder = GraphBuilder(tracks)
        count = drive(trace, [builder])
        graph = builder.finish(count)
        tracks.close(count)
        view = _GraphOnly(graph)
        templates.get_template("_graph.html").render(view=view, f=Frame(tracks, count - 1))
    return (time.perf_counter() - started) * 1000, (time.process_time() - cpu) * 1000, graph


class _GraphOnly:
    """What ``_graph.html`` reads of an ExplorerView: the graph, and the backward passes (none here)."""

    def __init__(self, graph) -> None:  # noqa: ANN001
        self.graph = graph
        self.passes = ()


def _trace(code: str):  # noqa: ANN202
    from app.engine import trace_delta
    from app.schema import DeltaTrace

    return DeltaTrace.model_validate(trace_delta(code))


def server_rows():  # noqa: ANN201 - rows and the two leak traces, for the comparison
    from app.engine import trace_delta
    from app.render.layout import DOT
    from app.schema import DeltaTrace

    started = time.perf_counter()
    DOT.render("digraph { a -> b }")  # compiles the module, or loads it from the cache
    warm = (time.perf_counter() - started) * 1000
    case = "dot start-up (once per process: compile, or load the cached module)"
    rows = [Row("graph", case, "time", warm, "ms")]
    leak100 = _trace(leak(100))
    leak1000 = DeltaTrace.model_validate(extend_loop(trace_delta(leak(3)), LEAK_FIRST, LEAK_PERIOD, 1000))
    for label, trace, code, target in (("leak ×100", leak100, leak(100), 300.0),
                                       ("leak ×1000", leak1000, leak(1000), 1000.0)):
        server_time(trace, code)  # the first run warms caches of the process, not of the run
        times = [server_time(trace, code) for _ in range(3)]
        graph = times[-1][2]
        nodes = len(graph.drawing("all").nodes)
        case = f"{label}: graph build + layout + HTML ({len(trace.steps):,} steps, default {graph.default})"
        rows.append(Row("graph", case, "wall time (best of 3)", min(t[0] for t in times), "ms", target))
        rows.append(Row("graph", case, "CPU time (best of 3)", min(t[1] for t in times), "ms"))
        rows.append(Row("graph", case, "boxes drawn unfolded (cap 500)", nodes, ""))
    return rows, leak100, leak1000


# ---------- the browser and the server over HTTP ------------------------------------------------

LABEL_PX = """() => {
  const shown = '#graph-view .drawing:not([hidden]) .node:not([hidden]) .label';
  const labels = [...document.querySelectorAll(shown)];
  const sizes = labels.map((l) => parseFloat(getComputedStyle(l).fontSize) * l.getScreenCTM().a);
  sizes.sort((a, b) => a - b);
  return {min: sizes[0], median: sizes[Math.floor(sizes.length / 2)], count: sizes.length};
}"""


def browser_rows() -> list[Row]:
    from app.bench.stepping import launch_chromium, playwright_here

    sync_playwright = playwright_here("graph")
    if sync_playwright is None:
        return []
    import httpx

    from app.bench.http import BenchServer

    server = BenchServer()
    rows = []
    try:
        with sync_playwright() as playwright:
            browser = launch_chromium(playwright)
            page = browser.new_page(viewport={"width": 1440, "height": 900})
            page.goto(server.url + "/")
            page.wait_for_function("() => window.AX && AX.runs > 0", timeout=120_000)
            page.get_by_test_id("code").fill(RNN)
            page.get_by_test_id("run").click()
            page.wait_for_function("() => AX.runs > 1 && AX.graph && AX.graph.transform", timeout=120_000)
            page.wait_for_timeout(300)
            default = page.evaluate(LABEL_PX)
            page.get_by_role("button", name="Zoom in").click()
            page.wait_for_timeout(300)
            zoomed = page.evaluate(LABEL_PX)
            browser.close()
        case = f"20-step RNN at 1440×900: label size on screen ({default['count']} labels)"
        rows.append(Row("graph", case, "median, default view", default["median"], "px"))
        rows.append(Row("graph", case, "smallest, after one Zoom in (target ≥ 11)", zoomed["min"], "px"))
        with httpx.Client(timeout=60) as client:
            client.post(server.url + "/run", data={"code": "x = torch.ones(1)\n"})  # a warm pool
            samples = []
            for _ in range(3):
                started = time.perf_counter()
                response = client.post(server.url + "/run", data={"code": UNCONNECTED})
                samples.append((time.perf_counter() - started) * 1000)
                if response.status_code != 200:
                    raise RuntimeError(f"/run failed: {response.status_code}")
        rows.append(Row("graph", "POST /run, 2,000 unconnected tensors (sandbox and engine included)",
                        "median of 3", sorted(samples)[1], "ms", 1000.0))
    finally:
        server.stop()
    return rows


def run() -> list[Row]:
    rows, leak100, leak1000 = server_rows()
    from app.gallery import get_example

    cases = [("gallery freeze-early-layers", _trace(get_example("freeze-early-layers").code)),
             ("small CNN", _trace(CNN)), ("20-step RNN", _trace(RNN)), ("leak ×100", leak100),
             ("leak ×1000", leak1000)]
    rows += compare(cases)
    rows += browser_rows()
    return rows

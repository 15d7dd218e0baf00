"""Bug vs fix (``/compare``, ``app/render/compare.py``): the server's share of drawing a pair, in
process on the engine's traces (made in a child process, like ``app.bench.analysis``).

Cases: every gallery pair, and the leak at real size beside its fix (``losses.append(loss.detach())``)
for 100 and 1,000 iterations. Rows: ``compare_view`` (both explorers, both analyses, the matching)
and the page's template render, then the step matching alone, whose 1,000 / 100 ratio says it is
linear in the steps (10 is linear).
"""

from __future__ import annotations

import time

from app.bench import Row
from app.bench.analysis import engine
from app.bench.snippets import LEAK
from app.diagnostics import report
from app.gallery import EXAMPLES, Example, get_example
from app.heap import collector_paused
from app.render.compare import CompareView, compare_view, line_map, step_map

REPEAT = 3


def _best(fn, repeat: int = REPEAT) -> float:  # noqa: ANN001 - any callable
    best = float("inf")
    for _ in range(repeat):
        started = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - started)
    return best * 1000


def _leak_pair(n: int) -> tuple[Example, Example]:
    bug = LEAK.format(n=n)
    fix = bug.replace("losses.append(loss)", "losses.append(loss.detach())")
    return (Example(f"leak-{n}", "leak", "appends its loss", bug, fixed_twin=f"leak-{n}-fixed"),
            Example(f"leak-{n}-fixed", "fixed", "appends a detached copy", fix))


def _measure(bug: Example, fix: Example) -> tuple[str, float, float, float]:
    """(case, compare_view ms, template ms, step matching ms) of one pair."""
    from app.web.pages import render  # the page's own templates (imports FastAPI: not at bench import)

    traces = (engine(bug.code)[1], engine(fix.code)[1])
    case = f"{bug.slug}, {len(traces[0].steps) + len(traces[1].steps):,} steps"

    def build() -> CompareView:  # as app.web.pages.run_compare: both analyses, then both views
        found = (report(traces[0], bug.code), report(traces[1], fix.code))
        return compare_view(bug, fix, traces, found=found)

    view = build()
    build_ms = _best(build)
    page_ms = _best(lambda: render("compare.html", heading="", compare=view, which="both", problem=None,
                                   opens=[], compare_peak="", edit=None))
    lines = line_map(bug.code, fix.code)
    match_ms = _best(lambda: step_map(view.bug.view.lines, view.fix.view.lines, lines), 5)
    return case, build_ms, page_ms, match_ms


def run() -> list[Row]:
    pairs = [(e, get_example(e.fixed_twin or "")) for e in EXAMPLES if e.fixed_twin]
    pairs += [_leak_pair(100), _leak_pair(1000)]
    rows: list[Row] = []
    matching: dict[str, float] = {}
    for bug, fix in pairs:
        assert fix is not None
        with collector_paused():  # as the server draws a pair (app.web.work): see app/heap.py
            case, build_ms, page_ms, match_ms = _measure(bug, fix)
        rows += [Row("compare", case, "compare_view CPU", build_ms, "ms"),
                 Row("compare", case, "template render", page_ms, "ms"),
                 Row("compare", case, "step matching", match_ms, "ms")]
        matching[bug.slug] = match_ms
    ratio = matching["leak-1000"] / matching["leak-100"]
    rows.append(Row("compare", "leak ×1000 / ×100", "step matching ratio", ratio, "×", 15.0))
    return rows

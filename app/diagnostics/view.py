"""View models for the diagnostics panel and the memory timeline: numbers and text segments that
``templates/_diagnostics.html`` and ``templates/_memory_timeline.html`` draw. Pure; no torch.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from math import ceil
from typing import Any

from app.diagnostics import Analysis, analysis
from app.diagnostics.trace import fmt_bytes
from app.i18n import N_, gettext
from app.schema import DeltaTrace, Diagnostic, MemoryAccount, MemoryChange
from app.trace.gpu import GpuPoint

MAX_BARS = 400  # beyond this, one bar stands for several consecutive steps (their peak)
BAR_WIDTH = 10.0
CHART_HEIGHT = 60.0
SEVERITY_LABEL = {"error": N_("Error"), "warning": N_("Warning"), "info": N_("Note")}


@dataclass(frozen=True)
class DiagnosticView:
    rule: str
    severity: str
    severity_label: str
    title: list[tuple[str, bool]]  # (text, is code) segments: `x` in a message becomes <code>x</code>
    message: list[tuple[str, bool]]
    fix: list[tuple[str, bool]]
    step: int | None
    line: int | None
    tensors: str  # space-separated ids, for data-tensors
    lines: list[int]


@dataclass(frozen=True)
class Bar:
    first: int  # first step the bar stands for (clicking goes there)
    last: int
    x: float
    variable_y: float
    variable_h: float
    graph_y: float
    graph_h: float
    tip: str = ""  # what the bar stands for, in words (its tooltip)


@dataclass(frozen=True)
class TimelineView:
    steps: int
    width: float
    height: float
    bar_width: float
    bars: list[Bar]
    peak: str  # the largest total, formatted
    peak_graph: str
    points: list[list[int]]  # per step: [variable, graph, shared, total(, GPU allocated, reserved)] bytes
    cursor_x: float
    top: str = "0 B"  # the bytes at the chart's top (its axis)
    gpu: GpuLines | None = None  # the GPU model's two lines, on their own scale (app/trace/gpu.py)


@dataclass(frozen=True)
class GpuLines:
    """The GPU model over the steps: polyline points of ``memory_allocated`` and ``memory_reserved``
    (each bar's largest), scaled so the reserved peak is the chart's top, and that peak."""

    allocated: str
    reserved: str
    top: str
    peak_allocated: str


def segments(text: str) -> list[tuple[str, bool]]:
    """Split on backticks: odd pieces are code. The template escapes every piece."""
    parts = text.split("`")
    if len(parts) % 2 == 0:  # an unpaired backtick: show it as text
        return [(text, False)]
    return [(part, index % 2 == 1) for index, part in enumerate(parts) if part]


def diagnostic_view(d: Diagnostic) -> DiagnosticView:
    return DiagnosticView(
        rule=d.rule, severity=d.severity, severity_label=gettext(SEVERITY_LABEL[d.severity]),
        title=segments(d.title), message=segments(d.message), fix=segments(d.fix),
        step=d.step, line=d.line, tensors=" ".join(d.tensors), lines=list(d.lines),
    )


def timeline_view(memory: list[MemoryChange] | list[MemoryAccount], current: int = 0,
                  peak: int | None = None, gpu: Sequence[GpuPoint] = (),
                  measured: Sequence[int] | None = None) -> TimelineView:
    """``peak``: the bytes at the chart's top, when charts side by side share one scale (else its own).
    ``gpu``: the GPU model's figures of each step, drawn as two lines on their own scale; ``measured``:
    ``torch.cuda.memory_allocated()`` after each step, when the code ran on a CUDA device (the library
    entry), said beside the model's in the readout."""
    count = len(memory)
    per_bar = max(1, ceil(count / MAX_BARS))
    own_peak = max((m.total_bytes for m in memory), default=0)
    top = max(peak or 0, own_peak)
    scale = (CHART_HEIGHT - 2) / top if top else 0.0
    bars = []
    for index, first in enumerate(range(0, count, per_bar)):
        chunk = memory[first:first + per_bar]
        top = max(chunk, key=lambda m: m.total_bytes)
        variable_h = top.variable_bytes * scale
        graph_h = top.graph_bytes * scale
        last = first + len(chunk) - 1
        parts = {"first": first + 1, "last": last + 1, "variables": fmt_bytes(top.variable_bytes),
                 "graph": fmt_bytes(top.graph_bytes)}
        tip = (gettext("step {first}: {variables} through variables, {graph} held only by the graph")
               if first == last else
               gettext("steps {first}–{last} (their largest): {variables} through variables, {graph} held "
                       "only by the graph")).format(**parts)
        bars.append(Bar(
            first=first, last=last, x=index * BAR_WIDTH,
            variable_y=CHART_HEIGHT - variable_h, variable_h=variable_h,
            graph_y=CHART_HEIGHT - variable_h - graph_h, graph_h=graph_h, tip=tip,
        ))
    points = [[m.variable_bytes, m.graph_bytes, m.shared_bytes, m.total_bytes] for m in memory]
    lines = None
    if gpu and len(gpu) == count:
        lines = _gpu_lines(gpu, per_bar)
        for point, model in zip(points, gpu, strict=True):
            point += (model.allocated, model.reserved)
        if measured is not None and len(measured) == count:
            for point, real in zip(points, measured, strict=True):
                point.append(real)
    return TimelineView(
        steps=count, width=max(len(bars), 1) * BAR_WIDTH, height=CHART_HEIGHT, bar_width=BAR_WIDTH,
        bars=bars, peak=fmt_bytes(own_peak),
        peak_graph=fmt_bytes(max((m.graph_bytes for m in memory), default=0)),
        points=points, cursor_x=(min(current, count - 1) // per_bar) * BAR_WIDTH if count else 0.0,
        top=fmt_bytes(max(peak or 0, own_peak)), gpu=lines,
    )


def _gpu_lines(gpu: Sequence[GpuPoint], per_bar: int) -> GpuLines:
    """Each bar's largest allocated and reserved, as a step line across the bar's width."""
    top = max(p.reserved for p in gpu) or 1
    scale = (CHART_HEIGHT - 2) / top
    allocated: list[str] = []
    reserved: list[str] = []
    for index, first in enumerate(range(0, len(gpu), per_bar)):
        chunk = gpu[first:first + per_bar]
        left, right = index * BAR_WIDTH, (index + 1) * BAR_WIDTH
        for line, value in ((allocated, max(p.allocated for p in chunk)),
                            (reserved, max(p.reserved for p in chunk))):
            y = f"{CHART_HEIGHT - 1 - value * scale:.2f}"
            line.append(f"{left:g},{y} {right:g},{y}")
    return GpuLines(" ".join(allocated), " ".join(reserved), fmt_bytes(max(p.reserved for p in gpu)),
                    fmt_bytes(max(p.allocated for p in gpu)))


def diagnostics_context(result: DeltaTrace, code: str, current: int = 0,
                        fed: Analysis | None = None, gpu: Sequence[GpuPoint] = (),
                        measured: Sequence[int] | None = None) -> dict[str, Any]:
    """What the two partials need, computed from the validated trace (never taken from the worker).
    ``fed``: the analysis the page's own replay fed already (``build_explorer(..., also=[fed])``);
    ``gpu``: the GPU model its replay fed (``ExplorerView.gpu``); ``measured``: see ``timeline_view``."""
    diagnostics, memory = fed.result() if fed is not None else analysis(result, code)
    return {
        "diagnostics": [diagnostic_view(d) for d in diagnostics],
        "timeline": timeline_view(memory, current, gpu=gpu, measured=measured),
    }

"""View models for the findings panel, the memory timeline, the four-way table and the compare's
one-line summary: numbers and text segments that ``templates/_diagnostics.html``,
``_memory_timeline.html``, ``_fourway.html`` and ``_compare.html`` draw. Pure; no torch. Runs no rule:
it is handed the ``app.diagnosis.Report`` the web layer asked the detector for.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from math import ceil
from typing import Any

from app.diagnosis import Made, Outcome, Report, apply
from app.i18n import N_, gettext, ngettext
from app.schema import Diagnostic, MemoryAccount, MemoryChange
from app.trace.gpu import GpuPoint
from app.units import fmt_bytes

MAX_BARS = 400  # beyond this, one bar stands for several consecutive steps (their peak)
BAR_WIDTH = 10.0
CHART_HEIGHT = 60.0
SEVERITY_LABEL = {"error": N_("Error"), "warning": N_("Warning"), "info": N_("Note")}
# What a person reads for a rule (the id stays in the API and in data-rule).
RULE_LABEL = {
    "graph-kept-by-container": N_("Graphs kept in a container"),
    "graph-chained-across-iterations": N_("Graph carried into the next iteration"),
    "grad-stays-none": N_("Gradient never arrives"),
    "nonleaf-grad-read": N_(".grad of a non-leaf"),
    "saved-tensor-modified": N_("Saved tensor changed in place"),
    "inplace-through-detached-alias": N_("Write through a detach() alias"),
    "inplace-on-leaf": N_("In-place change of a leaf"),
    "backward-twice": N_("Backward through a freed graph"),
    "backward-without-graph": N_("Backward without a graph"),
    "backward-non-scalar": N_("Backward on a non-scalar"),
    "inference-tensor-in-autograd": N_("Inference tensor used by autograd"),
    "grads-accumulate-across-steps": N_("Gradients never zeroed"),
    "grads-cleared-before-step": N_("Gradients zeroed before the step"),
    "optimizer-holds-replaced-params": N_("Optimizer on replaced parameters"),
    "unneeded-clone": N_("A copy nobody needs"),
    "server-budget": N_("Analysis skipped"),
}
TryLink = Callable[[str], str]  # fixed code -> the compare page's address (the web layer's)


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
    label: str = ""  # the rule, as a person reads it
    try_href: str = ""  # "Try this fix": the compare view of the code and the code fixed
    cut: str = ""  # space-separated ids of the parameters a cut separated from the loss (marked on the graph)


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


def diagnostic_view(d: Diagnostic, code: str = "", try_link: TryLink | None = None) -> DiagnosticView:
    """``try_link``: how the page links to the compare view (given the fixed code); without it, or
    without a patch, the finding offers no "Try this fix"."""
    href = try_link(apply(code, d.patch)) if try_link is not None and d.patch and code else ""
    label = RULE_LABEL.get(d.rule)
    cut = " ".join(d.tensors) if d.rule == "grad-stays-none" else ""  # the cut value and what it cut off
    return DiagnosticView(
        rule=d.rule, severity=d.severity, severity_label=gettext(SEVERITY_LABEL[d.severity]),
        title=segments(d.title), message=segments(d.message), fix=segments(d.fix),
        step=d.step, line=d.line, tensors=" ".join(d.tensors), lines=list(d.lines),
        label=gettext(label) if label else d.rule, try_href=href, cut=cut,
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


@dataclass(frozen=True)
class MadeRow:
    """One row of the four-way table, in words."""

    name: str
    form: str
    line: int
    step: int
    tensor: str
    shares: str  # the name whose memory it shares / "nothing: memory of its own"
    own: bool
    tracks: str  # "yes (CloneBackward0)" / "no"
    tracking: bool


def fourway_rows(rows: list[Made]) -> list[MadeRow]:
    out = []
    for row in rows:
        shares = row.shares if row.shares else gettext("nothing: memory of its own")
        if row.tracks:
            tracks = gettext("yes, through {node}").format(node=row.grad_fn) if row.grad_fn else gettext(
                "yes, a leaf")
        else:
            tracks = gettext("no")
        out.append(MadeRow(row.name, row.form, row.line, row.step, row.tensor, shares, row.shares is None,
                           tracks, row.tracks))
    return out


def change_line(before: Outcome, after: Outcome, gallery: bool = True) -> str:
    """What the second run changes against the first, in one line: memory held at the end, growth
    per iteration of the main loop, which parameters get a gradient. "" when neither ran."""
    if not before.steps or not after.steps:
        return ""
    parts = [gettext("{after} held at the end (was {before})").format(
        after=fmt_bytes(after.end_bytes), before=fmt_bytes(before.end_bytes))]
    grew, grows = before.growth, after.growth
    if round(grew or 0) > 0 or round(grows or 0) > 0:
        if grows is not None and round(grows) > 0:
            now = gettext("+{bytes} per iteration").format(bytes=fmt_bytes(round(grows)))
        else:
            now = gettext("no growth per iteration")
        was = f"+{fmt_bytes(round(grew))}" if grew is not None and round(grew) > 0 else gettext("none")
        parts.append(gettext("{now} (was {was})").format(now=now, was=was))
    gained = [n for n, got in after.gradients.items() if got and before.gradients.get(n) is False]
    lost = [n for n, got in after.gradients.items() if not got and before.gradients.get(n) is True]
    if gained:
        names = gettext(", ").join(f"`{n}`" for n in gained[:4])
        parts.append(ngettext("{names} now gets a gradient", "{names} now get a gradient",
                              len(gained)).format(names=names))
    if lost:
        parts.append(ngettext("{names} no longer gets a gradient", "{names} no longer get a gradient",
                              len(lost)).format(names=gettext(", ").join(f"`{n}`" for n in lost[:4])))
    trained = [n for n, got in after.gradients.items() if got]
    if not gained and not lost and trained:  # a fix that frees memory and still trains the same
        parts.append(ngettext("the same parameter gets a gradient", "the same {n} parameters get a gradient",
                              len(trained)).format(n=len(trained)))
    lead = gettext("With the fix:") if gallery else gettext("Code B against code A:")
    return lead + " " + " · ".join(parts) + gettext(".")


def findings_context(found: Report, code: str, current: int = 0, try_link: TryLink | None = None,
                     gpu: Sequence[GpuPoint] = (), measured: Sequence[int] | None = None) -> dict[str, Any]:
    """What the panels need, from the server's ``Report`` on the validated trace (never the worker's).
    ``gpu``: the GPU model the views' replay fed (``ExplorerView.gpu``); ``measured``: see
    ``timeline_view``."""
    return {
        "diagnostics": [diagnostic_view(d, code, try_link) for d in found.diagnostics],
        "timeline": timeline_view(found.memory, current, gpu=gpu, measured=measured),
        "fourway": fourway_rows(found.made),
        "ran": found.ran,
    }

"""Everything the playground shows for one run: both views, per-step state, facts, how it ended.

``build_explorer`` is pure (a ``DeltaTrace`` in, a frozen view model out) and replays the trace once
(``app.render.steps.drive``), feeding every view builder the step's changes: its cost and the
page's size grow with what the run changed, not with steps × what is alive. ``client_payload`` is
what ``static/explorer.js`` needs to step without asking the server again; ``frame_at`` gives the
templates the state of one step (the server renders the step shown first).
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from app.heap import collector_paused
from app.i18n import gettext as _
from app.render.backward import Pass, Passes, phase_label
from app.render.backward import payload as passes_payload
from app.render.details import Facts, FactsBuilder
from app.render.folds import Entry
from app.render.graph import GraphBuilder, GraphView
from app.render.loops import LoopBytes, LoopGrowth, read_loops
from app.render.memory import MemoryBuilder
from app.render.memory_view import MemoryView
from app.render.notices import ErrorView, Notice, RunLimits, cap_notice, cuda_notice, cut_notice, error_view
from app.render.steps import Driver, StepInput, ViewBuilder
from app.render.tracks import Frame, Tracks
from app.render.variables import VariablesBuilder, VariablesView
from app.schema import DeltaStep, DeltaTrace
from app.trace.gpu import GpuMemory, GpuPoint


class _Steps:
    """The line of every step, and the output: all of it once, with its length where it grew."""

    def __init__(self) -> None:
        self.lines: list[int] = []
        self.parts: list[str] = []
        self.grew: list[tuple[int, int]] = []  # (step, length of the output after it)
        self.length = 0
        self.backward: list[int] = []  # steps inside a line's backward pass (one per autograd node)

    def add_step(self, step: StepInput) -> None:
        self.lines.append(step.changes.line)
        if step.changes.delta.phase == "backward":
            self.backward.append(step.index)
        printed = step.changes.delta.stdout
        if printed:
            self.parts.append(printed)
            self.length += len(printed)
            self.grew.append((step.index, self.length))


@dataclass(frozen=True)
class ExplorerView:
    code: str
    lines: tuple[int, ...]  # the snippet line of each step
    initial: int  # the step shown first (0-based)
    limits: RunLimits
    notice: Notice | None  # the one limit that cut the run
    caps: Notice | None  # the engine's reading limits some step reached (the run went on)
    error: ErrorView | None  # the snippet's own error, or why it did not run
    memory: MemoryView
    graph: GraphView
    variables: VariablesView
    tracks: Tracks
    stdout: str  # everything printed
    stdout_grew: tuple[tuple[int, int], ...]  # (step, output length after it) where it grew
    facts: Facts
    passes: tuple[Pass, ...] = ()  # the backward passes' node steps (app/render/backward.py)
    backward: frozenset[int] = frozenset()  # steps inside a line's backward pass: the line has not finished
    gpu: tuple[GpuPoint, ...] = ()  # per step, what a CUDA device would report (app/trace/gpu.py, a model)
    cuda: Notice | None = None  # the code's cuda ran on the CPU (cuda_on_cpu): what is on cuda:0 is simulated
    loops: tuple[LoopGrowth, ...] = ()  # what an iteration of each loop adds to memory
    loop_ends: frozenset[int] = frozenset()  # steps where a loop's header found no next item

    @property
    def step_count(self) -> int:
        return len(self.lines)

    def stdout_at(self, step: int) -> str:
        """The output printed up to and including ``step``."""
        i = bisect_right(self.stdout_grew, (step, float("inf"))) - 1
        return self.stdout[: self.stdout_grew[i][1]] if i >= 0 else ""

    @property
    def folds(self) -> dict[int, list[Entry]]:
        return {**self.variables.folds, **self.memory.folds}


def build_explorer(
    trace: DeltaTrace, code: str, step: int | None = None, limits: RunLimits | None = None,
    also: Iterable[ViewBuilder] = (),
) -> ExplorerView:
    """The whole view model of one run. ``step`` is the 0-based step to show first (default: last).
    ``also``: more builders to feed from the same replay (the page's diagnostics,
    ``app.diagnostics.Analysis``), after the views' own."""
    build = ExplorerBuild(also)
    with collector_paused():
        for delta in trace.steps:
            build.add(delta)
        return build.finish(trace, code, step, limits)


class ExplorerBuild:
    """``build_explorer`` in two halves, for steps that arrive while the run goes on: ``add`` each
    step as it comes, then ``finish`` with the whole trace, whose steps must be the ones added."""

    def __init__(self, also: Iterable[ViewBuilder] = ()) -> None:
        self.tracks = tracks = Tracks()
        self.steps = _Steps()
        self.variables = VariablesBuilder(tracks)
        self.memory = MemoryBuilder(tracks)
        self.gpu = GpuMemory()  # before the facts: a storage's row says its block on a GPU
        self.facts = FactsBuilder(self.gpu)
        self.graph = GraphBuilder(tracks)
        self.passes = Passes()
        self.alive = LoopBytes()
        self.driver = Driver([self.steps, self.variables, self.memory, self.gpu, self.facts, self.graph,
                              self.passes, self.alive, *also])

    @property
    def count(self) -> int:
        return self.driver.count

    def add(self, delta: DeltaStep) -> None:
        self.driver.add(delta)

    def finish(self, trace: DeltaTrace, code: str, step: int | None = None,
               limits: RunLimits | None = None) -> ExplorerView:
        count = self.driver.count
        with collector_paused():
            views = (self.variables.finish(count), self.memory.finish(count), self.facts.finish(count),
                     self.graph.finish(count))
        self.tracks.close(count)
        steps = self.steps
        initial = count - 1 if step is None else max(0, min(step, count - 1))
        limits = limits or RunLimits()
        finished = trace.error is None and not trace.truncated
        loops = read_loops(code, steps.lines, self.alive.bytes, finished)
        return ExplorerView(
            code=code, lines=tuple(steps.lines), initial=max(initial, 0), limits=limits,
            notice=cut_notice(trace, limits), caps=cap_notice(trace), error=error_view(trace.error),
            memory=views[1], graph=views[3],
            variables=views[0], tracks=self.tracks, stdout="".join(steps.parts),
            stdout_grew=tuple(steps.grew), facts=views[2], backward=frozenset(steps.backward),
            passes=tuple(self.passes.finish(count)), gpu=tuple(self.gpu.points), cuda=cuda_notice(trace),
            loops=loops.growth, loop_ends=loops.ended,
        )


def frame_at(view: ExplorerView, step: int | None = None) -> Frame:
    return Frame(view.tracks, view.initial if step is None else step)


def _runs(track: dict[int, list]) -> list[list[Any]]:
    return [[k, runs] for k, runs in track.items() if runs]


def client_payload(view: ExplorerView) -> dict[str, Any]:
    """The JSON ``static/explorer.js`` steps with (embedded in the fragment, never evaluated)."""
    tracks, facts = view.tracks, view.facts
    return {
        "count": view.step_count,
        "initial": view.initial,
        "lines": list(view.lines),
        "stdout": view.stdout,
        "stdoutGrew": [list(pair) for pair in view.stdout_grew],
        "vis": [[k, [[a, b] for a, b, _ in runs]] for k, runs in tracks.vis.items()],
        "text": _runs(tracks.text),
        "state": _runs(tracks.state),
        "ref": _runs(tracks.ref),
        "camera": view.graph.camera_k,
        "pairs": [list(pair) for pair in facts.pairs],
        "facts": facts.entries,
        "details": facts.details,
        "born": facts.born,
        "folds": [[k, entries] for k, entries in view.folds.items()],
        "code": view.code,
        "errorLine": view.error.line if view.error else None,
        "errorText": view.error.note if view.error else None,
        "passes": passes_payload(list(view.passes)),
        "backward": sorted(view.backward),
        "loopEnds": sorted(view.loop_ends),
    }


def step_label(view: ExplorerView, step: int) -> str:
    """What the state shown is: after a line ran, or inside its backward pass (static/explorer.js
    writes the same)."""
    if not view.lines:
        return _("No steps")
    parts = {"n": step + 1, "count": view.step_count, "line": view.lines[step]}
    if step in view.backward:
        return _("Step {n} of {count} · line {line}, inside its backward pass").format(**parts)
    if step in view.loop_ends:
        return _("Step {n} of {count} · the loop at line {line} ended").format(**parts)
    return _("Step {n} of {count} · after line {line} ran").format(**parts)


def phase_text(view: ExplorerView, step: int) -> str:
    """Where a step sits in a backward pass ("backward · node 3 of 12 · MulBackward0"), else ""."""
    return phase_label(list(view.passes), step)

"""TEMPORARY: today's graph view inside the change-based explorer, until ``GraphBuilder`` lands.

``app.render.graph.build_graph`` reads whole steps and records what each element is *at* every
step. ``LegacyGraph`` gives it what it reads — the state of each step, replayed one at a time, and
``Holding``'s names and holders as mappings — and turns its per-step records into the
``Tracks.change_*`` calls the rest of the page uses. It has ``GraphBuilder``'s shape
(``add_step(StepInput)``, ``finish(count) -> GraphView``), so replacing it is one line in
``app/render/explorer.py``; then delete this module.

Its cost grows with steps × live graph vertices (nodes and the named tensors beside them), and past
``EPOCH_MAX`` vertices at once it lays out every step anew, so a run above ``VERTEX_STEPS`` or
``PEAK`` is not drawn: the panel says why instead of stalling the server for a minute.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterator
from typing import Any

from app.render.graph import EPOCH_MAX, GraphView, build_graph
from app.render.names import HoldersOf, NamesOf
from app.render.steps import StepInput
from app.render.tracks import Run, Tracks
from app.schema import DeltaTrace
from app.trace.holding import Holding
from app.trace.replay import State, replay

VERTEX_STEPS = 20_000  # vertices summed over the steps: about 1 s of today's layout
PEAK = EPOCH_MAX  # vertices at one step: beyond, today's graph lays out every step anew


class _AtSteps:
    """What ``build_graph`` calls on its tracks (``key``, ``show``, ``set_text``, ``set_state``,
    ``vis``), kept as runs per element and handed on as changes at the end."""

    def __init__(self, tracks: Tracks) -> None:
        self.tracks = tracks
        self.vis = tracks.vis  # build_graph marks elements never shown with vis.setdefault(k, [])
        self.runs: dict[str, dict[int, list[Run]]] = {"vis": {}, "text": {}, "state": {}}

    def key(self, identity: Hashable) -> int:
        return self.tracks.key(identity)

    def show(self, k: int, step: int) -> None:
        self._at("vis", k, step, 1)

    def set_text(self, k: int, step: int, text: str) -> None:
        self._at("text", k, step, text)

    def set_state(self, k: int, step: int, state: str) -> None:
        if state:
            self._at("state", k, step, state)

    def _at(self, track: str, k: int, step: int, value: Any) -> None:
        runs = self.runs[track].setdefault(k, [])
        if runs and runs[-1][1] == step - 1 and runs[-1][2] == value:
            runs[-1][1] = step
        elif runs and runs[-1][1] >= step:  # set twice in one step: the last word wins
            runs[-1][2] = value
        else:
            runs.append([step, step, value])

    def flush(self, count: int) -> None:
        tracks = self.tracks
        setters = {
            "vis": lambda k, s, v: tracks.change_vis(k, s, v is not None),
            "text": tracks.change_text,
            "state": lambda k, s, v: tracks.change_state(k, s, v or ""),
        }
        for track, by_key in self.runs.items():
            for k, runs in by_key.items():
                for first, last, value in runs:
                    setters[track](k, first, value)
                    if last + 1 < count:
                        setters[track](k, last + 1, None)


class _Replayed:
    """The ``result`` ``build_graph`` reads: ``steps`` replays the trace one step at a time, and
    ``names[i]`` / ``holders[i]`` answer for the step just replayed."""

    def __init__(self, trace: DeltaTrace) -> None:
        self.trace = trace
        self.holding = Holding()

    @property
    def steps(self) -> Iterator[State]:
        for state, changes in replay(self.trace):
            self.holding.update(state, changes)
            yield state


class _Current:
    def __init__(self, mapping: Any) -> None:
        self.mapping = mapping

    def __getitem__(self, index: int) -> Any:
        return self.mapping


class LegacyGraph:
    def __init__(self, tracks: Tracks, trace: DeltaTrace) -> None:
        self.tracks = tracks
        self.trace = trace
        self.vertex_steps = 0
        self.peak = 0
        self.note: str | None = None  # why the graph is not drawn

    def add_step(self, step: StepInput) -> None:
        vertices = len(step.state.nodes) + len(step.state.variables)
        self.vertex_steps += vertices
        self.peak = max(self.peak, vertices)

    def finish(self, count: int) -> GraphView:
        if self.vertex_steps > VERTEX_STEPS or self.peak > PEAK:
            self.note = (f"This run's autograd graph is too large for this view to draw (up to "
                         f"{self.peak:,} nodes and tensors at once, over {count:,} steps).")
            k = self.tracks.key
            return GraphView(k(("graph-camera",)), k(("graph-empty",)), (), ())
        result = _Replayed(self.trace)
        at_steps = _AtSteps(self.tracks)
        view = build_graph(result, at_steps, _Current(NamesOf(result.holding)),  # type: ignore[arg-type]
                           _Current(HoldersOf(result.holding)))  # type: ignore[arg-type]
        at_steps.flush(count)
        return view

"""Everything the playground shows for one run: both views, per-step state, details, the error.

``build_explorer`` is pure (RunResult in, frozen view model out) and runs once per run;
``client_payload`` is what ``static/explorer.js`` needs to step without asking the server again;
``frame_at`` gives the templates the state of one step (the server renders the first step shown).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from app.render.details import tensor_facts
from app.render.graph import GraphBuilder, GraphView
from app.render.memory import MemoryView, build_memory
from app.render.names import graph_holders, tensor_kind, tensor_names
from app.render.steps import drive
from app.render.tracks import Frame, Tracks, append_run
from app.schema import DeltaTrace, RunError, RunResult
from app.trace.delta import expand

ERROR_TITLES = {
    "rejected": "The snippet was not run.",
    "runtime": "The snippet raised an error.",
    "timeout": "The snippet took too long and was stopped.",
    "memory": "The snippet needed more memory than a run may use, and was stopped.",
    "output": "The snippet printed more than a run may print; the output was cut there.",
    "internal": "Something went wrong on our side while running the snippet.",
}


@dataclass(frozen=True)
class ErrorView:
    kind: str
    title: str
    type: str
    message: str
    line: int | None

    @property
    def where(self) -> str:
        return f"Line {self.line}" if self.line else ""

    @property
    def shows_type(self) -> bool:
        """The exception's type helps for the snippet's own errors, not for the sandbox's verdicts."""
        return self.kind in ("runtime", "rejected") and self.type not in ("Rejected", "SandboxError")

    @property
    def text(self) -> str:
        return f"{self.type}: {self.message}" if self.shows_type else self.message


@dataclass(frozen=True)
class VariableChip:
    k: int
    shape_k: int
    name: str
    tensor: str


@dataclass(frozen=True)
class ExplorerView:
    code: str
    lines: tuple[int, ...]  # the snippet line of each step
    initial: int  # the step shown first (0-based)
    truncated: bool
    max_steps: int
    error: ErrorView | None
    memory: MemoryView
    graph: GraphView
    variables: tuple[VariableChip, ...]
    variables_empty_k: int
    tracks: Tracks
    stdout: str
    stdout_at: tuple[int, ...]  # length of stdout at each step (it only ever grows)
    facts: tuple[tuple[tuple[str, str], ...], ...]
    details: dict[str, list]  # tensor id -> runs of an index into ``facts``
    born: dict[str, int]  # tensor or node id -> the line of the step where it first appears

    @property
    def step_count(self) -> int:
        return len(self.lines)


def error_view(error: RunError | None) -> ErrorView | None:
    if error is None:
        return None
    title = ERROR_TITLES.get(error.kind, ERROR_TITLES["internal"])
    if error.kind == "rejected" and error.type == "SyntaxError":
        title = "Python could not read the snippet."
    elif error.type in ("Busy", "SandboxUnavailable"):  # refused before it ran: nothing went wrong
        title = ERROR_TITLES["rejected"]
    return ErrorView(error.kind, title, error.type, error.message, error.line)


def _variables(result: RunResult, tracks: Tracks) -> tuple[tuple[VariableChip, ...], int]:
    chips: dict[tuple[str, str], VariableChip] = {}
    empty_k = tracks.key(("variables-empty",))
    for index, step in enumerate(result.steps):
        if not step.variables:
            tracks.show(empty_k, index)
        for name, tid in step.variables.items():
            fact = step.tensors.get(tid)
            if fact is None:
                continue
            chip = chips.get((name, tid))
            if chip is None:
                chip = chips[(name, tid)] = VariableChip(
                    tracks.key(("var", name, tid)), tracks.key(("var", name, tid, "shape")), name, tid
                )
            tracks.show(chip.k, index)
            tracks.set_state(chip.k, index, tensor_kind(fact))
            tracks.set_text(chip.shape_k, index, "×".join(map(str, fact.shape)) or "scalar")
    tracks.vis.setdefault(empty_k, [])  # shown only at steps without variables
    return tuple(chips.values()), empty_k


def _details(result: RunResult, names: list[dict], holders: list[dict], born: dict[str, int]):
    facts: list[tuple[tuple[str, str], ...]] = []
    seen: dict[str, int] = {}
    details: dict[str, list] = {}
    for index, step in enumerate(result.steps):
        for tid in step.tensors:
            entry = tensor_facts(step, tid, names[index], holders[index], born.get(tid))
            signature = json.dumps(entry)
            fact_index = seen.get(signature)
            if fact_index is None:
                fact_index = seen[signature] = len(facts)
                facts.append(entry)
            append_run(details.setdefault(tid, []), index, fact_index)
    return tuple(facts), details


def _stdout(result: RunResult) -> tuple[str, tuple[int, ...]]:
    """stdout is cumulative, so each step's is a prefix of the last one: keep lengths only."""
    final = result.steps[-1].stdout if result.steps else ""
    lengths = []
    for step in result.steps:
        if not final.startswith(step.stdout):  # never expected; show the last output rather than lie
            return step.stdout, tuple(len(step.stdout) for _ in result.steps)
        lengths.append(len(step.stdout))
    return final, tuple(lengths)


def build_explorer(
    trace: DeltaTrace, code: str, step: int | None = None, max_steps: int = 1000
) -> ExplorerView:
    """The whole view model of one run. ``step`` is the 0-based step to show first (default: last)."""
    result = expand(trace)
    tracks = Tracks()
    names = [tensor_names(s) for s in result.steps]
    holders = [graph_holders(s) for s in result.steps]
    born: dict[str, int] = {}
    for s in result.steps:
        for ident in (*s.tensors, *s.nodes):
            born.setdefault(ident, s.line)
    variables, variables_empty_k = _variables(result, tracks)
    memory = build_memory(result, tracks, names, holders)
    graph_builder = GraphBuilder(tracks)  # the first builder on drive(); the rest follow on branch render
    graph = graph_builder.finish(drive(trace, [graph_builder]))
    facts, details = _details(result, names, holders, born)
    stdout, stdout_at = _stdout(result)
    count = len(result.steps)
    tracks.close(count)  # ends the runs recorded with change_* (the graph's)
    initial = count - 1 if step is None else max(0, min(step, count - 1))
    return ExplorerView(
        code=code, lines=tuple(s.line for s in result.steps), initial=max(initial, 0),
        truncated=result.truncated, max_steps=max_steps, error=error_view(result.error), memory=memory,
        graph=graph, variables=variables, variables_empty_k=variables_empty_k, tracks=tracks, stdout=stdout,
        stdout_at=stdout_at, facts=facts, details=details, born=born,
    )


def frame_at(view: ExplorerView, step: int | None = None) -> Frame:
    return Frame(view.tracks, view.initial if step is None else step)


def client_payload(view: ExplorerView) -> dict[str, Any]:
    """The JSON ``static/explorer.js`` steps with (embedded in the fragment, never evaluated)."""
    tracks = view.tracks
    return {
        "count": view.step_count,
        "initial": view.initial,
        "lines": list(view.lines),
        "stdout": view.stdout,
        "stdoutAt": list(view.stdout_at),
        "vis": [[k, [[a, b] for a, b, _ in runs]] for k, runs in tracks.vis.items()],
        "text": [[k, runs] for k, runs in tracks.text.items()],
        "state": [[k, runs] for k, runs in tracks.state.items()],
        "camera": view.graph.camera_k,
        "facts": [[list(pair) for pair in entry] for entry in view.facts],
        "details": view.details,
        "born": view.born,
        "code": view.code,
        "errorLine": view.error.line if view.error else None,
        "errorText": view.error.text if view.error else None,
    }


def step_label(view: ExplorerView, step: int) -> str:
    if not view.lines:
        return "No steps"
    return f"Step {step + 1} of {view.step_count} · line {view.lines[step]}"



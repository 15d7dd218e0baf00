"""Loops as they ran: each run of a ``for`` / ``while`` statement, cut into its iterations by the
steps of its header line (Python's tracer reports the header at the start of every iteration, and a
``for`` once more when it finds nothing left).

A run is the stretch of steps from the header's first visit to the first step, in the loop's own
function, of a line outside the loop; steps in other functions (a hook, a method the body calls)
belong to the run they happen in. Found in one pass over the steps, from the source's loops.
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass, field

from app.diagnostics.context import Context
from app.diagnostics.source import Loop


@dataclass
class LoopRun:
    loop: Loop
    starts: list[int] = field(default_factory=list)  # the steps of the header's visits
    stop: int = 0  # the first step after the run (the trace's length when it ran to the end)

    @property
    def last(self) -> int:
        """The run's last step."""
        return self.stop - 1

    def iteration(self, step: int) -> int:
        """Which iteration a step of the run belongs to (0 = the first)."""
        return max(bisect_right(self.starts, step) - 1, 0)

    def bounds(self) -> list[int]:
        """Where each iteration starts, and the run's end: iteration i is [bounds[i], bounds[i + 1])."""
        return [*self.starts, self.stop]


def loop_runs(context: Context) -> list[LoopRun]:
    """Every run of every loop, in the order they started (memoised on the context)."""
    found = context.memo.get("loop_runs")
    if found is None:
        found = context.memo["loop_runs"] = _runs(context)
    return found


def _chain(loop: Loop, info: dict[tuple[int, int], Loop]) -> list[Loop]:
    chain = [loop]
    while chain[-1].parent is not None and chain[-1].parent in info:
        chain.append(info[chain[-1].parent])
    return chain


def _runs(context: Context) -> list[LoopRun]:
    source = context.source
    info = source.loop_info
    if not info:
        return []
    chains: dict[tuple[int, int], list[Loop]] = {span: _chain(loop, info) for span, loop in info.items()}
    done: list[LoopRun] = []
    open_runs: dict[tuple[int, int], LoopRun] = {}
    steps = context.trace.steps
    for k, line in enumerate(context.index.lines):
        facts = source.at(line)
        if facts is None:
            continue
        func = facts.func
        inside = chains.get(facts.loop, []) if facts.loop is not None else []
        spans = {loop.span for loop in inside}
        for span in [s for s, run in open_runs.items() if run.loop.func == func and s not in spans]:
            run = open_runs.pop(span)
            run.stop = k
            done.append(run)
        for loop in inside:
            run = open_runs.get(loop.span)
            if run is None:
                run = open_runs[loop.span] = LoopRun(loop)
            if facts.line == loop.start and steps[k].phase == "forward":
                run.starts.append(k)
    for run in open_runs.values():
        run.stop = len(steps)
        done.append(run)
    runs = [run for run in done if run.starts]
    runs.sort(key=lambda run: run.starts[0])
    return runs

"""How every view model is built: one replay of the delta trace, fanned out to view builders.

``drive`` replays the trace once; at each step it brings ``Holding`` (who keeps what alive) up to
date and hands every builder the same ``StepInput``. A builder records what changed at that step —
through ``Tracks.change_*`` — and so costs time proportional to the run's changes, never to
steps × what is alive. ``StepInput`` (and the state in it) is only valid during ``add_step``: copy
what you keep.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol

from app.schema import DeltaTrace
from app.trace.holding import Holding, HoldingChanges
from app.trace.replay import Changes, State, replay


@dataclass(frozen=True)
class StepInput:
    index: int
    state: State  # everything alive after this step (shared, updated in place)
    changes: Changes  # what this step set or dropped, with the values before it
    holding: Holding  # names, holders and groups after this step
    held: HoldingChanges  # what this step changed about them


class ViewBuilder(Protocol):
    def add_step(self, step: StepInput) -> None: ...


def drive(trace: DeltaTrace, builders: Iterable[ViewBuilder]) -> int:
    """Feed every step to every builder, in order; returns the number of steps."""
    builders = list(builders)
    holding = Holding()
    count = 0
    for state, changes in replay(trace):
        held = holding.update(state, changes)
        step = StepInput(changes.index, state, changes, holding, held)
        for builder in builders:
            builder.add_step(step)
        count += 1
    return count

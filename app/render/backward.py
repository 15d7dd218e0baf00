"""The backward passes of a run, for stepping: which steps are one line's node-by-node replay.

A line that runs backward is preceded by one ``phase: "backward"`` step per autograd node torch ran
(``app.schema``). The page steps *over* such a line by default and can step *into* it; for that it
needs, per pass, its first and last node step and the names of the nodes, in order: ``Passes`` is
fed the replayed steps (``add_step``) and keeps exactly that, so its size is linear in the steps.

A pass that ends the run without its line's own step (an error inside backward, a cut run) has
``own`` equal to ``last``: there is no step after its nodes to step over to.
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass, field

from app.i18n import gettext as _
from app.render.names import short_node_name
from app.render.steps import StepInput


@dataclass
class Pass:
    first: int  # the first node step
    last: int  # the last node step
    own: int  # the line's own step (the one stepping over lands on); == last if the run ended
    names: list[str] = field(default_factory=list)  # the nodes' short names, in the order they ran


class Passes:
    """``add_step`` per replayed step, then ``finish(count)`` once."""

    def __init__(self) -> None:
        self.passes: list[Pass] = []
        self._open: Pass | None = None

    def add_step(self, step: StepInput) -> None:
        delta = step.changes.delta
        if delta.phase == "backward":
            if self._open is None:
                self._open = Pass(step.index, step.index, step.index)
            node = step.state.nodes.get(delta.node) if delta.node else None
            self._open.names.append(short_node_name(node.name) if node else "")
            self._open.last = self._open.own = step.index
        elif self._open is not None:
            self._open.own = step.index
            self.passes.append(self._open)
            self._open = None

    def finish(self, count: int) -> list[Pass]:
        if self._open is not None:
            self.passes.append(self._open)
            self._open = None
        return self.passes


def payload(passes: list[Pass]) -> list[list]:
    """What ``static/explorer.js`` steps with: [first, last, own, names] per pass."""
    return [[p.first, p.last, p.own, p.names] for p in passes]


def phase_label(passes: list[Pass], step: int) -> str:
    """"backward · node 3 of 12 · MulBackward0" inside a pass, else "" (the line's own label says it)."""
    found = pass_at(passes, step)
    if found is None:
        return ""
    n = step - found.first
    return _("backward · node {n} of {count} · {name}").format(
        n=n + 1, count=len(found.names), name=found.names[n])


def pass_at(passes: list[Pass], step: int) -> Pass | None:
    """The pass whose node steps hold ``step``, if any."""
    i = bisect_right([p.first for p in passes], step) - 1
    if i >= 0 and passes[i].first <= step <= passes[i].last:
        return passes[i]
    return None

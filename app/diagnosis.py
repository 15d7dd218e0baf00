"""What the server says about one run beside its trace, as plain data (no rule here): the detector
(``app.diagnostics``) writes it, the views (``app.render``) draw it. The two sit side by side over the
schema and import nothing of each other: the web layer asks the detector (``app.diagnostics.report``)
and hands the answer to the views.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from app.schema import Diagnostic, MemoryChange, Patch


@dataclass(frozen=True)
class Made:
    """A tensor a line made with clone() / detach() (``app.diagnostics.fourway``)."""

    name: str  # the variable it was stored in
    form: str  # "clone()", "detach()", "clone().detach()" or "detach().clone()"
    source: str  # what it was made from, as the code writes it
    line: int
    step: int  # the step right after the line ran
    tensor: str
    shares: str | None  # a name of the tensor whose memory it shares, None: memory of its own
    tracks: bool  # requires grad (in the graph: a grad_fn, or a leaf that requires grad)
    grad_fn: str | None  # its node's name (``CloneBackward0``), when it has one


@dataclass(frozen=True)
class Outcome:
    """What a run came to (``app.diagnostics.outcome``)."""

    steps: int
    end_bytes: int  # held after the last step (the chart's last bar)
    growth: float | None = None  # bytes per iteration of the loop that ran longest (None: no such loop)
    loop_line: int | None = None
    gradients: dict[str, bool] = field(default_factory=dict)  # parameter -> it got a gradient


@dataclass
class Report:
    """The findings, the memory per step (what the chart draws), the tensors made by clone()/detach()
    (the four-way table) and what the run came to (the compare's line)."""

    diagnostics: list[Diagnostic]
    memory: list[MemoryChange]
    made: list[Made] = field(default_factory=list)
    outcome: Outcome = field(default_factory=lambda: Outcome(steps=0, end_bytes=0))
    ran: bool = False  # the run has steps: a run refused or failed before its first one says nothing


def apply(code: str, patches: Iterable[Patch]) -> str:
    """The code with a finding's patches carried out (given for the code as it is: none of them
    overlap): its fix as code, the page's "Try this fix" (the rules make them, ``app.diagnostics.patch``)."""
    lines = code.split("\n")
    for patch in sorted(patches, key=lambda p: (p.start, p.end), reverse=True):
        new = patch.text.split("\n") if patch.text else []
        lines[patch.start - 1:patch.end] = new
    return "\n".join(lines)

"""What every rule reads: the delta trace through its index (``app.diagnostics.index``), and the
source facts, with step-relative helpers.

A rule walks the steps (or only the steps whose line does what it looks for), reads each step's own
delta, and asks the index about the few ids that delta names; a question about a whole step is asked
for the one step a finding reports. That keeps every rule linear in the trace.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from typing import Any

from app.diagnostics.index import At, Index
from app.diagnostics.memory import Accounting
from app.diagnostics.numbers import Routes
from app.diagnostics.source import LineFacts, SourceFacts, resolve, shorten
from app.schema import DeltaTrace, MemoryChange, RunError


@dataclass
class Context:
    trace: DeltaTrace
    index: Index
    source: SourceFacts
    memo: dict[str, Any] = field(default_factory=dict)  # what one rule computes for another
    # ``facts`` of every step, made at the first question: the rules ask it of every step, several times
    step_facts: list[LineFacts | None] | None = field(default=None, repr=False)

    @classmethod
    def build(cls, trace: DeltaTrace, code: str, accounting: Accounting | None = None) -> Context:
        # The rules quote the memory chart's figures: the index always feeds an accounting.
        return cls(trace, Index(trace, accounting=accounting or Accounting()), SourceFacts(code))

    def __len__(self) -> int:
        return len(self.index)

    @property
    def truncated(self) -> bool:
        return self.trace.truncated

    @property
    def error(self) -> RunError | None:
        return self.trace.error

    @property
    def memory(self) -> list[MemoryChange]:
        """The memory chart's figures after each step (the accounting the index feeds; none without one)."""
        accounting = self.index.accounting
        return accounting.changes if accounting is not None else []

    def line(self, step: int) -> int:
        return self.index.lines[step]

    def at(self, step: int) -> At:
        """The snapshot after step ``step``'s line ran."""
        return At(self.index, step)

    def before(self, step: int) -> At:
        """The snapshot just before step ``step``'s line ran (empty before the first)."""
        return At(self.index, step - 1)

    def facts(self, step: int) -> LineFacts | None:
        """What the step's line does — for the step after the line ran; a step inside a backward
        pass (phase "backward") is part of its line, not the line done, so rules pass it by."""
        by_step = self.step_facts
        if by_step is None:
            at, steps = self.source.at, self.trace.steps
            by_step = self.step_facts = [at(line) if steps[k].phase == "forward" else None
                                         for k, line in enumerate(self.index.lines)]
        return by_step[step]

    def first_seen(self, ident: str) -> int | None:
        """The step at which a tensor or node id first appears: where it was created (or first named)."""
        return self.index.timeline.first_seen.get(ident)

    def routes(self) -> Routes | None:
        """Where values go in the source (``app.diagnostics.numbers``: each node's parent, the
        snippet's functions and their calls), made once per analysis; None for code that does not
        parse."""
        if "routes" not in self.memo:
            tree = self.source.tree
            self.memo["routes"] = Routes.of(tree) if tree is not None else None
        return self.memo["routes"]

    def line_text(self, line: int | None) -> str:
        facts = self.source.at(line) if line is not None else None
        return shorten(facts.text.strip()) if facts is not None else ""

    def resolve_before(self, step: int, expr: ast.expr, func: str | None) -> str | None:
        """The tensor an expression named when step ``step``'s line started (else just after it)."""
        return resolve(self.before(step), expr, func) or resolve(self.at(step), expr, func)

"""What every rule reads: the validated trace and the source facts, with step-relative helpers."""

from __future__ import annotations

import ast
from dataclasses import dataclass, field

from app.diagnostics.source import LineFacts, SourceFacts, resolve, shorten
from app.schema import RunResult, Step

EMPTY = Step(line=0, variables={}, tensors={}, storages={}, nodes={})


@dataclass
class Context:
    result: RunResult
    source: SourceFacts
    _first_seen: dict[str, int] = field(default_factory=dict)

    @classmethod
    def build(cls, result: RunResult, code: str) -> Context:
        context = cls(result, SourceFacts(code))
        for index, step in enumerate(result.steps):
            for tid in step.tensors:
                context._first_seen.setdefault(tid, index)
            for nid in step.nodes:
                context._first_seen.setdefault(nid, index)
        return context

    @property
    def steps(self) -> list[Step]:
        return self.result.steps

    def facts(self, index: int) -> LineFacts | None:
        """What the step's line does — for the step after the line ran; a step inside a backward
        pass (phase "backward") is part of its line, not the line done, so rules pass it by."""
        step = self.steps[index]
        return self.source.at(step.line) if step.phase == "forward" else None

    def before(self, index: int) -> Step:
        """The snapshot just before step ``index``'s line ran."""
        return self.steps[index - 1] if index > 0 else EMPTY

    def first_seen(self, ident: str) -> int | None:
        """The step at which a tensor or node id first appears: where it was created (or first named)."""
        return self._first_seen.get(ident)

    def line_text(self, line: int | None) -> str:
        facts = self.source.at(line) if line is not None else None
        return shorten(facts.text.strip()) if facts is not None else ""

    def resolve_before(self, index: int, expr: ast.expr, func: str | None) -> str | None:
        """The tensor an expression named when step ``index``'s line started (else just after it)."""
        return resolve(self.before(index), expr, func) or resolve(self.steps[index], expr, func)

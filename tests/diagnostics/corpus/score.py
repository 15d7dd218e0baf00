"""How the detector's findings compare with the corpus's labels: per case (right or not, and why) and
per rule (precision, recall). Plain data in, plain data out: the tests and ``python -m app.bench
detector`` both use it.

A finding *matches* a label when it has the label's rule, severity and line and its fix names the
label's remedy. Every finding that matches no label is a false alarm of its rule (a note included:
a twin or a look-alike must be quiet), every label no finding matches a miss.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from tests.diagnostics.corpus.cases import Case, Finding


@dataclass
class Verdict:
    case: Case
    matched: list[tuple[Finding, Any]] = field(default_factory=list)
    missed: list[Finding] = field(default_factory=list)
    extra: list[Any] = field(default_factory=list)  # findings (app.schema.Diagnostic) no label asked for

    @property
    def right(self) -> bool:
        return not self.missed and not self.extra

    def why(self) -> str:
        parts = [f"missed {f.rule} ({f.severity}) at line {self.case.line_of(f)}" for f in self.missed]
        parts += [f"said {d.rule} ({d.severity}) at line {d.line}: {d.title}" for d in self.extra]
        return "; ".join(parts)


def matches(case: Case, label: Finding, found: Any) -> bool:
    return (found.rule == label.rule and found.severity == label.severity
            and found.line == case.line_of(label) and label.remedy in found.fix)


def judge(case: Case, diagnostics: Iterable[Any]) -> Verdict:
    verdict = Verdict(case)
    left = list(diagnostics)
    for label in case.expect:
        hit = next((d for d in left if matches(case, label, d)), None)
        if hit is None:
            verdict.missed.append(label)
        else:
            verdict.matched.append((label, hit))
            left.remove(hit)
    verdict.extra = left
    return verdict


@dataclass
class RuleScore:
    rule: str
    true: int = 0
    false: int = 0  # said where no label asked for it
    missed: int = 0

    @property
    def precision(self) -> float | None:
        said = self.true + self.false
        return self.true / said if said else None

    @property
    def recall(self) -> float | None:
        wanted = self.true + self.missed
        return self.true / wanted if wanted else None


def per_rule(verdicts: Iterable[Verdict]) -> dict[str, RuleScore]:
    scores: dict[str, RuleScore] = {}

    def score(rule: str) -> RuleScore:
        return scores.setdefault(rule, RuleScore(rule))

    for verdict in verdicts:
        for label, _found in verdict.matched:
            score(label.rule).true += 1
        for label in verdict.missed:
            score(label.rule).missed += 1
        for found in verdict.extra:
            score(found.rule).false += 1
    return dict(sorted(scores.items()))

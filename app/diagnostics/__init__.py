"""Pitfall detector and memory accounting: pure functions over a validated trace and the snippet's
source. No torch here — the server runs this on the worker's (validated) trace, so the worker can
never supply its own diagnostics.
"""

from __future__ import annotations

import logging
from typing import Any

from app.budget import BudgetExceeded, current_budget
from app.diagnosis import Made, Outcome, Report
from app.diagnostics.context import Context
from app.diagnostics.fourway import made
from app.diagnostics.index import Index
from app.diagnostics.memory import Accounting, account, as_accounts
from app.diagnostics.outcome import outcome
from app.diagnostics.rules import RULE_IDS, RULES
from app.diagnostics.source import SourceFacts
from app.schema import DeltaResponse, DeltaStep, DeltaTrace, Diagnostic, MemoryChange, RunResponse, RunResult
from app.trace.delta import expand
from app.trace.replay import State

log = logging.getLogger(__name__)
SEVERITY_ORDER = {"error": 0, "warning": 1, "info": 2}
Found = tuple[list[Diagnostic], list[MemoryChange]]  # what ``analysis`` gives: diagnostics, accounting


def report(trace: DeltaTrace, code: str) -> Report:
    """``analysis`` and the rest of the ``Report``, from one replay."""
    accounting = Accounting()
    context = Context.build(trace, code, accounting)
    return _report(context, accounting)


def _report(context: Context, accounting: Accounting) -> Report:
    try:
        # (the outcome reads what the rules made: the loops, what is trained — once for both)
        found = _findings(context, clear=False)
        rows = made(context)
        ended = outcome(context)
    finally:
        context.memo.clear()  # as ``_findings`` says
    return Report(found, accounting.changes, rows, ended, ran=len(context) > 0)


def diagnose(trace: DeltaTrace, code: str) -> list[Diagnostic]:
    """Every rule's findings, ordered by step (then severity)."""
    return _findings(Context.build(trace, code))


def analysis(trace: DeltaTrace, code: str) -> Found:
    """``diagnose`` and ``account`` from one replay of the trace: the diagnostics index runs the
    Holding the accounting reads."""
    accounting = Accounting()
    found = _findings(Context.build(trace, code, accounting))
    return found, accounting.changes


class Analysis:
    """``analysis`` fed by a replay someone else runs: the page hands it to ``app.render.steps.drive``
    beside its view builders (the same ``Holding`` and state), so the trace is replayed once for both.
    ``result()`` after the last step gives what ``analysis`` would."""

    def __init__(self, trace: DeltaTrace | None, code: str) -> None:
        """``trace``: None while its steps are still coming (``bind`` it before ``result``)."""
        self.trace = trace or DeltaTrace(ok=True, steps=[])
        self.code = code
        self.accounting = Accounting()
        self.index = Index(self.trace, accounting=self.accounting, fed=True)
        self._state: State | None = None
        self._report: Report | None = None

    def bind(self, trace: DeltaTrace) -> None:
        """The whole trace whose steps were fed one by one as the run made them (``app.web.streamed``)."""
        self.trace = self.index.trace = trace

    def add_step(self, step: Any) -> None:  # an ``app.render.steps.StepInput``
        self.index.add_step(step)
        self._state = step.state

    def add(self, delta: DeltaStep) -> None:
        """The next step, replayed by the index: for a caller that builds no views (``POST /api/run``
        fed the steps while the run goes on). Feed a whole run either this way or by ``add_step``."""
        self.index.feed(delta)
        self._state = self.index.replayed.state

    def result(self) -> Found:
        """The findings and the accounting, made once (asked again: the same)."""
        found = self.report()
        return found.diagnostics, found.memory

    def report(self) -> Report:
        """``result()`` and the rest of the ``Report`` (the page's panels), from the index it was fed;
        made once (the library asks for the findings, then for the page)."""
        if self._report is None:
            self.index.finish(self._state if self._state is not None else State())
            self._report = _report(Context(self.trace, self.index, SourceFacts(self.code)), self.accounting)
        return self._report


def _findings(context: Context, clear: bool = True) -> list[Diagnostic]:
    """A rule that crashes is skipped and logged: one bug in a rule must not cost the user the trace.
    ``clear``: empty what the rules shared when they end (else the caller does, when it is done)."""
    found: list[Diagnostic] = []
    budget = current_budget()
    try:
        for rule in RULES:
            budget.check()
            try:
                found.extend(rule(context))
            except BudgetExceeded:
                raise  # the request's time is up: not a bug in the rule
            except Exception:  # noqa: BLE001 - see docstring
                log.exception("diagnostic rule %s failed", rule.__name__)
    finally:
        # What the rules shared is theirs alone, and an entry may hold the context (a cycle that
        # would leave the whole index to the cyclic collector): the analysis is freed by refcount.
        if clear:
            context.memo.clear()
    return sorted(found, key=lambda d: (d.step if d.step is not None else -1, SEVERITY_ORDER[d.severity]))


def analyze(trace: DeltaTrace, code: str, found: Found | None = None) -> DeltaResponse:
    """``POST /api/run`` with ``"format": "delta"``: the trace plus diagnostics and memory accounting
    (``found``: its ``analysis``, when already made)."""
    fields = {name: getattr(trace, name) for name in DeltaTrace.model_fields}
    diagnostics, memory = found or analysis(trace, code)
    # Built of models already validated (the trace, the server's own findings): not checked again
    # (which took 10-35 ms of a 1,600-3,000-step answer, on the request's path)
    return DeltaResponse.model_construct(**fields, diagnostics=diagnostics, memory=memory)


def analyze_v1(trace: DeltaTrace, code: str, found: Found | None = None) -> RunResponse:
    """The v1 answer: the same analysis, with every step whole (``expand``)."""
    diagnostics, memory = found or analysis(trace, code)
    v1 = expand(trace)
    fields = {name: getattr(v1, name) for name in RunResult.model_fields}
    return RunResponse.model_construct(**fields, diagnostics=diagnostics, memory=as_accounts(memory))


__all__ = ["RULE_IDS", "Analysis", "Found", "Made", "Outcome", "Report", "account", "analysis", "analyze",
           "analyze_v1", "as_accounts", "diagnose", "report"]

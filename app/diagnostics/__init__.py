"""Pitfall detector and memory accounting: pure functions over a validated ``RunResult`` and the
snippet's source. No torch here — the server runs this on the worker's (validated) trace, so the
worker can never supply its own diagnostics.
"""

from __future__ import annotations

import logging

from app.diagnostics.context import Context
from app.diagnostics.memory import account
from app.diagnostics.rules import RULE_IDS, RULES
from app.schema import Diagnostic, RunResponse, RunResult

log = logging.getLogger(__name__)
SEVERITY_ORDER = {"error": 0, "warning": 1, "info": 2}


def diagnose(result: RunResult, code: str) -> list[Diagnostic]:
    """Every rule's findings, ordered by step (then severity). A rule that crashes is skipped and
    logged: one bug in a rule must not cost the user the trace."""
    context = Context.build(result, code)
    found: list[Diagnostic] = []
    for rule in RULES:
        try:
            found.extend(rule(context))
        except Exception:  # noqa: BLE001 - see docstring
            log.exception("diagnostic rule %s failed", rule.__name__)
    return sorted(found, key=lambda d: (d.step if d.step is not None else -1, SEVERITY_ORDER[d.severity]))


def analyze(result: RunResult, code: str) -> RunResponse:
    """The response of ``POST /api/run``: the trace plus diagnostics and memory accounting."""
    fields = {name: getattr(result, name) for name in RunResult.model_fields}
    return RunResponse(**fields, diagnostics=diagnose(result, code), memory=account(result))


__all__ = ["RULE_IDS", "account", "analyze", "diagnose"]

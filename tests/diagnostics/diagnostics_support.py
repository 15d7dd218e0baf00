"""Helpers for the diagnostics tests: run a snippet through the real engine, in process, then the
pure rules; and torch-side oracles that measure the same bytes straight from live tensors."""

from __future__ import annotations

import math
import textwrap
from collections import deque
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F  # noqa: N812
from torch import nn

from app.diagnostics import account, as_accounts, diagnose
from app.engine import trace_delta
from app.schema import DeltaTrace, Diagnostic, MemoryAccount, RunResult
from app.trace.delta import expand


@dataclass
class Run:
    code: str
    trace: DeltaTrace
    result: RunResult  # the same trace, every step whole (v1)
    diagnostics: list[Diagnostic]
    memory: list[MemoryAccount]

    @property
    def rules(self) -> list[str]:
        return [d.rule for d in self.diagnostics]

    def only(self, rule: str) -> Diagnostic:
        found = [d for d in self.diagnostics if d.rule == rule]
        assert len(found) == 1, f"expected one {rule}, got {self.rules}"
        return found[0]

    def names(self, d: Diagnostic) -> set[str]:
        """The tensors a diagnostic involves, by the plain variable names they have at its step."""
        step = self.result.steps[d.step]  # type: ignore[index]
        out = set()
        for tid in d.tensors:
            names = sorted((n for n, t in step.variables.items() if t == tid), key=len)
            out.add(names[0] if names else tid)
        return out

    def step_line(self, d: Diagnostic) -> int:
        return self.result.steps[d.step].line  # type: ignore[index]


def code_of(source: str) -> str:
    return textwrap.dedent(source).strip("\n") + "\n"


def run(source: str) -> Run:
    code = code_of(source)
    trace = DeltaTrace.model_validate(trace_delta(code))
    return Run(code, trace, expand(trace), diagnose(trace, code), as_accounts(account(trace)))


# ---- torch oracles: the same questions asked of live tensors -------------------------------------

def namespace(code: str) -> dict[str, Any]:
    """Run ``code`` plainly (no tracer) with the engine's prelude and seed; return its globals."""
    torch.manual_seed(0)
    ns: dict[str, Any] = {"torch": torch, "nn": nn, "F": F, "math": math, "__name__": "__main__"}
    exec(compile(code, "<oracle>", "exec"), ns)  # noqa: S102 - the test's own snippet
    return ns


def named_tensors(ns: dict[str, Any]) -> list[torch.Tensor]:
    found: list[torch.Tensor] = []
    for name, value in ns.items():
        if name.startswith("__") or name in ("torch", "nn", "F", "math"):
            continue
        items = value if isinstance(value, list | tuple) else [value]
        for item in items:
            if isinstance(item, torch.Tensor):
                found.append(item)
            elif isinstance(item, nn.Module):
                found.extend(item.parameters())
    return found


def _storage(t: torch.Tensor) -> tuple[int, int]:
    s = t.untyped_storage()
    return s.data_ptr(), s.nbytes()


def variable_storages(roots: list[torch.Tensor]) -> dict[int, int]:
    """data_ptr → nbytes for the tensors, their .grad and ._base (no graph edges)."""
    out: dict[int, int] = {}
    queue = deque(roots)
    while queue:
        t = queue.popleft()
        ptr, nbytes = _storage(t)
        out[ptr] = nbytes
        grad = t.grad if (t.is_leaf or t.retains_grad) else None
        queue.extend(x for x in (grad, t._base) if x is not None)
    return out


def graph_storages(roots: list[torch.Tensor]) -> dict[int, int]:
    """data_ptr → nbytes of every tensor the live autograd graphs of ``roots`` keep: saved tensors
    and AccumulateGrad leaves (read with torch's own accessors)."""
    out: dict[int, int] = {}
    seen: set[int] = set()
    queue = deque(t.grad_fn for t in roots if t.grad_fn is not None)
    while queue:
        node = queue.popleft()
        if id(node) in seen:
            continue
        seen.add(id(node))
        queue.extend(fn for fn, _ in node.next_functions if fn is not None)
        variable = getattr(node, "variable", None)
        tensors = [variable] if isinstance(variable, torch.Tensor) else []
        for attribute in dir(node):
            if attribute.startswith("_saved_"):
                try:
                    value = getattr(node, attribute)
                except RuntimeError:  # freed by backward
                    continue
                if isinstance(value, torch.Tensor):
                    tensors.append(value)
        for t in tensors:
            ptr, nbytes = _storage(t)
            out[ptr] = nbytes
    return out

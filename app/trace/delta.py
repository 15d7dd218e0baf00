"""The delta format (v2) and v1: ``expand`` replays a delta trace into whole steps.

``expand`` is the only way v1 is made: the engine emits v2, and ``POST /api/run`` answers v1 as
``expand(v2)``. ``compress`` is its inverse (v1 → v2) for tests and for traces recorded as v1.
"""

from __future__ import annotations

import json
from typing import Any

from app.schema import DeltaStep, DeltaTrace, Dropped, RunResult, Step

KINDS = ("tensors", "storages", "nodes", "arrays")
EMPTY_STEP = len(Step(line=0, variables={}, tensors={}, storages={}, nodes={}).model_dump_json())


def expand(trace: DeltaTrace) -> RunResult:
    """The v1 trace: the state after every step, rebuilt by replaying the deltas from nothing."""
    variables: dict[str, str] = {}
    state: dict[str, dict[str, Any]] = {kind: {} for kind in KINDS}
    stdout = ""
    steps: list[Step] = []
    for delta in trace.steps:
        stdout += delta.stdout
        _apply(delta, variables, state)
        steps.append(Step.model_construct(
            line=delta.line, stdout=stdout, variables=dict(variables),
            tensors=dict(state["tensors"]), storages=dict(state["storages"]), nodes=dict(state["nodes"]),
            arrays=dict(state["arrays"]),
            phase=delta.phase, node=delta.node, received=list(delta.received), sent=list(delta.sent),
            capped=dict(delta.capped),
        ))
    return RunResult.model_construct(ok=trace.ok, truncated=trace.truncated, error=trace.error,
                                     cuda_on_cpu=trace.cuda_on_cpu, steps=steps)


def _apply(delta: DeltaStep, variables: dict[str, str], state: dict[str, dict[str, Any]]) -> None:
    dropped = delta.dropped
    for name in dropped.variables:
        variables.pop(name, None)
    variables.update(delta.variables)
    for kind in KINDS:
        current = state[kind]
        for ident in getattr(dropped, kind):
            current.pop(ident, None)
        current.update(getattr(delta, kind))


def expanded_size(trace: DeltaTrace) -> int:
    """About how many bytes the v1 JSON of ``trace`` takes, without building it: every step repeats
    the encoded size of everything alive then. Linear in the delta trace."""
    sizes: dict[str, dict[str, int]] = {kind: {} for kind in ("variables", *KINDS)}
    totals = dict.fromkeys(sizes, 0)
    out = 0
    total = 0
    for delta in trace.steps:
        out += len(delta.stdout.encode())
        for kind in sizes:
            for ident in getattr(delta.dropped, kind):
                totals[kind] -= sizes[kind].pop(ident, 0)
            changed = getattr(delta, kind)
            for ident, value in changed.items():
                encoded = len(ident) + 4 + (len(value) + 2 if kind == "variables"
                                            else len(value.model_dump_json(exclude_defaults=False)))
                totals[kind] += encoded - sizes[kind].get(ident, 0)
                sizes[kind][ident] = encoded
        total += EMPTY_STEP + len(str(delta.line)) + out + sum(totals.values())
    return total


def compress(result: RunResult | dict[str, Any]) -> dict[str, Any]:
    """The delta format of a v1 trace (plain data, shaped like ``DeltaTrace``)."""
    data = result.model_dump() if isinstance(result, RunResult) else result
    previous: dict[str, Any] = {"stdout": "", "variables": {}, **{kind: {} for kind in KINDS}}
    steps = []
    for step in data["steps"]:
        delta: dict[str, Any] = {"line": step["line"], "stdout": step["stdout"][len(previous["stdout"]):]}
        if step.get("phase", "forward") == "backward":
            delta.update(phase="backward", node=step["node"], received=step["received"], sent=step["sent"])
        if step.get("capped"):
            delta["capped"] = step["capped"]
        if not step["stdout"].startswith(previous["stdout"]):
            raise ValueError("v1 stdout must only grow")
        dropped: dict[str, list[str]] = {}
        for kind in ("variables", *KINDS):
            now, before = step.get(kind, {}), previous.get(kind, {})  # v1 recorded before arrays: none
            changed = {k: v for k, v in now.items() if k not in before or _differs(before[k], v)}
            if changed:
                delta[kind] = changed
            gone = [k for k in before if k not in now]
            if gone:
                dropped[kind] = gone
        if dropped:
            delta["dropped"] = dropped
        steps.append(delta)
        previous = step
    head = {key: data[key] for key in ("ok", "truncated", "error")}
    return {"format": "delta", **head, "steps": steps}


def _differs(a: Any, b: Any) -> bool:
    if isinstance(a, str) or isinstance(b, str):
        return a != b
    # Facts compare as JSON: NaN stands as "NaN", and 1 vs 1.0 or -0.0 vs 0.0 are changes to show.
    return json.dumps(a, sort_keys=True) != json.dumps(b, sort_keys=True)


__all__ = ["Dropped", "compress", "expand", "expanded_size"]

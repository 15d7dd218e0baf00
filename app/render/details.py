"""Every fact of one tensor at one step, as (label, text) pairs for the detail panel."""

from __future__ import annotations

from app.render import fmt
from app.render.footprint import Layout, is_contiguous
from app.render.names import short_node_name
from app.schema import Step


def _who(tid: str | None, names: dict[str, list[str]]) -> str:
    if tid is None:
        return "None"
    return f"{names[tid][0]} ({tid})" if tid in names else tid


def tensor_facts(
    step: Step, tid: str, names: dict[str, list[str]], holders: dict[str, list[str]], born: int | None
) -> tuple[tuple[str, str], ...]:
    fact = step.tensors[tid]
    rows: list[tuple[str, str]] = [
        ("names", ", ".join(names[tid]) if tid in names else "no variable reaches it"),
        ("id", tid),
    ]
    if tid in holders:
        rows.append(("held by", ", ".join(holders[tid])))
    storage = step.storages.get(fact.storage) if fact.storage else None
    layout = Layout(tuple(fact.shape), tuple(fact.stride), fact.storage_offset)
    rows += [
        ("shape", fmt.shape(fact.shape)),
        ("dtype", fact.dtype),
        ("stride", fmt.shape(fact.stride)),
        ("storage_offset", str(fact.storage_offset)),
        ("storage", f"{fact.storage} · {fmt.nbytes(storage.nbytes)}" if storage else str(fact.storage)),
        ("is_contiguous", str(is_contiguous(layout))),
        ("requires_grad", str(fact.requires_grad)),
        ("is_leaf", str(fact.is_leaf)),
    ]
    node = step.nodes.get(fact.grad_fn) if fact.grad_fn else None
    rows.append(("grad_fn", f"{short_node_name(node.name)} ({fact.grad_fn})" if node else "None"))
    rows.append(("grad", _who(fact.grad, names)))
    if fact.is_view or fact.base:
        rows.append(("_base", _who(fact.base, names)))
    rows.append(("_version", "—" if fact.version is None else str(fact.version)))
    if fact.retains_grad:
        rows.append(("retains_grad", "True"))
    if fact.is_inference:
        rows.append(("is_inference", "True"))
    if fact.device != "cpu":
        rows.append(("device", fact.device))
    if born is not None:
        rows.append(("created", f"line {born}"))
    if fact.values is not None:
        rows.append(("values", fmt.nested(fact.values)))
    elif fact.summary is not None:
        summary = fact.summary
        parts = [f"{summary.numel} elements"]
        parts += [f"{label} {fmt.long_scalar(v)}" for label, v in
                  (("min", summary.min), ("max", summary.max), ("mean", summary.mean)) if v is not None]
        rows.append(("values", " · ".join(parts)))
    return tuple(rows)

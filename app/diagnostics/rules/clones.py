"""``unneeded-clone``: a ``clone()`` whose copy is never needed.

A copy is needed when one side is later written in place and the other must keep the old values.
If neither the clone nor its source is ever modified while both are alive, the two always hold the
same values: the copy only costs memory. Quiet when the run stopped early (the rest is unknown) and
when the clone compacts a view (``big[:2].clone()`` lets ``big`` be freed), and for copies under
``MIN_BYTES``.
"""

from __future__ import annotations

from collections.abc import Iterator

from app.diagnostics.context import Context
from app.diagnostics.source import resolve, text
from app.diagnostics.trace import fmt_bytes
from app.schema import Diagnostic, Step

RULE = "unneeded-clone"
# Below this a copy costs nothing worth a hint (and teaching snippets clone 3-element tensors on purpose).
MIN_BYTES = 1024


def _storage_bytes(step: Step, tid: str) -> int:
    storage = step.tensors[tid].storage
    return step.storages[storage].nbytes if storage is not None and storage in step.storages else 0


def _modified(context: Context, start: int, tid: str) -> tuple[bool, bool]:
    """(written in place later, alive together with ``start``'s step) for a tensor from ``start`` on."""
    base = context.steps[start].tensors.get(tid) or context.before(start).tensors.get(tid)
    if base is None:
        return False, False
    storage, alive_later = base.storage, False
    versions = {t: f.version or 0 for t, f in context.steps[start].tensors.items() if f.storage == storage}
    for step in context.steps[start + 1:]:
        fact = step.tensors.get(tid)
        if fact is None:
            break
        alive_later = True
        for other, o in step.tensors.items():
            if o.storage == storage and (o.version or 0) > versions.setdefault(other, o.version or 0):
                return True, alive_later
    return False, alive_later


def unneeded_clones(context: Context) -> Iterator[Diagnostic]:
    result = context.result
    if result.truncated or result.error is not None:
        return
    seen: set[str] = set()
    for index, step in enumerate(context.steps):
        facts = context.facts(index)
        if facts is None or facts.clone is None:
            continue
        clone = facts.clone
        key = f"{facts.func}:{clone.target}" if facts.func else clone.target
        tid = step.variables.get(key)
        before = context.before(index)
        source = resolve(before, clone.source, facts.func)
        if tid is None or source is None or tid in seen or source == tid:
            continue
        seen.add(tid)
        src = before.tensors[source]
        copied = _storage_bytes(step, tid)
        if src.is_view or _storage_bytes(before, source) > copied or copied < MIN_BYTES:
            continue  # cloning part of a larger storage can free the rest: not a waste
        if source not in step.tensors:
            continue  # x = x.clone(): the original is gone, nothing is held twice
        clone_written, _ = _modified(context, index, tid)
        source_written, _ = _modified(context, index, source)
        if clone_written or source_written:
            continue
        cheaper = (f"`{text(clone.source)}.detach()` instead — it shares memory and costs nothing"
                   if clone.detached else f"`{text(clone.source)}` itself")
        yield Diagnostic(
            rule=RULE, severity="info",
            title=f"`{clone.target}` is a copy nobody needs",
            message=(
                f"Line {step.line} (`{clone.target} = {clone.text}`) copies `{text(clone.source)}` into "
                f"{fmt_bytes(copied)} of new memory. But neither `{clone.target}` nor `{text(clone.source)}` "
                f"is modified in place afterwards, so both always hold the same values: the copy costs "
                f"memory (and a copy pass) for nothing."
            ),
            fix=(
                f"Use {cheaper}. Clone only when one side "
                f"will be changed in place while the other must keep the old values."
            ),
            step=index, line=step.line, tensors=[tid, source], bytes=copied,
        )

"""``unneeded-clone``: a ``clone()`` whose copy is never needed.

A copy is needed when one side is later written in place and the other must keep the old values.
If neither the clone nor its source is ever modified while both are alive, the two always hold the
same values: the copy only costs memory. Quiet when the run stopped early (the rest is unknown) and
when the clone compacts a view (``big[:2].clone()`` lets ``big`` be freed), and for copies under
``MIN_BYTES``.
"""

from __future__ import annotations

import ast
from bisect import bisect_right
from collections.abc import Iterator

from app.diagnostics.context import Context
from app.diagnostics.index import At
from app.diagnostics.patch import method, replace, segment
from app.diagnostics.source import resolve, text
from app.i18n import gettext as _
from app.schema import Diagnostic
from app.units import fmt_bytes

RULE = "unneeded-clone"
# Below this a copy costs nothing worth a hint (and teaching snippets clone 3-element tensors on purpose).
MIN_BYTES = 1024


def _storage_bytes(view: At, tid: str) -> int:
    fact = view.tensor(tid)
    storage = view.storage(fact.storage if fact is not None else None)
    return storage.nbytes if storage is not None else 0


def _modified(context: Context, start: int, tid: str) -> bool:
    """Some tensor on ``tid``'s memory (as of ``start``) was written in place after ``start``, while
    ``tid`` was alive: its version rose between two steps it was seen on that memory.

    The index lists those rises per storage, with the step the tensor was seen before: only rises
    seen from ``start`` on count, up to the first step ``tid`` is gone."""
    base = context.at(start).tensor(tid) or context.before(start).tensor(tid)
    if base is None or base.storage is None:
        return False
    gone = context.index.gone.get(tid, ())
    after = bisect_right(gone, start)
    end = gone[after] if after < len(gone) else len(context)  # tid's first step gone after ``start``
    bumps = context.index.bumps.get(base.storage, [])
    for step, seen in bumps[bisect_right(bumps, start, key=lambda bump: bump[0]):]:
        if step >= end:
            return False
        if seen >= start:
            return True
    return False


def unneeded_clones(context: Context) -> Iterator[Diagnostic]:
    if context.truncated or context.error is not None:
        return
    seen: set[str] = set()
    for index in range(len(context)):
        facts = context.facts(index)
        if facts is None or facts.clone is None:
            continue
        clone = facts.clone
        key = f"{facts.func}:{clone.target}" if facts.func else clone.target
        step, before = context.at(index), context.before(index)
        tid = step.variable(key)
        source = resolve(before, clone.source, facts.func)
        if tid is None or source is None or tid in seen or source == tid:
            continue
        seen.add(tid)
        src = before.tensor(source)
        copied = _storage_bytes(step, tid)
        if src.is_view or _storage_bytes(before, source) > copied or copied < MIN_BYTES:  # type: ignore[union-attr]
            continue  # cloning part of a larger storage can free the rest: not a waste
        if step.tensor(source) is None:
            continue  # x = x.clone(): the original is gone, nothing is held twice
        if _modified(context, index, tid) or _modified(context, index, source):
            continue
        fields = {"source": text(clone.source), "target": clone.target, "text": clone.text,
                  "line": step.line, "size": fmt_bytes(copied)}
        cheaper = (_("`{source}.detach()` instead — it shares memory and costs nothing")
                   if clone.detached else _("`{source}` itself")).format(**fields)
        stmt = facts.node
        lines = context.source.lines
        patch = [replace(lines, stmt, stmt.value, method(lines, clone.source, "detach()") if clone.detached
                         else segment(lines, clone.source))] if isinstance(stmt, ast.Assign) else []
        yield Diagnostic(
            rule=RULE, severity="info",
            title=_("`{target}` is a copy nobody needs").format(**fields),
            message=_(
                "Line {line} (`{target} = {text}`) copies `{source}` into "
                "{size} of new memory. But neither `{target}` nor `{source}` "
                "is modified in place afterwards, so both always hold the same values: the copy costs "
                "memory (and a copy pass) for nothing."
            ).format(**fields),
            fix=_(
                "Use {cheaper}. Clone only when one side "
                "will be changed in place while the other must keep the old values."
            ).format(cheaper=cheaper),
            step=index, line=step.line, tensors=[tid, source], bytes=copied, patch=patch,
        )

"""In-place writes that autograd did not expect.

* ``saved-tensor-modified``: a tensor a graph node saved for backward was changed in place after it
  was saved. The engine reports torch's own complaint in ``NodeFact.saved_errors`` the moment the
  version counter moves, so the failure of ``backward()`` is known before ``backward()`` runs.
* ``inplace-through-detached-alias``: a write through a ``detach()`` / ``.data`` alias changed a
  tensor that requires grad (the alias shares its memory), or changed a saved tensor behind
  autograd's back (``.data`` does not move the version counter: no error, wrong gradients).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator

from app.diagnostics.carried import Carried, carried_state, cut_patch
from app.diagnostics.context import Context
from app.diagnostics.index import MODIFIED_MARK, At
from app.diagnostics.patch import indentation, method, replace, segment
from app.diagnostics.source import LineFacts, Write, calls_method, resolve, shorten, text
from app.diagnostics.trace import detached_from, label, listing, names_of, node_label, saved_by, version_bumps
from app.i18n import gettext as _
from app.schema import Diagnostic, Patch

SAVED_RULE = "saved-tensor-modified"
ALIAS_RULE = "inplace-through-detached-alias"
VERSIONS = re.compile(r"is at version (\d+); expected version (\d+)")


def _receiver_tensor(view: At, expr: ast.expr, func: str | None) -> str | None:
    """The tensor an in-place receiver names, peeling ``[...]``, ``.T`` and view calls: ``d[0]`` → ``d``."""
    while True:
        tid = resolve(view, expr, func)
        if tid is not None:
            return tid
        if isinstance(expr, ast.Subscript | ast.Attribute):
            expr = expr.value
        elif isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute):
            expr = expr.func.value
        else:
            return None


def _writes_to(context: Context, index: int, facts: LineFacts, storage: str) -> list[Write]:
    before = context.before(index)
    found = []
    for write in facts.writes:
        tid = _receiver_tensor(before, write.base or write.receiver, facts.func)
        if tid is not None and before.tensor(tid).storage == storage:  # type: ignore[union-attr]
            found.append(write)
    return found


def saved_modified(context: Context) -> Iterator[Diagnostic]:
    """One diagnostic per line that broke a saved tensor (the index lists each broken saved tensor
    once, at the step its complaint first appeared, in the order that step lists its nodes)."""
    by_line: dict[int, Diagnostic] = {}
    error = context.error
    failed = error is not None and MODIFIED_MARK in error.message
    for index, _tensor, _seen, nid, name, complaint in context.index.modified:
        line = context.line(index)
        if line in by_line:  # one line, several saved tensors: one diagnostic
            continue
        if not failed and not context.truncated and _parameter(context, index, nid, name):
            # an optimizer's step changed a weight an old graph saved: that graph is never used again
            # (the run ended without backward() through it), as every training loop leaves its last one
            continue
        diagnostic = _saved_diagnostic(context, index, nid, name, complaint, failed)
        by_line[line] = diagnostic
        yield diagnostic


def _parameter(context: Context, index: int, nid: str, name: str) -> bool:
    """The saved tensor is a parameter (a leaf that requires grad) or a view of one (``weight.t()``)."""
    before = context.before(index)
    node = before.node(nid)
    tid = node.saved.get(name) if node is not None else None
    fact = before.tensor(tid)
    while fact is not None and fact.base is not None:
        fact = before.tensor(fact.base)
    return fact is not None and fact.is_leaf and fact.requires_grad


def _saved_diagnostic(
    context: Context, index: int, nid: str, name: str, complaint: str, failed: bool
) -> Diagnostic:
    before, step = context.before(index), context.at(index)
    node = step.node(nid)
    assert node is not None
    created = context.first_seen(nid)
    created_line = context.line(created) if created is not None else None
    node_before = before.node(nid) or node  # made and broken by one line: only the step knows it
    saved_tid = node_before.saved.get(name) if node_before is not None else None
    bumped = version_bumps(context.index, index)
    # the saved tensor made by this line too: read where it is
    seen = step if before.tensor(saved_tid) is None and step.tensor(saved_tid) is not None else before
    saved_fact = seen.tensor(saved_tid)
    storage = saved_fact.storage if saved_fact is not None else None
    written = sorted(t for t in bumped if storage is not None and step.tensor(t).storage == storage)  # type: ignore[union-attr]
    tensors = sorted({t for t in (saved_tid, *written) if t is not None})
    what = _saved_label(seen, saved_tid) if saved_tid is not None else _("a tensor it saved")
    versions = VERSIONS.search(complaint)
    now, expected = (versions.group(1), versions.group(2)) if versions else (_("newer"), _("older"))
    facts = context.source.at(step.line)
    code = _(" (`{code}`)").format(code=facts.text.strip()) if facts is not None else ""
    alias_note, fixes = "", []
    patch: list[Patch] = []
    writes = _writes_to(context, index, facts, storage) if facts is not None and storage is not None else []
    for write in writes:
        receiver = _receiver_tensor(before, write.receiver, facts.func) if facts is not None else None
        originals = detached_from(before, receiver) if receiver is not None and not write.via else []
        if write.via or originals:
            alias = text(write.receiver) if not write.via else f"{text(write.base)}.{write.via.lstrip('.')}"
            alias_note = _(
                " `{alias}` is a detach() alias of {what}: it shares its memory and its version counter, "
                "so writing to it is writing to {what}."
            ).format(alias=alias, what=what)
            if not write.via and receiver is not None:
                made_at = context.first_seen(receiver)
                copy = _independent_copy(context, made_at, text(write.receiver).split("[")[0])
                fixes.append(_("make `{name}` an independent copy where you create it: {copy}").format(
                    name=text(write.receiver).split("[")[0], copy=copy))
                patch = patch or copy_patch(context, made_at)
        replacement = write.out_of_place()
        if replacement is not None:
            fixes.append(_("write the new value out of place: `{code}`").format(code=replacement))
            if not patch and facts is not None and facts.node is not None and len(writes) == 1:
                pad = indentation(context.source.lines, facts.node.lineno)
                patch = [Patch(start=facts.node.lineno, end=facts.node.end_lineno or facts.node.lineno,
                               text=pad + replacement)]
    stale = failed and not writes and _parameter(context, index, nid, name)
    inside = [] if writes or stale or facts is None or facts.writes else _inplace_calls(context, facts)
    lines = context.source.lines
    if inside:
        # No write on the line: a module or function made with ``inplace=True`` wrote the saved tensor
        # as it ran (``nn.ReLU(inplace=True)`` after a sigmoid). A clone is not the user's to make.
        where = listing(_("line {line} (`{code}`)").format(line=line, code=shorten(segment(lines, call)))
                        for line, _stmt, call in inside)
        alias_note = _(" The line writes nothing itself: {where} overwrites its input in place when it "
                       "runs, and its input here is what `{node}` saved.").format(
            where=where, node=node_label(node.name))
        fixes = [_("Drop `inplace=True` at {where}: the module then writes its result to new memory and "
                   "leaves the saved tensor as it was.").format(where=where)]
        if len(inside) == 1:
            _line, stmt, call = inside[0]
            patch = [replace(lines, stmt, call, _without_inplace(lines, call))]

    carried = _carried_into_failure(context, nid) if stale else []
    if stale and carried:
        # An optimizer's step changed a weight an old iteration's graph saved, and backward() reached
        # that graph through state carried across iterations: cloning is no fix, the cut is.
        alias_note = _(
            " `{node}` belongs to an earlier iteration's graph: backward() at line {backward} reached it "
            "through {names}, carried from one iteration into the next (its new value is computed from "
            "the old one), and `retain_graph=True` kept that old graph alive."
        ).format(node=node_label(node.name), backward=context.error.line,  # type: ignore[union-attr]
                 names=listing(f"`{c.name}`" for c in carried))
        fixes = [_("Cut what is carried at the start of each iteration: {cuts}, so that each backward() "
                   "goes through its own iteration's graph, built from the current weights (and "
                   "`retain_graph=True` is no longer needed).").format(
                       cuts=listing(f"`{c.cut}`" for c in carried))]
        patch = cut_patch(context, context.source.at(context.error.line).loop, carried)  # type: ignore[union-attr]
    elif stale:
        fixes = [_("`{node}`'s graph was built from the weights before this update: compute the forward "
                   "pass again after it, or call backward() on every loss that uses that graph before "
                   "the update.").format(node=node_label(node.name))]
    elif not inside:
        fixes.append(_("or change a copy: `.clone()` first, then modify the clone") if fixes else
                     _("change a copy: `.clone()` first, then modify the clone"))
    outcome = _(
        " It does: backward() at line {line} stopped with that error."
    ).format(line=context.error.line) if failed else ""  # type: ignore[union-attr]
    node_name = node_label(node.name)
    # A tensor without a name is described by who saved it: said once, the second mention is "it".
    again = what if what.startswith("`") else _("it")
    fields = {"line": step.line, "code": code, "what": what, "expected": expected, "now": now,
              "node": node_name, "created": created_line, "again": again, "name": name,
              "alias_note": alias_note, "outcome": outcome}
    message = (_(
        "Line {line}{code} changed {what} in place: its version counter went from {expected} to {now}. "
        "But `{node}`, created at line {created}, saved {again} (as `{name}`) to compute gradients later, "
        "and needs it unchanged (version {expected}).{alias_note} Any backward() through this graph will "
        "therefore fail with \"one of the variables needed for gradient computation has been modified by "
        "an inplace operation\".{outcome}") if created_line is not None else _(
        "Line {line}{code} changed {what} in place: its version counter went from {expected} to {now}. "
        "But `{node}` saved {again} (as `{name}`) to compute gradients later, and needs it unchanged "
        "(version {expected}).{alias_note} Any backward() through this graph will therefore fail with "
        "\"one of the variables needed for gradient computation has been modified by an inplace "
        "operation\".{outcome}")).format(**fields)
    fix = fixes[0] if stale or inside else _(
        "Keep the saved value intact: {fixes}. If the change belongs after the gradient step, move it "
        "after backward().").format(fixes=_("; ").join(fixes))
    return Diagnostic(
        # failed: it did; a run cut short may still do it; a run that ended never backpropagated
        # through that graph again (worth knowing: it would fail)
        rule=SAVED_RULE, severity="error" if failed else "warning" if context.truncated else "info",
        title=_("backward() will fail: {what} was modified after `{node}` saved it").format(**fields),
        message=message, fix=fix, step=index, line=step.line, tensors=tensors,
        lines=[created_line] if created_line is not None else [], patch=patch,
    )


def _inplace_calls(context: Context, at: LineFacts) -> list[tuple[int, ast.stmt, ast.Call]]:
    """(line, statement, call) of the calls written with ``inplace=True`` that the line ``at`` runs:
    on that line itself (``F.relu(x, inplace=True)``), or made into a name the line uses (``model``
    of ``model = nn.Sequential(..., nn.ReLU(inplace=True))``, ``act`` of ``self.act = ...``)."""
    words = set(re.findall(r"\w+", at.text))
    found: dict[int, tuple[int, ast.stmt, ast.Call]] = {}
    for line, facts in sorted(context.source.by_line.items()):
        stmt = facts.node
        if stmt is None or facts.line != line or ast_compound(stmt):
            continue
        targets = stmt.targets if isinstance(stmt, ast.Assign) else []
        named = {t.id if isinstance(t, ast.Name) else t.attr
                 for t in targets if isinstance(t, ast.Name | ast.Attribute)}
        # (a module's own layer, made in its __init__, runs in whatever line calls the module)
        if stmt is not at.node and not named & words and facts.func != "__init__":
            continue
        for node in ast.walk(stmt):
            if isinstance(node, ast.Call) and any(
                    k.arg == "inplace" and isinstance(k.value, ast.Constant) and k.value.value is True
                    for k in node.keywords):
                found.setdefault(id(node), (node.lineno, stmt, node))
    return sorted(found.values(), key=lambda f: f[0])


def ast_compound(stmt: ast.stmt) -> bool:
    """A statement with a body of statements (walked line by line, not whole)."""
    return any(isinstance(getattr(stmt, field, None), list) and getattr(stmt, field)
               and isinstance(getattr(stmt, field)[0], ast.stmt) for field in ("body", "orelse"))


def _without_inplace(lines: list[str], call: ast.Call) -> str:
    """``nn.ReLU(inplace=True)`` → ``nn.ReLU()``: the call as typed, that keyword left out."""
    parts = [segment(lines, a) for a in call.args]
    parts += [segment(lines, k) for k in call.keywords if k.arg != "inplace"]
    return f"{segment(lines, call.func)}({', '.join(parts)})"


def _saved_label(view: At, tid: str) -> str:
    """A saved tensor without a name of its own that is a view of a named one (an RNN's ``weight.t()``
    that an ``AddmmBackward0`` saved) is called a view of that name, not "the tensor X saved as Y"."""
    fact = view.tensor(tid)
    if names_of(view, tid) or fact is None or fact.base is None or not names_of(view, fact.base):
        return label(view, tid)
    return _("a view of {name}").format(name=label(view, fact.base))


def _carried_into_failure(context: Context, nid: str) -> list[Carried]:
    """The names carried across the failing backward()'s loop whose graph reaches node ``nid``."""
    error = context.error
    facts = context.source.at(error.line) if error is not None and error.line is not None else None
    if facts is None or facts.loop is None or not len(context):
        return []
    return carried_state(context, context.at(len(context) - 1), facts.loop, {nid}, facts.func)


def copy_patch(context: Context, made_at: int | None) -> list[Patch]:
    """The line that made a ``detach()`` / ``.data`` alias, making a copy instead: ``.detach().clone()``."""
    facts = context.facts(made_at) if made_at is not None else None
    if facts is None or facts.node is None:
        return []
    lines = context.source.lines
    for node in ast.walk(facts.node):
        if calls_method(node, "detach"):
            return [replace(lines, facts.node, node, segment(lines, node) + ".clone()")]
        if isinstance(node, ast.Attribute) and node.attr == "data" and isinstance(node.ctx, ast.Load):
            return [replace(lines, facts.node, node, method(lines, node.value, "detach().clone()"))]
    return []


def _independent_copy(context: Context, made_at: int | None, name: str) -> str:
    """``d = y.detach().clone()`` from the line that made the alias ``d = y.detach()``."""
    facts = context.facts(made_at) if made_at is not None else None
    for how, expr in facts.cuts if facts is not None else []:
        if how in ("detach()", ".data"):
            return f"`{name} = {text(expr)}.detach().clone()`"
    return _("`.detach().clone()` instead of `.detach()` / `.data`")


def alias_writes(context: Context) -> Iterator[Diagnostic]:
    reported: set[tuple[int, str]] = set()
    for index in range(1, len(context)):
        facts = context.facts(index)
        if facts is None or not facts.writes:
            continue
        before, step = context.before(index), context.at(index)
        for write in facts.writes:
            found = _alias_write(before, step, write, facts)
            if found is None:
                continue
            alias, originals, storage = found
            key = (step.line, storage)
            if key in reported:
                continue
            reported.add(key)
            diagnostic = _alias_diagnostic(context, index, write, alias, originals, storage)
            if diagnostic is not None:
                yield diagnostic


def _alias_write(
    before: At, step: At, write: Write, facts: LineFacts
) -> tuple[str | None, list[str], str] | None:
    """(named alias or None, tensors that require grad behind it, storage) for a write through an alias."""
    if write.via is not None and write.base is not None:  # inline: x.data.add_(1), x.detach()[0] = 5
        original = _receiver_tensor(before, write.base, facts.func)
        fact = before.tensor(original)
        if fact is None or not fact.requires_grad:
            return None
        return (None, [original], fact.storage) if fact.storage is not None else None  # type: ignore[list-item]
    alias = _receiver_tensor(before, write.receiver, facts.func)
    if alias is None:
        return None
    # Evidence that the write happened: the alias's version moved (detach() and .data aliases both
    # count). Checked first: it is one fact, the tensors sharing the memory are more.
    old, new = before.tensor(alias), step.tensor(alias)
    if old is None or new is None or (new.version or 0) <= (old.version or 0):
        return None
    originals = detached_from(before, alias)
    storage = old.storage
    if not originals or storage is None:
        return None
    return alias, originals, storage


def _alias_diagnostic(
    context: Context, index: int, write: Write, alias: str | None, originals: list[str], storage: str
) -> Diagnostic | None:
    before, step = context.before(index), context.at(index)
    saved = saved_by(before, storage)
    # With a shared version counter (detach()), saved-tensor-modified already explains the failure.
    caught = any(
        MODIFIED_MARK in node.saved_errors.get(name, "")
        for nid, name, _ in saved if (node := step.node(nid)) is not None
    )
    if caught:
        return None  # saved-tensor-modified explains this write, alias and fix included: one finding
    silent = saved  # what nodes saved, and no version check will catch the write
    if alias is None and not silent:
        return None  # p.data.add_(...) on a parameter no graph needs: the old manual-update idiom
    original = originals[0]
    what = label(before, original)
    code = f"`{context.line_text(step.line)}`"
    if alias is not None:
        made_at = context.first_seen(alias)
        made_line = context.line(made_at) if made_at is not None else None
        alias_name = label(before, alias)
        made = _(" (line {line}: `{code}`)").format(line=made_line, code=context.line_text(made_line)) \
            if made_line is not None else ""
        memory = (_("{what}'s memory") if what.startswith("`") else _("the memory of {what}")).format(
            what=what)
        head = _(
            "{alias}{made} is not a copy of {what}: detach() and .data return a tensor that shares "
            "{memory} and only drops the gradient tracking. So {code} at line {line} changed "
            "{what} too."
        ).format(alias=alias_name, made=made, what=what, memory=memory, code=code, line=step.line)
        copy = _independent_copy(context, made_at, alias_name.strip("`"))
        fix = _(
            "If you wanted an independent copy, make one where {alias} is created: {copy}. If "
            "changing {what} is intended, change it directly inside `with torch.no_grad():`, so the "
            "intent is visible."
        ).format(alias=alias_name, copy=copy, what=what)
        tensors = [alias, *originals]
        patch = copy_patch(context, made_at)
    else:
        patch = []
        via = write.via or ".data"
        head = _("{code} at line {line} writes into {what} through `{via}`, which autograd cannot "
                 "see.").format(code=code, line=step.line, what=what, via=via)
        fix = _(
            "Do not change a tensor the graph still needs: compute the new value out of place "
            "(e.g. `{base} + ...` into a new variable), or make the change after backward(), "
            "inside `with torch.no_grad():`."
        ).format(base=text(write.base))
        tensors = list(originals)
    severity = "warning"
    if silent:
        nid, name, tid = silent[0]
        node = node_label(before.node(nid).name)  # type: ignore[union-attr]
        created = context.first_seen(nid)
        created_line = context.line(created) if created is not None else None
        head += _(
            " Worse, `{node}` (line {line}) saved {saved} for backward. A write "
            "through `.data` does not move the version counter, so backward() will not fail: it will "
            "silently compute gradients from the changed values — wrong for the forward pass that ran."
        ).format(node=node, line=created_line, saved=label(before, tid))
        severity = "error"
        tensors.append(tid)
    return Diagnostic(
        rule=ALIAS_RULE, severity=severity,  # type: ignore[arg-type]
        title=_("In-place write through a detached alias changed {what}").format(what=what),
        message=head, fix=fix, step=index, line=step.line, tensors=sorted(set(tensors)), patch=patch,
    )

"""Torch's runtime errors about autograd, turned into an explanation and a fix.

The run stopped, so the diagnostic sits on the last snapshot (the state just before the failing
line) and names the failing line.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

from app.diagnostics.carried import Carried, carried_state, cut_patch
from app.diagnostics.context import Context
from app.diagnostics.flow import flow
from app.diagnostics.patch import method, replace, segment, wrap
from app.diagnostics.rules.cuts import explain_cut
from app.diagnostics.rules.grads import root_leaves
from app.diagnostics.rules.inference import inference_error, is_inference_error
from app.diagnostics.source import LineFacts, calls_method, resolve, text
from app.diagnostics.trace import FREED_MARK, MODIFIED_MARK, label, listing, node_label, reach, sentences
from app.i18n import gettext as _
from app.i18n import ngettext
from app.schema import Diagnostic, Patch

LEAF_RULE = "inplace-on-leaf"
TWICE_RULE = "backward-twice"
NO_GRAPH_RULE = "backward-without-graph"
NON_SCALAR_RULE = "backward-non-scalar"
SAVED_RULE = "saved-tensor-modified"

LEAF_MARK = "leaf Variable that requires grad is being used in an in-place operation"
NO_GRAPH_MARK = "does not require grad and does not have a grad_fn"
NON_SCALAR_MARK = "grad can be implicitly created only for scalar outputs"


def runtime_errors(context: Context) -> Iterator[Diagnostic]:
    error = context.error
    if error is None or error.kind != "runtime":
        return
    step = len(context) - 1 if len(context) else None
    if LEAF_MARK in error.message:
        yield _leaf(context, step, error.line)
    elif FREED_MARK in error.message:
        yield _twice(context, step, error.line)
    elif NO_GRAPH_MARK in error.message:
        yield _no_graph(context, step, error.line)
    elif NON_SCALAR_MARK in error.message:
        yield _non_scalar(context, step, error.line)
    elif is_inference_error(error):
        yield inference_error(context, step, error)
    elif MODIFIED_MARK in error.message and not _predicted(context):
        yield Diagnostic(
            rule=SAVED_RULE, severity="error",
            title=_("backward() failed: a tensor the graph saved was modified in place"),
            message=_(
                "backward() at line {line} needs tensors that graph nodes saved during the forward "
                "pass, and one of them was changed in place after it was saved (torch: "
                "\"{torch}\")."
            ).format(line=error.line, torch=error.message.split(". Hint")[0]),
            fix=_("Write the new value out of place (`y = y * 2` instead of `y.mul_(2)`), or modify a "
                  "`.clone()` of it, or make the change after backward()."),
            step=step, line=error.line,
        )


def _predicted(context: Context) -> bool:
    """saved-tensor-modified already saw the bump in a snapshot and explains it at its line."""
    return bool(context.index.modified)


def _code(context: Context, line: int | None) -> str:
    code = context.line_text(line)
    return _(" (`{code}`)").format(code=code) if code else ""


def _leaf(context: Context, step: int | None, line: int | None) -> Diagnostic:
    facts = context.source.at(line) if line is not None else None
    last = context.at(step) if step is not None else None
    name, tensors, replacement = _("the tensor"), [], None
    if facts is not None and last is not None:
        for write in facts.writes:
            tid = resolve(last, write.base or write.receiver, facts.func)
            if tid is not None:
                name, tensors, replacement = label(last, tid), [tid], write.out_of_place()
                break
    target = name.strip("`")
    update = f"`with torch.no_grad(): {context.line_text(line)}`" if facts is not None else \
        "`with torch.no_grad(): ...`"
    renamed = replacement.replace(f"{target} = ", f"{target}2 = ", 1) if replacement else None
    out_of_place = f"`{renamed}`" if renamed else "`w2 = w + 1`"
    fields = {"name": name, "line": line, "code": _code(context, line), "update": update,
              "out_of_place": out_of_place}
    patch = [wrap(context.source.lines, facts.node, "with torch.no_grad():")] \
        if facts is not None and facts.node is not None and facts.line == line else []
    return Diagnostic(
        rule=LEAF_RULE, severity="error", patch=patch,
        title=_("In-place change of a leaf that requires grad ({name})").format(**fields),
        message=_(
            "Line {line}{code} tries to change {name} in place. {name} is a leaf tensor "
            "with requires_grad=True: autograd treats it as an input whose gradient it will compute, and "
            "changing it in place while the graph is being recorded would make that gradient refer to "
            "values that no longer exist. So torch refuses: \"a leaf Variable that requires grad is being "
            "used in an in-place operation\"."
        ).format(**fields),
        fix=_(
            "If this is initialisation or a manual update step, do it where no graph is recorded: "
            "{update} (that is what optimizers do). If the new value should be part of the graph, "
            "compute it out of place under a new name, {out_of_place}, so that {name} stays the leaf "
            "that receives the gradient."
        ).format(**fields),
        step=step, line=line, tensors=tensors,
    )


def _twice(context: Context, step: int | None, line: int | None) -> Diagnostic:
    previous = None
    for index in range(len(context) - 1, -1, -1):
        facts = context.facts(index)
        if facts is not None and facts.backwards:
            previous = context.line(index)
            break
    tensors: list[str] = []
    freed_names: list[str] = []
    carried_note = ""
    carried: list[Carried] = []
    if step is not None:
        last = context.at(step)
        # The run's last state, whole: asked once, for the one finding.
        final = context.index.final.nodes
        context.index.reads += len(final)
        freed = {
            nid for nid, node in final.items()
            if any(FREED_MARK in m for m in node.saved_errors.values())
        }
        facts = context.source.at(line) if line is not None else None
        roots = [b for b in facts.backwards for b in b.roots] if facts is not None else []
        reached: set[str] = set()
        for root in roots:
            tid = resolve(last, root, facts.func if facts else None)
            if tid is not None:
                tensors.append(tid)
                reached.update(reach(last, [tid]).nodes)
        used = (freed & reached) or freed
        freed_names = sorted({node_label(final[n].name) for n in used})
        loop = facts.loop if facts is not None else None
        if loop is not None:
            carried = carried_state(context, last, loop, used, facts.func if facts else None)
            if carried:
                names = listing(f"`{c.name}`" for c in carried)
                carried_note = _(
                    " In a loop this usually means a tensor carried over from an earlier iteration — here "
                    "{names}, computed from its own previous value — still links the new graph to the one "
                    "already backpropagated."
                ).format(names=names)
                tensors.extend(t for c in carried for t in c.tensors)
    again = previous is not None and previous != line
    patch = _twice_patch(context, line, previous, carried)
    first = _("backward() at line {line}").format(line=previous) if again else _("an earlier backward()")
    parts = _(" (freed: {nodes})").format(nodes=listing(freed_names)) if freed_names else ""
    return Diagnostic(
        rule=TWICE_RULE, severity="error",
        title=_("backward() through a graph that was already used"),
        message=_(
            "Line {line}{code} runs backward() through a graph that {first} already went "
            "through. To save memory, backward() frees the tensors each node saved as soon as it has used "
            "them{parts}, so a second pass has nothing to compute with: \"Trying to backward through the "
            "graph a second time\".{carried}"
        ).format(line=line, code=_code(context, line), first=first, parts=parts, carried=carried_note),
        fix=_(
            "Cut what is carried at the start of each iteration: {cuts}. The values stay, and each "
            "backward() goes through its own iteration's graph only (truncated backpropagation). Do not "
            "reach for `retain_graph=True` here: it keeps every old graph alive and growing, and once an "
            "optimizer step has changed the weights they saved, backward() fails on them anyway."
        ).format(cuts=listing(f"`{c.cut}`" for c in carried)) if carried else _(
            "Rebuild the graph before each backward(): compute the forward pass again (inside the loop). "
            "If a tensor is carried across iterations (a hidden state, a running total), cut it at the "
            "start of each iteration with `h = h.detach()`. Only if you really need two passes over the "
            "same graph, pass `retain_graph=True` to the first backward() (it keeps the saved tensors "
            "in memory)."
        ),
        step=step, line=line, tensors=list(dict.fromkeys(tensors)),
        lines=[previous] if previous is not None and previous != line else [], patch=patch,
    )


def _twice_patch(context: Context, line: int | None, previous: int | None,
                 carried: list[Carried]) -> list[Patch]:
    """A carried value cut at the top of its loop; else the first pass told to keep the graph."""
    facts = context.source.at(line) if line is not None else None
    if carried:
        return cut_patch(context, facts.loop if facts is not None else None, carried)
    first = context.source.at(previous) if previous is not None and previous != line else None
    if first is None or first.node is None:
        return []
    for node in ast.walk(first.node):
        if calls_method(node, "backward") and not any(k.arg == "retain_graph" for k in node.keywords):  # type: ignore[attr-defined]
            lines = context.source.lines
            inside = segment(lines, node)
            opened = inside.rstrip()[:-1].rstrip()
            new = opened + ("retain_graph=True)" if opened.endswith("(") else ", retain_graph=True)")
            return [replace(lines, first.node, node, new)]
    return []


def _no_graph(context: Context, step: int | None, line: int | None) -> Diagnostic:
    facts = context.source.at(line) if line is not None else None
    tensors: list[str] = []
    name = _("the tensor")
    if facts is not None and step is not None and facts.backwards:
        for root in facts.backwards[0].roots:
            tid = resolve(context.at(step), root, facts.func)
            name = f"`{text(root)}`"
            if tid is not None:
                tensors.append(tid)
    hints = []
    for index in range(step + 1 if step is not None else 0):
        lf = context.facts(index)
        if lf is None:
            continue
        at = context.line(index)
        off = _("line {line} runs under torch.no_grad()").format(line=at)
        if lf.grad_off and lf.assigned and off not in hints:
            hints.append(off)
        for how, _expr in lf.cuts:
            uses = _("line {line} uses {how}").format(line=at, how=how)
            if how in ("detach()", ".data") and uses not in hints:
                hints.append(uses)
    found = _(" In this snippet: {hints}.").format(hints=_("; ").join(hints[-3:])) if hints else ""
    fix = _("Create the tensors you want gradients for with `requires_grad=True`, compute the loss from "
            "them outside `torch.no_grad()`, and do not `.detach()` anything on the way to the loss.")
    patch: list[Patch] = []
    lines: list[int] = []
    cut = _cut_of_loss(context, step, facts)
    fields = {"line": line, "code": _code(context, line), "name": name, "found": found}
    message = _(
        "Line {line}{code} calls backward() on {name}, but it has no grad_fn: none of "
        "the tensors it was computed from requires grad, so autograd recorded nothing to go back "
        "through. That happens when it was computed under torch.no_grad() / inference_mode, from "
        "detach()ed (or .data) values, or when no input was created with requires_grad=True.{found}"
    ).format(**fields)
    if cut is not None:  # the loss was computed from tensors that require grad: one line cut it off
        cut_step, leaves = cut
        view = context.at(cut_step)
        fields["names"] = listing(label(view, leaf) for leaf in leaves[:4])
        explained = explain_cut(context, flow(context), cut_step, set(leaves), fields["names"])
        message = ngettext(
            "Line {line}{code} calls backward() on {name}, but it has no grad_fn: autograd recorded nothing "
            "to go back through. It was computed from {names}, which requires grad, but the path was cut "
            "on the way.",
            "Line {line}{code} calls backward() on {name}, but it has no grad_fn: autograd recorded nothing "
            "to go back through. It was computed from {names}, which require grad, but the path was cut "
            "on the way.", len(leaves)).format(**fields)
        message = sentences(message, explained.why)
        fix, patch, lines = explained.fix, explained.patch, [context.line(cut_step)]
    return Diagnostic(
        rule=NO_GRAPH_RULE, severity="error",
        title=_("backward() on {name}, which has no graph").format(name=name),
        message=message, fix=fix, step=step, line=line, tensors=tensors, lines=lines, patch=patch,
    )


def _cut_of_loss(context: Context, step: int | None, facts: LineFacts | None) -> tuple[int, list[str]] | None:
    """(the step that cut it, the leaves it cut) for the loss a failed backward() started from."""
    if step is None or facts is None or not facts.backwards:
        return None
    values = flow(context)
    leaves = root_leaves(context, values, step + 1, facts, context.at(step))
    cut = {leaf: at for leaf, at in leaves.items() if at is not None}
    if not cut:
        return None
    first = min(cut.values())
    return first, sorted((leaf for leaf, at in cut.items() if context.line(at) == context.line(first)),
                         key=context.at(first).variable_place)


def _non_scalar(context: Context, step: int | None, line: int | None) -> Diagnostic:
    facts = context.source.at(line) if line is not None else None
    name, shape, tensors = _("the tensor"), "", []
    if facts is not None and step is not None and facts.backwards:
        root = facts.backwards[0].roots[0] if facts.backwards[0].roots else None
        if root is not None:
            name = f"`{text(root)}`"
            tid = resolve(context.at(step), root, facts.func)
            if tid is not None:
                tensors = [tid]
                shape = _(" (shape {shape})").format(shape=context.at(step).tensor(tid).shape)  # type: ignore[union-attr]
    patch: list[Patch] = []
    if facts is not None and facts.node is not None and facts.backwards and facts.backwards[0].roots:
        root = facts.backwards[0].roots[0]
        lines = context.source.lines
        for node in ast.walk(facts.node):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                    and node.func.attr == "backward" and node.func.value is root and not node.args:
                patch = [replace(lines, facts.node, root, method(lines, root, "sum()"))]
    return Diagnostic(
        rule=NON_SCALAR_RULE, severity="error", patch=patch,
        title=_("backward() on {name}, which is not a single number").format(name=name),
        message=_(
            "Line {line}{code} calls backward() without an argument on {name}{shape}. "
            "Without an argument backward() computes the gradient of one number, so it needs a scalar."
        ).format(line=line, code=_code(context, line), name=name, shape=shape),
        fix=_("Reduce it first ({bare}.sum().backward() or .mean()), or pass the gradient that "
              "flows into it: {bare}.backward(torch.ones_like({bare})).").format(bare=name.strip("`")),
        step=step, line=line, tensors=tensors,
    )

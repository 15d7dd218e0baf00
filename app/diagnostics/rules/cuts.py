"""How a line cut the path from parameters to the loss (``.detach()``, ``.data``, ``.item()``,
``.numpy()``, ``torch.tensor(t)``, ``torch.no_grad()``, ``requires_grad = False``, indices), said in
words, with the edit that lets the gradient through where the code allows one. Used by
``grad-stays-none`` and by the runtime errors whose graph was cut (``rules/errors.py``)."""

from __future__ import annotations

import ast
from dataclasses import dataclass

from app.diagnostics.context import Context
from app.diagnostics.flow import Flow
from app.diagnostics.patch import delete, replace, segment, shown, unwrap
from app.diagnostics.source import LineFacts, calls_method, shorten
from app.i18n import gettext as _
from app.schema import Patch

# Ops whose result has no gradient at all (integers, booleans, indices): a loss computed from them
# has no path back to what produced the scores.
INDICES = frozenset({"argmax", "argmin", "argsort", "long", "int", "bool", "short", "byte", "searchsorted",
                     "bucketize", "multinomial", "nonzero"})
REWRAPS = ("torch.tensor", "torch.Tensor")  # a new leaf made of a tensor's values
CUT_KINDS = {"detach": "detach", "detach_": "detach", "item": "item", "tolist": "list"}  # else numpy
CUT_ATTRIBUTES = {"detach": "detach()", "detach_": "detach_()", "item": ".item()", "numpy": ".numpy()",
                  "tolist": ".tolist()"}


@dataclass
class Cut:
    kind: str  # detach | data | item | numpy | list | tensor | no_grad | frozen | other
    call: str = ""  # the expression that cut, as typed
    node: ast.expr | None = None
    base: ast.expr | None = None  # what it was applied to


def _depends(context: Context, values: Flow, step: int, facts: LineFacts, expr: ast.expr,
             leaves: set[str]) -> bool:
    return bool(set(values.reads(context.before(step), [expr], facts.func)) & leaves)


def _how(context: Context, values: Flow, step: int, leaves: set[str]) -> Cut:
    facts = context.facts(step)
    if facts is None or facts.node is None:
        return Cut("other")
    frozen = values.frozen
    if any(context.line(frozen[leaf]) == context.line(step) for leaf in leaves if leaf in frozen):
        return Cut("frozen")
    found: list[Cut] = []
    for node in ast.walk(facts.node):
        if calls_method(node, *CUT_ATTRIBUTES):
            method = node.func.attr  # type: ignore[attr-defined]
            kind = CUT_KINDS.get(method, "numpy")
            base = node.func.value  # type: ignore[attr-defined]
            while kind in ("numpy", "list") and calls_method(base, "detach", "cpu") and not base.args:  # type: ignore[attr-defined]
                base = base.func.value  # type: ignore[attr-defined]  # ``.detach().numpy()``: what was detached
            found.append(Cut(kind, f".{method}()", node, base))
        elif isinstance(node, ast.Attribute) and node.attr == "data" and isinstance(node.ctx, ast.Load):
            found.append(Cut("data", ".data", node, node.value))
        elif isinstance(node, ast.Call) and node.args and ast.unparse(node.func) in REWRAPS:
            found.append(Cut("tensor", f"{ast.unparse(node.func)}(...)", node, node.args[0]))
    # the cut that applies to what depends on these leaves (a line may detach something else too)
    found = [c for c in found if c.base is None or _depends(context, values, step, facts, c.base, leaves)] \
        or found
    if len(found) > 1:
        # Cuts nested in one another (``torch.tensor(np.mean(out.detach().numpy()))``): the inner one is
        # where the graph ends — the rewrap outside gets a number, not a tensor it could use as it is.
        # A ``.detach()`` that a ``.numpy()`` peels is part of that cut, not one of its own.
        peeled = [c for c in found if c.kind in ("numpy", "list")]
        found = [c for c in found
                 if not (c.kind == "detach" and any(_within(c.node, p.node) for p in peeled))]
        cuts = list(found)  # (a list being sorted reads as empty to its own key)
        found.sort(key=lambda c: any(o is not c and _within(o.node, c.node) for o in cuts))
    if found:
        return found[0]
    if facts.grad_off:
        return Cut("no_grad")
    for node in ast.walk(facts.node):  # indices, integers, comparisons: values with no gradient to carry
        if isinstance(node, ast.Compare) and _depends(context, values, step, facts, node, leaves):
            return Cut("indices", segment(context.source.lines, node), node)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute | ast.Name):
            called = node.func.attr if isinstance(node.func, ast.Attribute) else node.func.id
            if called in INDICES and _depends(context, values, step, facts, node, leaves):
                return Cut("indices", segment(context.source.lines, node), node,
                           node.func.value if isinstance(node.func, ast.Attribute) else None)
    return Cut("other")


def _within(inner: ast.expr | None, outer: ast.expr | None) -> bool:
    """``inner`` is a node inside ``outer`` (not ``outer`` itself)."""
    return inner is not None and outer is not None and inner is not outer and any(
        n is inner for n in ast.walk(outer))


def _patch(context: Context, step: int, cut: Cut) -> list[Patch]:
    facts = context.facts(step)
    if facts is None or facts.node is None:
        return []
    lines = context.source.lines
    stmt = facts.node
    if cut.kind in ("detach", "data", "item") and cut.node is not None and cut.base is not None:
        return [replace(lines, stmt, cut.node, segment(lines, cut.base))]
    if cut.kind == "tensor" and cut.node is not None and cut.base is not None:
        base = segment(lines, cut.base)
        target = stmt.targets[0] if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 else None
        if target is not None and segment(lines, target) == base:
            return [delete(stmt)]  # ``h = torch.tensor(h)``: h is the tensor already
        return [replace(lines, stmt, cut.node, f"{base}.clone()")]
    if cut.kind == "no_grad":
        block = next((w for w in reversed(facts.withs) if _turns_grad_off(w)), None)
        if block is not None and len(block.body) == 1 and block.body[0] is stmt:
            return [unwrap(lines, block)]
        return []
    if cut.kind == "frozen":
        loop = context.source.loop(facts.loop) if facts.loop is not None else None
        body = loop.node.body if loop is not None and loop.start != facts.line else []
        if loop is not None and len(body) == 1 and body[0] is stmt:
            return [delete(loop.node)]  # ``for p in head.parameters(): p.requires_grad = False``
        return [delete(stmt)]
    return []


def _turns_grad_off(block: ast.With) -> bool:
    from app.diagnostics.source import _is_grad_off

    return any(_is_grad_off(item.context_expr) for item in block.items)


@dataclass
class Explained:
    why: str
    fix: str
    patch: list[Patch]


def explain_cut(context: Context, values: Flow, cut: int, leaves: set[str], names: str) -> Explained:
    """Why line ``cut`` cut the graph of ``leaves`` (called ``names``), and its fix as words and code."""
    how = _how(context, values, cut, leaves)
    line = context.line(cut)
    patch = _patch(context, cut, how)
    fields = {"names": names, "line": line, "code": context.line_text(line), "call": shorten(how.call),
              "base": shorten(segment(context.source.lines, how.base)) if how.base is not None else "",
              "new": shown(patch[0].text) if patch and patch[0].text else ""}
    why = {
        "detach": _("Line {line} (`{code}`) calls `{call}`, which returns the same values without the graph: "
                    "everything computed from it is invisible to autograd."),
        "data": _("Line {line} (`{code}`) reads `{call}`, the same values without the graph: everything "
                  "computed from it is invisible to autograd."),
        "item": _("Line {line} (`{code}`) turns the tensor into a Python number with `{call}`, and a number "
                  "has no graph."),
        "numpy": _("Line {line} (`{code}`) turns the tensor into a numpy array with `{call}`, and autograd "
                   "cannot follow values through numpy."),
        "list": _("Line {line} (`{code}`) turns the tensor into a Python list with `{call}`, and a list of "
                  "numbers has no graph."),
        "tensor": _("Line {line} (`{code}`) copies the values into a new tensor with `{call}`: a new leaf, "
                    "with no history."),
        "no_grad": _("Line {line} (`{code}`) runs inside `torch.no_grad()`, where no graph is recorded."),
        "frozen": _("Line {line} (`{code}`) sets `requires_grad` to False on them: autograd stops recording "
                    "anything for them, although they are what the optimizer trains."),
        "indices": _("Line {line} (`{code}`) takes `{call}`: indices, integers and comparisons have no "
                     "gradient (autograd records nothing for them), so nothing computed from them leads "
                     "back."),
        "other": _("The graph of what line {line} (`{code}`) computes no longer leads back to them."),
    }[how.kind].format(**fields)
    fix = {
        "detach": _("Let the gradient through: `{new}`. Keep `.detach()` for values you only log, plot or "
                    "store, and for targets that must stay fixed."),
        "data": _("Let the gradient through: `{new}`. Use `.detach()` (not `.data`) for values you only "
                  "log or store."),
        "item": _("Keep it a tensor: `{new}`. A 0-dim tensor works in arithmetic like a number and stays in "
                  "the graph; use `.item()` only for logging."),
        "numpy": _("Do that step with torch operations on `{base}` (`torch.clamp`, `torch.where`, "
                   "`torch.exp`, ... all stay in the graph); use numpy only for values you look at."),
        "list": _("Keep it a tensor: compute with `{base}` itself (torch operations on it stay in the "
                  "graph); use `.tolist()` only for values you look at."),
        "tensor": _("`{base}` is already a tensor: use it as it is (`{base}.clone()` if you need a copy; a "
                    "clone stays in the graph)."),
        "no_grad": _("Compute it outside `torch.no_grad()`; keep no_grad for evaluation and for values "
                     "nothing is trained through."),
        "frozen": _("Do not freeze what the optimizer trains: remove `{code}` to train them, or freeze the "
                    "part you meant to freeze instead."),
        "indices": _("Compute the loss from the scores themselves, not from the indices they pick: for "
                     "classes, `F.cross_entropy(logits, target)` on the model's output (target: class "
                     "indices, `long`). Keep argmax for accuracy and predictions."),
        "other": _("Compute the loss from these parameters without cutting the graph on the way."),
    }[how.kind].format(**fields)
    if how.kind == "detach" and not patch:
        fix = _("Let the gradient through: use `{base}` where `{call}` is now. Keep `.detach()` for values "
                "you only log, plot or store.").format(**fields)
    elif how.kind == "tensor" and fields["new"]:
        fix = _("`{base}` is already a tensor: use it as it is, `{new}` (`.clone()` makes a copy that stays "
                "in the graph).").format(**fields)
    elif how.kind == "tensor" and patch:
        fix = _("`{base}` is already a tensor: use it as it is — delete line {line}.").format(**fields)
    elif how.kind == "no_grad" and patch:
        fix = _("Compute it outside `torch.no_grad()`: `{new}`, out of the `with` block. Keep no_grad for "
                "evaluation and for values nothing is trained through.").format(**fields)
    elif how.kind == "frozen" and patch:
        fields["removed"] = context.source.lines[patch[0].start - 1].strip()
        fix = _("Do not freeze what the optimizer trains: remove `{removed}` (line {start}) to train them, "
                "or freeze the part you meant to freeze instead.").format(start=patch[0].start, **fields)
    return Explained(why, fix, patch)

"""Gradients that do not arrive where the learner expects them.

* ``grad-stays-none``: a parameter the snippet trains (an optimizer holds it, or an update written by
  hand changes it) never gets a gradient, although the loss is computed from it: the path from it to
  the loss was cut — by ``.detach()``, ``.data``, ``.item()`` or ``.numpy()``, ``torch.tensor(t)``,
  ``torch.no_grad()``, or ``requires_grad = False`` on the very parameters the optimizer trains. A
  warning at the line that cut it (``app.diagnostics.flow`` finds it: the values still come from the
  parameter, the graph no longer does). A parameter no optimizer holds (a teacher, a frozen
  backbone, a target network) is left alone: not getting a gradient is what it is for.
* ``nonleaf-grad-read``: ``.grad`` of a non-leaf is always None unless ``retain_grad()`` was called.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass

from app.diagnostics.context import Context
from app.diagnostics.flow import Flow, flow
from app.diagnostics.index import At
from app.diagnostics.patch import delete, indentation, insert_before, replace, segment, shown, unwrap
from app.diagnostics.source import LineFacts, calls_method, resolve, shorten, text
from app.diagnostics.trace import label, listing, sentences
from app.diagnostics.trained import Trained, trained
from app.i18n import gettext as _
from app.i18n import ngettext
from app.schema import Diagnostic, Patch

NONE_RULE = "grad-stays-none"
NONLEAF_RULE = "nonleaf-grad-read"
MAX_NAMED = 4  # parameters a title names; the rest are counted


@dataclass(frozen=True)
class Miss:
    leaf: str
    cut: int  # the step that cut it
    backward: int  # the first backward() step whose loss depended on it


def backward_steps(context: Context) -> list[int]:
    return [k for k in range(len(context)) if (f := context.facts(k)) is not None
            and any(b.kind == "backward" and not b.limited for b in f.backwards)]


def root_leaves(context: Context, values: Flow, step: int, facts: LineFacts,
                before: At | None = None) -> dict[str, int | None]:
    """What the loss of a ``backward()`` line was computed from: its root's leaves (``before``: the
    state the line started from, when its own step is missing — the line failed)."""
    before = before or context.before(step)
    out: dict[str, int | None] = {}
    for backward in facts.backwards:
        for root in backward.roots:
            tid = resolve(before, root, facts.func)
            if tid is not None:
                leaves = values.of_tensor(before, tid)
            else:  # ``y.sum().backward()``: what the expression reads
                leaves = values.reads(before, [root], facts.func)
            for leaf, cut in leaves.items():
                if leaf not in out or (out[leaf] is not None and cut is None):
                    out[leaf] = cut
    return out


def grad_stays_none(context: Context) -> Iterator[Diagnostic]:
    trains = trained(context)
    wanted = trains.leaves()
    if not wanted:
        return
    steps = backward_steps(context)
    if not steps:
        return
    values = flow(context)
    got = context.index.grad_until
    misses: dict[str, Miss] = {}
    for k in steps:
        facts = context.facts(k)
        assert facts is not None
        for leaf, cut in root_leaves(context, values, k, facts).items():
            if cut is not None and leaf in wanted and leaf not in got and leaf not in misses:
                misses[leaf] = Miss(leaf, cut, k)
    frozen = values.frozen
    by_line: dict[int, list[Miss]] = {}  # one finding per line that cut (a loop may cut at every pass)
    for miss in misses.values():
        if frozen.get(miss.leaf) == miss.cut and not _all_frozen(trains, frozen, miss.leaf):
            continue  # one frozen part of what an optimizer trains: a choice (a backbone, for a while)
        by_line.setdefault(context.line(miss.cut), []).append(miss)
    for group in sorted(by_line.values(), key=lambda ms: min(m.cut for m in ms)):
        yield _never_trained(context, trains, values, min(m.cut for m in group), group)


def _all_frozen(trains: Trained, frozen: dict[str, int], leaf: str) -> bool:
    """Every leaf of the optimizer (or param group) that holds ``leaf`` was frozen: it trains nothing."""
    group = trains.group_of(leaf)
    return group is not None and all(other in frozen for other in group.leaves)


# ---- how the path was cut ------------------------------------------------------------------------

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


def _param_name(view: At, leaf: str) -> str:
    """A parameter as the user calls it: its module path (``encoder.weight``) before a list's item
    (``params[0]``) or a loop's variable (``p``); else what ``label`` says."""
    names = [n for n in view.names(leaf) if ":" not in n]
    if not names:
        return label(view, leaf)
    best = min(names, key=lambda n: ("." not in n or "[" in n.split(".", 1)[0], "[" in n, len(n), n))
    if "." not in best and any("." in n and "[" not in n for n in names):
        best = min((n for n in names if "." in n), key=len)
    return f"`{best}`"


def _names(view: At, leaves: list[str]) -> tuple[str, int]:
    shown = [_param_name(view, leaf) for leaf in leaves[:MAX_NAMED]]
    more = len(leaves) - len(shown)
    text_ = listing(shown)
    if more:
        text_ = ngettext("{names} and {n} more", "{names} and {n} more", more).format(names=text_, n=more)
    return text_, len(leaves)


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


def _never_trained(context: Context, trains: Trained, values: Flow, cut: int,
                   misses: list[Miss]) -> Diagnostic:
    leaves = [m.leaf for m in misses]
    view = context.at(cut)
    order = {leaf: view.variable_place(leaf) for leaf in leaves}
    leaves.sort(key=lambda leaf: order[leaf])
    names, count = _names(view, leaves)
    explained = explain_cut(context, values, cut, set(leaves), names)
    line = context.line(cut)
    backward = min(m.backward for m in misses)
    group = trains.group_of(leaves[0])
    fields = {"names": names, "line": line, "backward": context.line(backward),
              "held": group.line if group else line}
    if group is not None and group.by_hand:
        owner = ngettext("The update at line {held} changes {names}",
                         "The update at line {held} changes {names}", count).format(**fields)
    else:
        owner = ngettext("The optimizer made at line {held} holds {names}",
                         "The optimizer made at line {held} holds {names}", count).format(**fields)
    head = ngettext(
        "{owner}, and the loss that backward() at line {backward} starts from is computed from it — but no "
        "gradient ever reaches it.",
        "{owner}, and the loss that backward() at line {backward} starts from is computed from them — but no "
        "gradient ever reaches them.", count).format(owner=owner, **fields)
    outcome = _("No error is raised: backward() runs, the optimizer steps, and these parameters never "
                "change.")
    title = ngettext("{names} is never trained: line {line} cuts it off the loss",
                     "{names} are never trained: line {line} cuts them off the loss", count).format(**fields)
    result = _cut_result(context, cut, set(leaves))
    return Diagnostic(
        rule=NONE_RULE, severity="warning", title=title, message=sentences(head, explained.why, outcome),
        fix=explained.fix, step=cut, line=line, tensors=[*result, *leaves], lines=[context.line(backward)],
        patch=explained.patch,
    )


def _cut_result(context: Context, step: int, leaves: set[str]) -> list[str]:
    """The tensor the cutting line made, cut off from the leaves (what the graph shows alone)."""
    facts = context.facts(step)
    if facts is None:
        return []
    view, before = context.at(step), context.before(step)
    out = []
    for name in sorted(facts.assigned):
        key = f"{facts.func}:{name}" if facts.func else name
        tid = view.variable(key)
        if tid is not None and tid != before.variable(key) and tid not in leaves:
            out.append(tid)
    return out


def _grad_reading_steps(context: Context) -> Iterator[tuple[int, int, LineFacts, At, At]]:
    """(step, line, facts, before, after) of each step whose line reads ``.grad``; and the line the run
    failed on, read against the last state (``w = w - lr * w.grad`` fails on ``None`` there: no step
    after it)."""
    for index in range(len(context)):
        facts = context.facts(index)
        if facts is not None and facts.grad_reads:
            yield index, context.line(index), facts, context.before(index), context.at(index)
    error = context.error
    facts = context.source.at(error.line) if error is not None and error.line is not None else None
    if facts is not None and facts.grad_reads and len(context):
        last = context.at(len(context) - 1)
        yield len(context) - 1, error.line, facts, last, last  # type: ignore[union-attr, misc]


def nonleaf_grad_reads(context: Context) -> Iterator[Diagnostic]:
    reported: set[int] = set()
    for index, line, facts, before, step in _grad_reading_steps(context):
        if line in reported:
            continue
        for expr in facts.grad_reads:
            tid = resolve(before, expr, facts.func) or resolve(step, expr, facts.func)
            fact = before.tensor(tid) or step.tensor(tid)
            if tid is None or fact is None or fact.is_leaf or fact.retains_grad:
                continue
            reported.add(line)
            name = text(expr)
            created = context.first_seen(tid)
            created_line = context.line(created) if created is not None else None
            fields = {"name": name, "line": line, "created": created_line,
                      "grad_fn": _grad_fn_name(before if before.tensor(tid) is not None else step, tid)}
            made = context.facts(created) if created is not None else None
            update = _rebound_update(context, made, name) if made is not None else None
            if update is not None:
                yield _rebound_leaf(context, index, line, tid, name, made, update)  # type: ignore[arg-type]
                reported.add(line)
                break
            leaf = _lost_leaf(context, made, name) if made is not None else None
            if leaf is not None:
                yield _unnamed_leaf(context, index, line, tid, name, made, leaf)  # type: ignore[arg-type]
                reported.add(line)
                break
            patch = [insert_before((made.node.end_lineno or made.line) + 1, made.node.col_offset,
                                   f"{name}.retain_grad()")] \
                if made is not None and made.node is not None and made.func == facts.func else []
            yield Diagnostic(
                rule=NONLEAF_RULE, severity="warning",
                title=_("`{name}.grad` is always None: `{name}` is not a leaf").format(**fields),
                message=_(
                    "Line {line} reads `{name}.grad`. `{name}` was computed by an operation (its "
                    "grad_fn is {grad_fn}), "
                    "so it is not a leaf, and backward() only fills `.grad` of leaf tensors; the gradients "
                    "flowing through intermediate results are freed as soon as they are used. "
                    "`{name}.grad` is None here and stays None."
                ).format(**fields),
                fix=(_(
                    "Call `{name}.retain_grad()` right after line {created} creates it, before backward(), "
                    "to "
                    "keep its gradient; or ask for it directly: `torch.autograd.grad(loss, {name})`."
                ) if created_line is not None else _(
                    "Call `{name}.retain_grad()`, before backward(), to keep its gradient; or ask for it "
                    "directly: `torch.autograd.grad(loss, {name})`."
                )).format(**fields),
                step=index, line=line, tensors=[tid],
                lines=[created_line] if created_line is not None else [], patch=patch,
            )
            break


def _requires_grad_call(node: ast.AST) -> bool:
    return isinstance(node, ast.Call) and any(
        k.arg == "requires_grad" and isinstance(k.value, ast.Constant) and k.value.value is True
        for k in node.keywords)


def _lost_leaf(context: Context, made: LineFacts, name: str) -> tuple[Patch, str] | None:
    """``w = torch.randn(3, requires_grad=True) * 0.01`` (or ``.to(...)``): the leaf is the factory's
    unnamed result and ``w`` is computed from it. The statement with ``w`` made the leaf instead,
    ``w = (torch.randn(3) * 0.01).requires_grad_()``, and that leaf's factory call as typed."""
    stmt = made.node
    if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name)
            and stmt.targets[0].id == name) or _requires_grad_call(stmt.value):
        return None
    factories = [n for n in ast.walk(stmt.value) if _requires_grad_call(n)]
    if len(factories) != 1:
        return None
    factory = factories[0]
    lines = context.source.lines
    assert isinstance(factory, ast.Call)
    parts = [segment(lines, a) for a in factory.args]
    parts += [segment(lines, k) for k in factory.keywords if k.arg != "requires_grad"]
    plain = f"{segment(lines, factory.func)}({', '.join(parts)})"
    value = replace(lines, stmt, factory, plain).text  # the statement, the factory without the flag
    head = segment(lines, stmt.targets[0])
    rhs = value.split("=", 1)[1].strip()
    pad = indentation(lines, stmt.lineno)
    return Patch(start=stmt.lineno, end=stmt.end_lineno or stmt.lineno,
                 text=f"{pad}{head} = ({rhs}).requires_grad_()"), shorten(segment(lines, factory))


def _unnamed_leaf(context: Context, index: int, line: int, tid: str, name: str, made: LineFacts,
                  leaf: tuple[Patch, str]) -> Diagnostic:
    """``w = torch.randn(3, requires_grad=True) * 0.01`` then ``w.grad``: the leaf has no name."""
    patch, factory = leaf
    fields = {"name": name, "line": line, "made": made.line, "factory": factory, "new": shown(patch.text)}
    return Diagnostic(
        rule=NONLEAF_RULE, severity="warning",
        title=_("`{name}.grad` is always None: the leaf line {made} made has no name").format(**fields),
        message=_(
            "Line {line} reads `{name}.grad`. On line {made}, `{factory}` is the leaf that requires grad, "
            "and what follows it on that line computes `{name}` from it: `{name}` is not a leaf, so "
            "backward() fills the `.grad` of that unnamed tensor, never `{name}.grad`, and an optimizer "
            "refuses `{name}` (\"can't optimize a non-leaf Tensor\")."
        ).format(**fields),
        fix=_(
            "Make `{name}` itself the leaf: compute its value first, then ask for gradients, `{new}`. "
            "(`retain_grad()` would show a gradient, but `{name}` would still be no parameter.)"
        ).format(**fields),
        step=index, line=line, tensors=[tid], lines=[made.line], patch=[patch],
    )


def _rebound_update(context: Context, made: LineFacts, name: str) -> str | None:
    """``w -= lr * w.grad`` when ``made`` is ``w = w - lr * w.grad`` (a hand-written update that
    rebinds the parameter to a computed value, so it is no leaf any more); else None."""
    stmt = made.node
    if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name)
            and stmt.targets[0].id == name and isinstance(stmt.value, ast.BinOp)
            and isinstance(stmt.value.op, ast.Add | ast.Sub)):
        return None
    left, right = stmt.value.left, stmt.value.right
    reads_grad = any(isinstance(n, ast.Attribute) and n.attr == "grad" and isinstance(n.value, ast.Name)
                     and n.value.id == name for n in ast.walk(right))
    if not (isinstance(left, ast.Name) and left.id == name and reads_grad):
        return None
    op = "-=" if isinstance(stmt.value.op, ast.Sub) else "+="
    return f"{name} {op} {segment(context.source.lines, right)}"


def _rebound_leaf(context: Context, index: int, line: int, tid: str, name: str, made: LineFacts,
                  update: str) -> Diagnostic:
    """``w = w - lr * w.grad`` in a loop: the next pass reads ``w.grad`` of the new, computed ``w``."""
    stmt = made.node
    assert stmt is not None
    pad = indentation(context.source.lines, stmt.lineno)
    fields = {"name": name, "line": line, "made": made.line, "code": context.line_text(made.line),
              "update": update}
    text = f"{pad}with torch.no_grad():\n{pad}    {update}\n{pad}{name}.grad = None"
    return Diagnostic(
        rule=NONLEAF_RULE, severity="error" if context.error is not None else "warning",
        title=_("`{name}.grad` is None: line {made} replaced the parameter with a computed tensor").format(
            **fields),
        message=_(
            "Line {made} (`{code}`) does not update `{name}`: it makes a new tensor from it, computed by "
            "autograd from the old one, and gives it the name `{name}`. That tensor is not a leaf, so the "
            "next backward() does not fill its `.grad`, and line {line} reads `{name}.grad` as None. It "
            "also chains every step's graph to the one before."
        ).format(**fields),
        fix=_(
            "Change the parameter in place, where no graph is recorded, as optimizers do: "
            "`with torch.no_grad(): {update}`, then `{name}.grad = None` (or `.zero_()`) for the next "
            "step. `{name}` stays the same leaf, and backward() fills its `.grad` every time."
        ).format(**fields),
        step=index, line=line, tensors=[tid], lines=[made.line],
        patch=[Patch(start=stmt.lineno, end=stmt.end_lineno or stmt.lineno, text=text)],
    )


def _grad_fn_name(view: At, tid: str) -> str:
    node = view.node(view.tensor(tid).grad_fn)  # type: ignore[union-attr]
    if node is None:
        return _("set")
    return f"`{node.name}`"

"""``nonleaf-grad-read``: ``.grad`` of a non-leaf is always None unless ``retain_grad()`` was called —
read on a computed tensor, on a leaf whose factory's result was computed on (``w = torch.randn(3,
requires_grad=True) * 0.01``), or on a parameter a hand-written update rebound to a computed tensor."""

from __future__ import annotations

import ast
from collections.abc import Iterator

from app.diagnostics.context import Context
from app.diagnostics.index import At
from app.diagnostics.patch import indentation, insert_before, replace, segment, shown
from app.diagnostics.source import LineFacts, resolve, shorten, text
from app.i18n import gettext as _
from app.schema import Diagnostic, Patch

NONLEAF_RULE = "nonleaf-grad-read"


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

"""Gradients cleared between ``backward()`` and the step that needed them.

``opt.zero_grad()`` (``model.zero_grad()``, ``p.grad = None``, ``p.grad.zero_()``) placed after
``loss.backward()`` and before ``opt.step()`` throws the batch's gradients away before they are used:
with ``.grad`` None the optimizer skips every parameter; with zeros plain SGD does not move and Adam
or momentum move only by their state. Read from the same per-parameter history as
``rules/accumulate.py`` (``grad_events``), plus the steps where the parameter's optimizer's
``step()`` ran (a step that skips a parameter writes nothing to it): a step, or a write that uses the
gradient, whose last backward was followed by a clear, is the pitfall. A clear after the step, one at
the top of the loop, a GAN's generator backward into the discriminator's cleared gradients, and
accumulation every k batches all have a backward between the clear and the step, or no backward
before the clear: they stay quiet.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass

from app.diagnostics.context import Context
from app.diagnostics.numbers import Routes
from app.diagnostics.patch import indentation, insert_before
from app.diagnostics.rules.accumulate import MAX_NAMED, Event, grad_events
from app.diagnostics.source import shorten
from app.diagnostics.trace import label, listing
from app.diagnostics.trained import Group, trained
from app.i18n import gettext as _
from app.schema import Diagnostic, Patch
from app.snippet import span

RULE = "grads-cleared-before-step"


@dataclass(frozen=True)
class Lost:
    """A step that found the gradients of a backward cleared before it."""

    leaf: str
    backward: int  # the step whose backward gave the gradient
    clear: int  # the step that cleared it
    step: int  # the optimizer's step (or the update) that then ran


def _holder(context: Context, group: Group) -> str | None:
    """The text the optimizer is bound to (``opt``, ``self.opt``) where it was made."""
    facts = context.source.at(group.line)
    node = facts.node if facts is not None else None
    if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(
            node.targets[0], ast.Name | ast.Attribute):
        return ast.unparse(node.targets[0])
    return None


def _step_calls(context: Context) -> dict[str, list[int]]:
    """The steps whose line calls ``<holder>.step()`` (no closure: one given one clears for itself),
    by the holder's text."""
    out: dict[str, list[int]] = {}
    by_line: dict[int, list[str]] = {}
    for k in range(len(context)):
        facts = context.facts(k)
        if facts is None or facts.node is None:
            continue
        holders = by_line.get(facts.line)
        if holders is None:
            block = isinstance(facts.node, ast.If | ast.For | ast.While | ast.With)  # its header only
            nodes = [] if block else [facts.node]
            holders = by_line[facts.line] = [
                ast.unparse(n.func.value) for node in nodes for n in ast.walk(node)
                if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "step"
                and not n.args and not n.keywords]
        for holder in holders:
            out.setdefault(holder, []).append(k)
    return out


def _steps_of(context: Context) -> dict[str, list[Event]]:
    """Per trained leaf: ``step`` events where an optimizer holding it stepped (the optimizer made
    last before that step, of those bound to the same text)."""
    calls = _step_calls(context)
    made: dict[str, list[Group]] = {}
    for group in trained(context).groups:
        holder = None if group.by_hand else _holder(context, group)
        if holder is not None:
            made.setdefault(holder, []).append(group)
    out: dict[str, list[Event]] = {}
    for holder, groups in made.items():
        for k in calls.get(holder, []):
            earlier = [g for g in groups if g.step < k]
            if not earlier:
                continue
            latest = max(g.step for g in earlier)
            for group in earlier:
                if group.step == latest:
                    for leaf in group.leaves:
                        out.setdefault(leaf, []).append((k, 1, "step"))
    return out


def _lost(events: list[Event], leaf: str) -> Lost | None:
    fresh: int | None = None  # the backward that gave the gradient now there
    cleared: tuple[int, int] | None = None  # (that backward, the clear after it)
    for k, _order, what in events:
        if what in ("fill", "add"):
            fresh, cleared = k, None
        elif what == "set":
            fresh = cleared = None
        elif what == "clear":
            if fresh is not None:
                cleared = (fresh, k)
            fresh = None
        elif what in ("step", "use"):
            if cleared is not None:
                return Lost(leaf, cleared[0], cleared[1], k)
            fresh = cleared = None
    return None


def cleared_grads(context: Context) -> Iterator[Diagnostic]:
    trains = trained(context)
    if not trains.groups:
        return
    steps = _steps_of(context)
    found: dict[tuple[int, int], list[Lost]] = {}  # by the backward() line and the step's
    for leaf in dict.fromkeys(leaf for group in trains.groups for leaf in group.leaves):
        lost = _lost(sorted([*grad_events(context, leaf), *steps.get(leaf, [])]), leaf)
        if lost is not None:
            found.setdefault((context.line(lost.backward), context.line(lost.step)), []).append(lost)
    for losts in sorted(found.values(), key=lambda s: min(x.step for x in s)):
        yield _finding(context, losts)


BLOCKS = (ast.For, ast.While, ast.If, ast.With)


def _moved(context: Context, losts: list[Lost]) -> list[ast.stmt]:
    """The statements to move, in source order, in the function of the backward() line: each clear's
    own, or the outermost block around it that holds nothing but clears (``for p in
    model.parameters(): p.grad = None``; ``with torch.no_grad(): opt.zero_grad()``; there, one that
    starts after the backward() line), or the call of a helper that does nothing but clear
    (``clear(model)``). A block or a helper that holds more (the update, a print) stays where it is:
    only its clear moves, when it is the backward's own."""
    routes = context.routes()
    backward = context.source.at(context.line(losts[0].backward))  # (losts are grouped by that line)
    if routes is None or backward is None:
        return []
    home, backward_line = backward.func, backward.line
    moved: set[ast.stmt] = set()
    for lost in losts:
        facts = context.facts(lost.clear)
        if facts is not None and facts.node is not None:
            moved.add(facts.node)
    grew = True
    while grew:  # a block whose every statement moves moves whole
        grew = False
        for stmt in list(moved):
            parent = routes.parents.get(stmt)
            if isinstance(parent, BLOCKS) and parent not in moved \
                    and (_function(routes, parent) != home or parent.lineno > backward_line) \
                    and all(s in moved for s in [*parent.body, *getattr(parent, "orelse", [])]):
                moved.add(parent)
                grew = True
    helpers = context.memo.setdefault("cleared-helpers", {})
    for lost in losts:  # a helper that only clears: its call where the backward is
        facts = context.facts(lost.clear)
        function = routes.function_of(facts.node) if facts is not None and facts.node is not None else None
        if function is None or function.name == home or not all(
                s in moved or _docstring(s) for s in function.body):
            continue
        call = _call_of(context, lost.clear, home, function)
        if call is not None:
            moved.add(call)
            helpers[call] = function
    tops = [s for s in moved if _function(routes, s) == home
            and not any(a in moved for a in _blocks_around(context, s))]
    return sorted(tops, key=lambda s: s.lineno)


def _function(routes: Routes, node: ast.AST) -> str | None:
    """The name of the function a statement is in (None: the module), as ``LineFacts.func`` says it."""
    function = routes.function_of(node)
    return function.name if function is not None else None


def _docstring(stmt: ast.stmt) -> bool:
    return isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant) and isinstance(
        stmt.value.value, str)


def _call_of(context: Context, clear: int, home: str | None, function: ast.AST) -> ast.stmt | None:
    """The statement of ``home`` that ran the helper whose step ``clear`` is: the first step back in
    ``home`` after it, when that statement is a bare call of the helper (``clear(model)``)."""
    for k in range(clear + 1, len(context)):
        facts = context.facts(k)
        if facts is None or facts.func != home:
            continue
        stmt = facts.node
        call = stmt.value if isinstance(stmt, ast.Expr) else None
        name = getattr(function, "name", None)
        if isinstance(call, ast.Call) and name is not None and (
                getattr(call.func, "id", None) == name or getattr(call.func, "attr", None) == name):
            return stmt
        return None
    return None


def _blocks_around(context: Context, stmt: ast.stmt) -> list[ast.AST]:
    """The statements a statement is nested in, innermost first, up to its function or module."""
    routes = context.routes()
    found: list[ast.AST] = []
    node = routes.parents.get(stmt) if routes is not None else None
    while node is not None and not isinstance(node, ast.Module | ast.FunctionDef | ast.AsyncFunctionDef):
        if isinstance(node, ast.stmt):
            found.append(node)
        node = routes.parents.get(node)  # type: ignore[union-attr]
    return found


def _zeroes_in_place(context: Context, stmt: ast.stmt) -> bool:
    """``p.grad.zero_()`` (itself, or in the helper a moved call runs): fails on a .grad that is None —
    before the first backward() it is."""
    helper = context.memo.get("cleared-helpers", {}).get(stmt)
    return any(isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "zero_"
               and isinstance(n.func.value, ast.Attribute) and n.func.value.attr == "grad"
               for root in (stmt, helper) if root is not None for n in ast.walk(root))


def _after_step(context: Context, first: Lost, stmts: list[ast.stmt]) -> bool:
    """Move the clear after the step, not before the backward: ``.grad.zero_()`` (None at first), or a
    clear in a block of the step's that the backward is not in (a step every k batches: clearing
    before each backward would undo the accumulation)."""
    step = context.source.at(context.line(first.step))
    step_node = step.node if step is not None else None
    backward_line = context.line(first.backward)
    for stmt in stmts:
        if _zeroes_in_place(context, stmt):
            return True
        shared = [b for b in _blocks_around(context, stmt) if b.lineno > backward_line]  # type: ignore[attr-defined]
        if step_node is not None and any(n is step_node for b in shared for n in ast.walk(b)):
            return True
    return False


def _patch(context: Context, first: Lost, stmts: list[ast.stmt]) -> list[Patch]:
    """The clearing statements moved to just before the backward() line — or, for ``.grad.zero_()``
    (no .grad yet at the first iteration) and for a clear in the step's own block, to just after the
    step — in the same function, at that line's indentation, nothing but themselves on their lines. A
    clear leaves a ``with`` block on its way (``torch.no_grad()`` changes nothing for a clear), never
    a loop or an ``if``: that would change how often it runs."""
    backward = context.source.at(context.line(first.backward))  # its node steps have no facts
    step = context.source.at(context.line(first.step))
    if not stmts or backward is None or backward.node is None or step is None or step.node is None:
        return []
    if backward.func != step.func:  # (the moved statements are the backward's function's: ``_moved``)
        return []
    blocks = (ast.If, ast.For, ast.While, ast.With)
    if isinstance(backward.node, blocks) or isinstance(step.node, blocks):
        return []
    lines = context.source.lines
    after = _after_step(context, first, stmts)
    anchor = step.node if after else backward.node
    target = span(step.node)[1] + 1 if after else span(backward.node)[0]
    pad = indentation(lines, anchor.lineno)
    home = _blocks_around(context, anchor)  # where the moved lines go: the anchor's blocks
    texts, patches = [], []
    for stmt in stmts:
        start, end = span(stmt)
        if not span(backward.node)[1] < start < span(step.node)[0]:
            return []
        around = _blocks_around(context, stmt)
        inner, outer = around[:len(around) - len(home)], around[len(around) - len(home):]
        if outer != home or not all(isinstance(b, ast.With) for b in inner):
            return []
        if any(lines[n - 1].strip() == "" for n in range(start, end + 1)):
            return []
        own = len(indentation(lines, start))
        texts += [row[own:] for row in lines[start - 1:end]]
        patches.append(Patch(start=start, end=end, text=""))
    return [insert_before(target, len(pad), "\n".join(texts)), *patches]


def _finding(context: Context, losts: list[Lost]) -> Diagnostic:
    first = min(losts, key=lambda x: x.step)
    view = context.at(first.step)
    leaves = [x.leaf for x in losts if view.tensor(x.leaf) is not None]
    names = listing(label(view, t) for t in leaves[:MAX_NAMED])
    more = len(leaves) - MAX_NAMED
    if more > 0:
        names = _("{names} and {count} more").format(names=names, count=more)
    stmts = _moved(context, losts)
    stmt = stmts[0] if stmts else None
    line = stmt.lineno if stmt is not None else context.line(first.clear)
    backward_line, step_line = context.line(first.backward), context.line(first.step)
    code = shorten("; ".join(" ".join(row.strip() for row in ast.unparse(s).splitlines()) for s in stmts)
                   ) if stmts else context.line_text(line)
    fields = {"line": line, "code": code, "names": names, "backward_line": backward_line,
              "backward_code": context.line_text(backward_line), "step_line": step_line,
              "step_code": context.line_text(step_line), "then": first.step + 1}
    message = _(
        "Line {line} (`{code}`) clears the gradients of {names} that line {backward_line} "
        "(`{backward_code}`) has just computed, before line {step_line} (`{step_code}`) uses them: at step "
        "{then} the update finds .grad None (the optimizer skips the parameter) or all zeros (plain SGD "
        "does not move; Adam or momentum move only by what they remember). Every batch's gradients are "
        "thrown away unused, so nothing learns from them."
    ).format(**fields)
    if stmts and _after_step(context, first, stmts) and not any(_zeroes_in_place(context, s) for s in stmts):
        fix = _(
            "Clear the gradients after the update, not between backward() and the update: move `{code}` "
            "to just after line {step_line} (`{step_code}`), in the same block, so that the gradients "
            "summed since the last update are used before they are cleared."
        ).format(**fields)
    elif stmts and any(_zeroes_in_place(context, s) for s in stmts):
        fix = _(
            "Clear the gradients after the update, not between backward() and the update: move `{code}` "
            "to just after line {step_line} (`{step_code}`). (Not before backward(): at the first "
            "iteration .grad is still None, and None has no zero_().)"
        ).format(**fields)
    else:
        fix = _(
            "Clear the gradients before backward(), not between backward() and the update: move `{code}` "
            "to just before line {backward_line} (`{backward_code}`), or to the top of the loop."
        ).format(**fields)
    return Diagnostic(
        rule=RULE, severity="warning",
        title=_("Gradients of {names} are cleared before the step uses them").format(**fields),
        message=message, fix=fix, step=first.step, line=line, tensors=leaves,
        lines=sorted({backward_line, step_line} - {line}), patch=_patch(context, first, stmts),
    )

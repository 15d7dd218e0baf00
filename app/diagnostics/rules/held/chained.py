"""``graph-chained-across-iterations``: a name built from its own previous value — a running total
(``total += loss``), an average, or state carried from one iteration to the next (``x = x.clone()``,
an RNN's hidden state) — so each iteration's graph hangs on to the one before."""

from __future__ import annotations

import ast
from collections import Counter

from app.diagnostics.carried import guarded
from app.diagnostics.context import Context
from app.diagnostics.holders import Cause, bare, change_steps, growth_per_iteration, item_keys
from app.diagnostics.lifetimes import Lifetimes
from app.diagnostics.numbers import number_call, number_fits, takes_number
from app.diagnostics.patch import insert_before, method, replace, replace_many, segment, shown
from app.diagnostics.rules.held.places import Place, caller
from app.diagnostics.rules.held.words import chart, titled
from app.diagnostics.source import LineFacts, expr_keys, resolve, shorten
from app.diagnostics.trace import sentences
from app.i18n import gettext as _
from app.schema import Diagnostic, Patch

CHAIN_RULE = "graph-chained-across-iterations"


def _chain_line(context: Context, cause: Cause, steps: list[int]) -> int:
    """The line that links an iteration to the one before: the first change of the name in each
    iteration (after the first), the most common one."""
    run = cause.run
    firsts: dict[int, int] = {}
    for step in steps:
        firsts.setdefault(run.iteration(step), step)
    lines = [context.line(s) for i, s in sorted(firsts.items()) if i > 0] or [context.line(s) for s in steps]
    counts = Counter(lines)
    return max(counts, key=lambda line: (counts[line], -line)) if counts else run.loop.start


def _ingredients(context: Context, step: int, facts: LineFacts, name: str) -> list[tuple[ast.expr, str]]:
    """The expressions of the statement, other than the name itself, whose tensors bring a graph in:
    (expression, the call that cuts it: ``item()`` for a computed number, else ``detach()``)."""
    stmt = facts.node
    value = stmt.value if isinstance(stmt, ast.Assign | ast.AugAssign) else None
    if value is None:
        return []
    before, after = context.before(step), context.at(step)
    found: list[tuple[ast.expr, str]] = []

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.Name | ast.Attribute | ast.Subscript):
            tid, view = resolve(before, node, facts.func), before  # type: ignore[arg-type]
            if tid is None:  # a function's parameter, bound as its first line runs
                tid, view = resolve(after, node, facts.func), after  # type: ignore[arg-type]
            if tid is not None:
                fact = view.tensor(tid)
                graph = fact is not None and (fact.grad_fn or fact.requires_grad)
                key = (expr_keys(node) or [""])[0]
                itself = key == name or key.startswith((name + "[", name + "."))  # ``state[0]`` of ``state``
                if not itself and graph:
                    found.append((node, "item()" if fact.shape == [] and not fact.is_leaf else "detach()"))  # type: ignore[arg-type]
                return
        if isinstance(node, ast.Call):  # a call's result is made here: its arguments may bring graphs
            receiver = node.func.value if isinstance(node.func, ast.Attribute) else None
            if receiver is not None:  # ``new.exp()``: so may its receiver, cut with what it makes
                mark = len(found)
                visit(receiver)
                if len(found) > mark:
                    call = found[mark][1]
                    del found[mark:]
                    found.append((node, call))
                    return
            for arg in [*node.args, *(k.value for k in node.keywords)]:
                visit(arg)
            return
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(value)
    if not found:
        # ``val_loss += F.mse_loss(model(x), y)``: the graph comes in with what the call returns (its
        # arguments bring none of their own), so that value is what to cut
        added = _added(stmt, name)
        if added is not None and any(isinstance(n, ast.Call) for n in ast.walk(added)):
            after = context.at(step)
            carried = after.tensor(resolve(after, ast.Name(name, ast.Load()), facts.func))
            found.append((added, "item()" if carried is not None and carried.shape == [] else "detach()"))
    return found


def _sum_fits(context: Context, facts: LineFacts | None, expr: ast.expr) -> bool:
    """A number can be added into the carried name: the name is used as a number everywhere (no
    ``total.item()``, no ``torch.stack``), and so is the value wherever the statement hands it."""
    routes = context.routes()
    if routes is None or facts is None:
        return False
    stmt = facts.node
    targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target] if isinstance(
        stmt, ast.AugAssign) else []
    if len(targets) != 1 or not takes_number(routes, routes.scope(facts.func), targets=targets):
        return False
    call = routes.call_taking(expr)
    if call is not None and not number_call(call):
        return number_fits(routes, facts.func, expr, facts.node)
    return True


def _handed(context: Context, cause: Cause, step: int, facts: LineFacts,
            ingredients: list[tuple[ast.expr, str]]) -> tuple[Place, str] | None:
    """The best cut when the graph comes in through a parameter of the function the chain is built in
    (``meter.update(loss)``, then ``self.sum += val``): at the loop's call, where the value is handed
    in — ``.item()`` when a number does everywhere it goes (``app.diagnostics.numbers``), else
    ``.detach()``."""
    if facts.func is None or facts.func == cause.run.loop.func or facts.node is None:
        return None
    routes = context.routes()
    function = routes.functions.get(facts.func, []) if routes is not None else []
    if len(function) != 1:
        return None
    arguments = function[0].args
    params = {a.arg for a in arguments.posonlyargs + arguments.args + arguments.kwonlyargs}
    after = context.at(step)
    for expr, _call in ingredients:
        if isinstance(expr, ast.Name) and expr.id in params:
            tid = resolve(after, expr, facts.func)
            place = caller(context, cause, step, tid, Place(context.line(step), facts))
            if place is None or place.call_arg is None or place.facts is None or place.facts.node is None:
                continue
            fact = context.at(step).tensor(tid)
            scalar = fact is not None and fact.shape == []
            fits = routes is not None and number_fits(routes, place.facts.func, place.call_arg,
                                                      place.facts.node)
            return place, "item()" if scalar and fits else "detach()"
    return None


def _added(stmt: ast.stmt, name: str) -> ast.expr | None:
    """What ``name += value`` or ``name = name + value`` (``value + name``) adds to the name."""
    if isinstance(stmt, ast.AugAssign) and isinstance(stmt.target, ast.Name) and stmt.target.id == name \
            and isinstance(stmt.op, ast.Add | ast.Sub):
        return stmt.value
    if isinstance(stmt, ast.Assign) and isinstance(stmt.value, ast.BinOp) \
            and isinstance(stmt.value.op, ast.Add | ast.Sub):
        left, right = stmt.value.left, stmt.value.right
        if isinstance(left, ast.Name) and left.id == name:
            return right
        if isinstance(right, ast.Name) and right.id == name and isinstance(stmt.value.op, ast.Add):
            return left
    return None


def chained_across(context: Context, life: Lifetimes, cause: Cause) -> Diagnostic | None:
    """The finding for a name rebuilt from its own previous value, its graph carried along."""
    steps = change_steps(context, cause)
    if not steps:
        return None
    line = _chain_line(context, cause, steps)
    on_line = [s for s in steps if context.line(s) == line] or steps
    facts = context.source.at(line)
    run = cause.run
    # Backpropagated through: a backward pass of a later iteration ran the held nodes again.
    backprop = any(run.iteration(s) > run.iteration(life.born[n]) for n in cause.nodes
                   for s in life.ran.get(n, ()) if run.starts[0] <= s < run.stop)
    name = bare(cause.key)
    ingredients = [] if backprop or facts is None else _ingredients(context, on_line[-1], facts, name)
    ingredients = [(e, "detach()" if call == "item()" and not _sum_fits(context, facts, e)
                    else call) for e, call in ingredients]
    lines = context.source.lines
    growth = growth_per_iteration(context, on_line)
    step = growth[2] if growth is not None else on_line[-1]
    is_tuple = bool(item_keys(context, cause.key))
    fields = {"line": line, "code": context.line_text(line), "name": name, "iterations": len(on_line),
              "nodes": len(cause.nodes), "loop": run.loop.start}
    patch: list[Patch] = []
    handed = _handed(context, cause, on_line[-1], facts, ingredients) if facts is not None else None
    if handed is not None:
        place, call = handed
        stmt = place.facts.node  # type: ignore[union-attr]
        patch = [replace(lines, stmt, place.call_arg, method(lines, place.call_arg, call))]  # type: ignore[arg-type]
        fields.update(new=shown(patch[0].text), call_line=place.line, call_code=context.line_text(place.line),
                      arg=shorten(segment(lines, place.call_arg)), func=facts.func)  # type: ignore[arg-type, union-attr]
        line = place.line
        title = titled(_("`{name}` adds up every iteration's graph").format(**fields), growth)
        message = _(
            "Line {call_line} (`{call_code}`) hands `{arg}`, which still has its autograd graph, to "
            "`{func}`, and there line {line} (`{code}`) builds `{name}` from its previous value and it. So "
            "the new `{name}` keeps the old one's graph and adds this iteration's: after {iterations} "
            "iterations it links all of them ({nodes} graph nodes of earlier iterations), and nothing is "
            "freed while `{name}` lives."
        ).format(**fields)
        fix = (_(
            "Hand it a number, not a graph: `{new}`. `.item()` gives a plain Python float, so `{name}` adds "
            "up the same values and each iteration's graph is freed when the next one is built."
        ) if call == "item()" else _(
            "Hand it the values without the graph: `{new}`. A detached tensor has the same values and no "
            "grad_fn, so `{name}` adds up the same values and each iteration's graph is freed when the "
            "next one is built."
        )).format(**fields)
    elif ingredients and facts is not None and facts.node is not None:
        stmt = facts.node
        patch = [replace_many(lines, stmt, [(e, method(lines, e, call)) for e, call in ingredients])]
        new_text = patch[0].text
        fields["new"] = shown(new_text)
        fields["what"] = ", ".join(f"`{shorten(segment(context.source.lines, e))}`" for e, _c in ingredients)
        title = titled(_("`{name}` adds up every iteration's graph").format(**fields), growth)
        message = _(
            "Line {line} (`{code}`) builds `{name}` from its previous value and {what}, which still has its "
            "autograd graph. So the new `{name}` keeps the old one's graph and adds this iteration's: after "
            "{iterations} iterations it links all of them ({nodes} graph nodes of earlier iterations), and "
            "nothing is freed while `{name}` lives."
        ).format(**fields)
        after = context.at(on_line[-1])
        built = after.tensor(after.variable(cause.key))
        fix = _(
            "Add numbers, not graphs: `{new}`. `{name}` gets the same value, and each iteration's graph is "
            "freed when the next one is built. (To backpropagate through the sum on purpose, call "
            "`{name}.backward()` once after the loop.)"
        ).format(**fields) if (built is None or built.shape == []) and any(
            call == "item()" for _e, call in ingredients) else _(
            # ``all_out = torch.cat([all_out, out])``: no sum to backpropagate, no number to add
            "Keep the values without the graph: `{new}`. `{name}` gets the same values, and each "
            "iteration's graph is freed when the next one is built."
        ).format(**fields)
    else:
        cut = f"{name} = tuple(s.detach() for s in {name})" if is_tuple else f"{name} = {name}.detach()"
        unbound = context.at(run.starts[0]).variable(cause.key) is None and not (
            is_tuple and context.at(run.starts[0]).keys(cause.key))
        loop = run.loop
        if loop.body_line > loop.start:
            text = guarded(context, loop.start, loop.func, name, cut) if unbound else cut
            patch = [insert_before(loop.body_line, loop.body_indent, text)]
        fields["cut"] = cut
        title = titled(_("`{name}` carries its graph into the next iteration").format(**fields), growth)
        message = _(
            "Line {line} (`{code}`) computes the new `{name}` from the one the previous iteration left, and "
            "that one still has its autograd graph. So each iteration's graph hangs on to the one before: "
            "after {iterations} iterations `{name}` reaches back through all of them ({nodes} graph nodes "
            "of earlier iterations)."
        ).format(**fields)
        if backprop:
            message = sentences(message, _("Every backward() goes back through all of them too, so it also "
                                           "gets slower each time."))
        fix = (_(
            "Cut the carried value at the start of each iteration: `{cut}` as the first line of the loop "
            "(line {loop}). The values stay; the old graph is let go. Gradients then flow through one "
            "iteration at a time (truncated backpropagation), which is what a training loop wants."
        ) if backprop else _(
            "Cut the carried value at the start of each iteration: `{cut}` as the first line of the loop "
            "(line {loop}). The values stay; the old graph is let go. If nothing here needs gradients, "
            "run the loop under `with torch.no_grad():` instead."
        )).format(**fields)
    message = sentences(message, chart(context, growth, len(cause.nodes)),
                        _("(The run stopped at the step limit before the end.)") if context.truncated else "")
    view = context.at(step)
    holders = [t for t in cause.holders if view.tensor(t) is not None]
    if not holders:
        keys = item_keys(context, cause.key) or [cause.key]
        holders = [t for k in keys if (t := view.variable(k)) is not None]
    return Diagnostic(
        rule=CHAIN_RULE, severity="warning", title=title, message=message, fix=fix, step=step, line=line,
        tensors=holders, bytes=max(round(growth[0]), 0) if growth is not None else None, patch=patch,
        lines=[fields["line"]] if fields["line"] != line else [],  # the function's line, cut at the call
    )


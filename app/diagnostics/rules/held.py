"""Graphs held across loop iterations: memory that grows every time the loop goes round.

Read from the trace, not from how the code is spelled: ``app.diagnostics.holders`` finds, for each run
of a loop, the graph nodes a name still reaches iterations after they were made, and the names that
hold them. Each holder is one cause, said once, at the line that makes it hold them:

* ``graph-kept-by-container``: a list, dict, deque or attribute that gains an item every iteration
  (``losses.append(loss)``, a hook that stores its output, a meter object);
* ``graph-chained-across-iterations``: a name built from its own previous value — a running total
  (``total += loss``), an average, or state carried from one iteration to the next (``x = x.clone()``,
  an RNN's hidden state).

Every byte count quoted is the memory chart's (``Accounting``), at steps the message names.
"""

from __future__ import annotations

import ast
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass

from app.diagnostics.carried import guarded
from app.diagnostics.context import Context
from app.diagnostics.holders import (
    Cause,
    add_steps,
    bare,
    causes,
    change_steps,
    grows,
    growth_per_iteration,
    item_keys,
)
from app.diagnostics.index import container_of
from app.diagnostics.lifetimes import Lifetimes, lifetimes
from app.diagnostics.loops import loop_runs
from app.diagnostics.numbers import Routes, number_call, number_fits, takes_number
from app.diagnostics.patch import insert_before, method, replace, replace_many, segment, shown, wrap
from app.diagnostics.source import Add, LineFacts, expr_keys, resolve, root_name, shorten
from app.diagnostics.trace import sentences
from app.i18n import gettext as _
from app.schema import Diagnostic, Patch
from app.units import fmt_bytes

CONTAINER_RULE = "graph-kept-by-container"
CHAIN_RULE = "graph-chained-across-iterations"


def held_across_iterations(context: Context) -> Iterator[Diagnostic]:
    life = lifetimes(context)
    found: dict[str, Cause] = {}
    for run in loop_runs(context):
        for cause in causes(context, life, run):
            known = found.get(cause.key)
            # One finding per cause: of the runs that show it, the innermost loop's last run.
            if known is None or (cause.run.loop.start, cause.run.starts[0]) >= (known.run.loop.start,
                                                                             known.run.starts[0]):
                found[cause.key] = cause
    for cause in sorted(found.values(), key=lambda c: c.run.starts[0]):
        finding = _finding(context, life, cause)
        if finding is not None:
            yield finding


def _chart(context: Context, growth: tuple[float, int, int] | None, nodes: int) -> str:
    """The sentence that quotes the memory chart (the figures its readout shows at those steps)."""
    changes = context.memory
    if growth is None:
        return ""
    per, first, last = growth
    fields = {"growth": fmt_bytes(max(round(per), 0)), "first": fmt_bytes(changes[first].total_bytes),
              "first_step": first + 1, "last": fmt_bytes(changes[last].total_bytes), "last_step": last + 1,
              "graph": fmt_bytes(changes[last].graph_bytes), "nodes": nodes}
    if round(per) <= 0:
        return _(
            "The memory chart shows {last} at step {last_step} and barely grows: backward() already freed "
            "what those graphs saved. Their nodes still pile up, and a loop that skips backward() (an "
            "evaluation, a logging step) keeps everything they save."
        ).format(**fields)
    if not changes[last].graph_bytes:
        return _(
            "Memory grows by about {growth} per iteration: the memory chart shows {first} at step "
            "{first_step} and {last} at step {last_step}."
        ).format(**fields)
    return _(
        "Memory grows by about {growth} per iteration: the memory chart shows {first} at step "
        "{first_step} and {last} at step {last_step}, {graph} of it held only by the graph."
    ).format(**fields)


def _titled(what: str, growth: tuple[float, int, int] | None) -> str:
    """The finding's title: what holds the graphs, and what it costs each time round."""
    effect = _("memory grows each time round") if growth is not None and round(growth[0]) > 0 else _(
        "its graph nodes pile up each time round")
    return _("{what}: {effect}").format(what=what, effect=effect)


def _finding(context: Context, life: Lifetimes, cause: Cause) -> Diagnostic | None:
    if grows(context, cause):
        return _container(context, cause)
    return _chain(context, life, cause)


# ---- a container that gains an item every iteration ------------------------------------------------

@dataclass
class Place:
    """Where an item entered the container: the statement, and the value expression, as typed."""

    line: int
    facts: LineFacts | None
    value: ast.expr | None = None
    add: Add | None = None
    call_arg: ast.expr | None = None  # ``meter.update(loss)``: the argument the item came in as


def _matches(add: Add, names: set[str]) -> bool:
    """The add's container is one of the item's containers (``self.history`` for ``trainer.history``
    inside the method; the head ``features`` for ``features.setdefault(k, []).append(v)``)."""
    keys = set(expr_keys(add.container))
    if keys & names:
        return True
    root = root_name(add.container)
    return not keys and root is not None and any(n.split("[")[0].split(".")[0] == root for n in names)


def _place(context: Context, cause: Cause, step: int) -> Place:
    """The statement that added the item at ``step``: that step's own line when it adds to the
    container, else the source's add into it (a hook runs inside another line); a function that is
    handed the value by the loop (``meter.update(loss)``) is reported at the call."""
    view = context.at(step)
    tid = next((view.variable(k) for k in reversed(item_keys(context, cause.key)) if view.variable(k)), None)
    names = {container_of(bare(n)) or bare(n) for n in view.names(tid)} if tid is not None else set()
    names.add(bare(cause.key))
    facts = context.facts(step)
    own = [a for a in (facts.adds if facts is not None else []) if _matches(a, names)]
    place: Place
    if own:
        place = Place(context.line(step), facts, own[0].value, own[0])
    else:
        found = [(line, f, a) for line, f in sorted(context.source.by_line.items()) if f.line == line
                 for a in f.adds if _matches(a, names)]
        if found:
            line, f, a = found[0]
            place = Place(line, f, a.value, a)
        elif facts is not None and facts.node is not None and _created_on(context, tid, step):
            place = Place(context.line(step), facts, _value_of(facts.node))
        else:
            place = Place(context.line(step), facts)
    caller = _caller(context, cause, step, tid, place)
    return caller or place


def _value_of(stmt: ast.stmt) -> ast.expr | None:
    if isinstance(stmt, ast.Assign | ast.AugAssign | ast.Expr):
        return stmt.value
    return None


def _reference(expr: ast.expr) -> bool:
    """``o``, ``self.out``, ``outs[0]``, ``[o]``: a value computed elsewhere, only named here."""
    if isinstance(expr, ast.List | ast.Tuple):
        return all(_reference(e) for e in expr.elts)
    if isinstance(expr, ast.Starred):
        return _reference(expr.value)
    return isinstance(expr, ast.Name | ast.Attribute | ast.Subscript)


def _created_on(context: Context, tid: str | None, step: int) -> bool:
    made = context.first_seen(tid) if tid is not None else None
    return made is not None and context.line(made) == context.line(step)


def _caller(context: Context, cause: Cause, step: int, tid: str | None, place: Place) -> Place | None:
    """The loop's own line that handed the item to the function that stored it."""
    facts = context.facts(step)
    if tid is None or facts is None or facts.func == cause.run.loop.func:
        return None
    for k in range(step + 1, cause.run.stop):
        outer = context.facts(k)
        if outer is None or outer.func != cause.run.loop.func:
            continue
        before = context.before(k)
        for node in ast.walk(outer.node) if outer.node is not None else ():
            if isinstance(node, ast.Call):
                for arg in node.args:
                    if resolve(before, arg, outer.func) == tid:
                        return Place(context.line(k), outer, arg, call_arg=arg)
        return None
    return None


def _container(context: Context, cause: Cause) -> Diagnostic:
    steps = add_steps(context, cause)
    last = steps[-1] if steps else cause.run.last
    view = context.at(last)
    place = _place(context, cause, last)
    holders = [t for t in cause.holders if view.tensor(t) is not None]
    scalar = all(view.tensor(t).shape == [] for t in holders)  # type: ignore[union-attr]
    life = lifetimes(context)
    used = any(life.ran.get(n) for n in cause.nodes)  # some backward() ran through them
    lines = context.source.lines
    name = bare(cause.key)
    value_text = shorten(segment(lines, place.value)) if place.value is not None else name
    stmt = place.facts.node if place.facts is not None else None
    patch: list[Patch] = []
    new = call = ""
    # Wrapping the statement in no_grad helps only when it computes the value: a name handed in (a
    # hook's output ``o``, made by the forward pass that called the hook) keeps its graph in any block.
    made_here = place.value is not None and place.call_arg is None and not used and stmt is not None \
        and not _reference(place.value) and any(_created_on(context, t, last) for t in holders[-1:])
    if made_here and stmt is not None:
        patch = [wrap(lines, stmt, "with torch.no_grad():")]
    elif place.value is not None and stmt is not None:
        call = "item()" if scalar and _number_fits(context, place) else "detach()"
        if isinstance(place.value, ast.List | ast.Tuple) and len(place.value.elts) == 1:
            target = place.value.elts[0]
        else:
            target = place.value
        patch = [replace(lines, stmt, target, method(lines, target, call))]
        new = shown(patch[0].text)
    growth = growth_per_iteration(context, steps)
    fields = {"line": place.line, "code": context.line_text(place.line), "name": name, "value": value_text,
              "loop": cause.run.loop.start, "iterations": len(steps),
              "graphs": sum(1 for k in view.keys(cause.key)
                            if (f := view.tensor(view.variable(k))) and f.grad_fn),
              "nodes": len(cause.nodes), "new": new}
    message = _(
        "Line {line} (`{code}`) stores `{value}` in `{name}` on every pass of the loop at line {loop}, and "
        "`{value}` still has its autograd graph: the graph, and every tensor it saved for backward, stays "
        "alive as long as `{name}` holds it. After {iterations} iterations `{name}` holds {graphs} graphs "
        "({nodes} graph nodes), and nothing frees them while the loop runs."
    ).format(**fields)
    message = sentences(message, _chart(context, growth, len(cause.nodes)),
                        _("(The run stopped at the step limit before the end.)") if context.truncated else "")
    if made_here:
        fix = _(
            "No backward() ever goes through these values: compute them without a graph, under "
            "`with torch.no_grad():` (line {line}). Same values, nothing recorded, nothing saved for "
            "backward."
        ).format(**fields)
    elif call == "item()" and new:
        fix = _(
            "Keep the number, not the tensor: `{new}`. `.item()` gives a plain Python float with no "
            "graph, so each iteration's graph is freed as soon as the next one is built."
        ).format(**fields)
    elif new:
        fix = _(
            "Keep the values without the graph: `{new}`. A detached tensor has the same values and no "
            "grad_fn, so each iteration's graph is freed as soon as the next one is built."
        ).format(**fields)
    else:
        fix = _("Store `{value}.detach()` (or `.item()` for a single number) instead of the tensor itself, "
                "so that each iteration's graph can be freed.").format(**fields)
    title = _titled(_("`{name}` keeps a graph from every iteration").format(**fields), growth)
    return Diagnostic(
        rule=CONTAINER_RULE, severity="warning", title=title, message=message, fix=fix,
        step=growth[2] if growth is not None else last, line=place.line,
        tensors=_alive(context, growth[2] if growth is not None else last, holders),
        lines=sorted({context.line(last)} - {place.line}),
        bytes=max(round(growth[0]), 0) if growth is not None else None, patch=patch,
    )


def _numbers(context: Context) -> Routes | None:
    """Where values go in the source (``app.diagnostics.numbers``), made once per analysis."""
    if "numbers" not in context.memo:
        tree = context.source.tree
        context.memo["numbers"] = Routes.of(tree) if tree is not None else None
    return context.memo["numbers"]


def _number_fits(context: Context, place: Place) -> bool:
    """``.item()`` can be the cut: what takes the value (the function it is handed to, the container
    it is added to) would work as well with a Python number."""
    routes = _numbers(context)
    if routes is None or place.facts is None:
        return False
    if place.call_arg is not None:
        return number_fits(routes, place.facts.func, place.call_arg, place.facts.node)
    if place.add is not None:
        return takes_number(routes, routes.scope(place.facts.func), boxes=[place.add.container])
    return True  # a plain name: the chain rule asks about the name itself


def _alive(context: Context, step: int, tids: list[str]) -> list[str]:
    view = context.at(step)
    return [t for t in tids if view.tensor(t) is not None]


# ---- a name built from its own previous value --------------------------------------------------------

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
            for arg in node.args:
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
    routes = _numbers(context)
    if routes is None or facts is None:
        return False
    stmt = facts.node
    targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target] if isinstance(
        stmt, ast.AugAssign) else []
    if len(targets) != 1 or not takes_number(routes, routes.scope(facts.func), targets=targets):
        return False
    parent = routes.parents.get(expr)
    if isinstance(parent, ast.Call) and expr in parent.args and not number_call(parent):
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
    routes = _numbers(context)
    function = routes.functions.get(facts.func, []) if routes is not None else []
    if len(function) != 1:
        return None
    arguments = function[0].args
    params = {a.arg for a in arguments.posonlyargs + arguments.args + arguments.kwonlyargs}
    after = context.at(step)
    for expr, _call in ingredients:
        if isinstance(expr, ast.Name) and expr.id in params:
            tid = resolve(after, expr, facts.func)
            place = _caller(context, cause, step, tid, Place(context.line(step), facts))
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


def _chain(context: Context, life: Lifetimes, cause: Cause) -> Diagnostic | None:
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
        title = _titled(_("`{name}` adds up every iteration's graph").format(**fields), growth)
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
        title = _titled(_("`{name}` adds up every iteration's graph").format(**fields), growth)
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
        title = _titled(_("`{name}` carries its graph into the next iteration").format(**fields), growth)
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
    message = sentences(message, _chart(context, growth, len(cause.nodes)),
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


__all__ = ["CHAIN_RULE", "CONTAINER_RULE", "held_across_iterations"]

"""``graph-kept-by-container``: a list, dict, deque or attribute that gains an item every iteration
(``losses.append(loss)``, a hook that stores its output, a meter object), the item still holding its
graph."""

from __future__ import annotations

import ast
import re

from app.diagnostics.context import Context
from app.diagnostics.holders import Cause, add_steps, bare, growth_per_iteration, item_keys
from app.diagnostics.index import At, container_of, part_of
from app.diagnostics.lifetimes import lifetimes
from app.diagnostics.patch import method, replace_many, segment, shown, wrap
from app.diagnostics.rules.held.places import Place, caller, number_fits_place
from app.diagnostics.rules.held.words import chart, titled
from app.diagnostics.source import Add, expr_keys, root_name, shorten
from app.diagnostics.trace import sentences
from app.i18n import gettext as _
from app.schema import Diagnostic, Patch

CONTAINER_RULE = "graph-kept-by-container"
ACCESSOR = re.compile(r"\[[^\]]*\]|\{[^}]*\}|\.\w+")  # ``[3]``, ``['loss']``, ``{2}``, ``.loss`` of a key


def _matches(add: Add, names: set[str]) -> bool:
    """The add's container is one of the item's containers (``self.history`` for ``trainer.history``
    inside the method; the head ``features`` for ``features.setdefault(k, []).append(v)``)."""
    keys = set(expr_keys(add.container))
    if keys & names:
        return True
    root = root_name(add.container)
    return not keys and root is not None and any(n.split("[")[0].split(".")[0] == root for n in names)


def _place(context: Context, cause: Cause, step: int) -> tuple[Place, list[tuple[ast.expr, str]]]:
    """The statement that added the item at ``step``: that step's own line when it adds to the
    container, else the source's add into it (a hook runs inside another line); a function that is
    handed the value by the loop (``meter.update(loss)``) is reported at the call. The value is the
    part of the added one that holds the graph (``loss`` of ``(loss, i)``); when more than one part
    does (``(loss, pred)``), the whole value, with those parts and their tensors."""
    view = context.at(step)
    key = _graph_key(view, item_keys(context, cause.key))
    tid = view.variable(key) if key is not None else None
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
    handed = caller(context, cause, step, tid, place)
    if handed is not None:
        return handed, []
    parts: list[tuple[ast.expr, str]] = []  # the parts of the added value that hold a graph
    if place.value is not None and key is not None:
        item = part_of(key)
        siblings = [key] if item is None or item == cause.key else \
            [k for k in view.keys(item) if _has_graph(view, view.variable(k))] or [key]
        for k in siblings:
            t = view.variable(k)
            part = _held_part(place.value, {bare(n) for n in view.names(t)}, _path(k, cause.key)) \
                if t is not None else place.value
            if t is not None and all(part is not p for p, _t in parts):
                parts.append((part, t))
        if len(parts) == 1:
            place.value = parts[0][0]  # the one part to cut
        if len(parts) == 1 or any(p is place.value for p, _t in parts):
            parts = []  # (one part, or one not found: the value is cut as a whole)
    return place, parts


def _has_graph(view: At, tid: str | None) -> bool:
    fact = view.tensor(tid) if tid is not None else None
    return fact is not None and fact.grad_fn is not None


def _graph_key(view: At, keys: list[str]) -> str | None:
    """The latest item key bound at the step whose tensor has a graph (``loss`` of ``(loss,
    pred.detach())``), else the latest bound."""
    bound = None
    for key in reversed(keys):
        tid = view.variable(key)
        if tid is None:
            continue
        if _has_graph(view, tid):
            return key
        bound = bound or key
    return bound


def _parts(value: ast.expr) -> dict[str, ast.expr]:
    """The parts of a value built where it is added, by how the engine names them in the container's
    item: ``[0]`` of ``(out, i)``, ``['loss']`` of ``{'loss': out}``, ``.loss`` of
    ``Rec(loss=out)``; a call's positional arguments by position (``Rec(out, i)``: only matched by
    name, a field's name is not known here)."""
    if isinstance(value, ast.Tuple | ast.List | ast.Set):
        return {f"[{i}]": e for i, e in enumerate(value.elts) if not isinstance(e, ast.Starred)}
    if isinstance(value, ast.Dict):
        return {f"[{k.value!r}]": v for k, v in zip(value.keys, value.values, strict=True)
                if isinstance(k, ast.Constant)}
    if isinstance(value, ast.Call) and isinstance(value.func, ast.Name):  # a namedtuple, ``dict(...)``
        parts = {f"({i})": a for i, a in enumerate(value.args) if not isinstance(a, ast.Starred)}
        parts.update({f".{k.arg}": k.value for k in value.keywords if k.arg is not None})
        parts.update({f"[{k.arg!r}]": k.value for k in value.keywords if k.arg is not None})
        return parts
    return {}


def _held_part(value: ast.expr, names: set[str], path: list[str]) -> ast.expr:
    """The part of an added value that holds the graph (``out`` of ``kept.append((out, i))``): the
    part that names the kept tensor, or the one at the place its name in the container says (``path``:
    ``[1]``, ``[0]`` for ``kept[3][1][0]``; ``['loss']``, ``.loss``); the whole value when none does."""
    parts = _parts(value)
    if not parts:
        return value
    named = [p for p in parts.values() if names.intersection(expr_keys(p))]
    if len(named) == 1:
        return named[0]
    if path and path[0] in parts:
        return _held_part(parts[path[0]], names, path[1:])
    deeper = [found for p in parts.values() if (found := _held_part(p, names, [])) is not p]
    return deeper[0] if len(deeper) == 1 else value


def _path(key: str, container: str) -> list[str]:
    """The accessors of ``key`` inside the item it is part of: ``[1]``, ``[0]`` for ``kept[3][1][0]``
    in ``kept``."""
    steps = ACCESSOR.findall(key[len(container):]) if key.startswith(container) else []
    return steps[1:]


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


def kept_by_container(context: Context, cause: Cause) -> Diagnostic:
    """The finding for a container that gains an item, with its graph, every iteration."""
    steps = add_steps(context, cause)
    last = steps[-1] if steps else cause.run.last
    view = context.at(last)
    place, parts = _place(context, cause, last)
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
        fits = number_fits_place(context, place)
        call = "item()" if scalar and fits else "detach()"
        if isinstance(place.value, ast.List | ast.Tuple) and len(place.value.elts) == 1:
            target = place.value.elts[0]
        else:
            target = place.value
        edits = [(part, method(lines, part, "item()" if fits and _scalar(view, t) else "detach()"))
                 for part, t in parts] or [(target, method(lines, target, call))]
        patch = [replace_many(lines, stmt, edits)]
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
    message = sentences(message, chart(context, growth, len(cause.nodes)),
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
    title = titled(_("`{name}` keeps a graph from every iteration").format(**fields), growth)
    return Diagnostic(
        rule=CONTAINER_RULE, severity="warning", title=title, message=message, fix=fix,
        step=growth[2] if growth is not None else last, line=place.line,
        tensors=_alive(context, growth[2] if growth is not None else last, holders),
        lines=sorted({context.line(last)} - {place.line}),
        bytes=max(round(growth[0]), 0) if growth is not None else None, patch=patch,
    )


def _scalar(view: At, tid: str) -> bool:
    fact = view.tensor(tid)
    return fact is not None and fact.shape == []


def _alive(context: Context, step: int, tids: list[str]) -> list[str]:
    view = context.at(step)
    return [t for t in tids if view.tensor(t) is not None]



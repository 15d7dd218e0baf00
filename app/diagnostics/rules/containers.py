"""Graphs kept alive across loop iterations: a container of tensors with a ``grad_fn``
(``losses.append(loss)``) or a variable rebuilt from itself (``total += loss``). Each iteration's graph
then outlives the iteration.

Not a pitfall when the graphs are *used*: collecting outputs and calling ``backward()`` through them
once after the loop is how an unrolled sequence is trained. So a rule stays quiet when a
``backward()`` after the loop reaches the collected graphs.
"""

from __future__ import annotations

import ast
from bisect import bisect_right
from collections.abc import Iterator

from app.diagnostics.context import Context
from app.diagnostics.index import container_of
from app.diagnostics.source import Add, expr_keys, resolve, text
from app.diagnostics.trace import exclusive, fmt_bytes, reach
from app.i18n import gettext as _
from app.schema import Diagnostic

CONTAINER_RULE = "graph-kept-by-container"
CHAIN_RULE = "graph-chained-across-iterations"


def _bare(name: str) -> str:
    return name.split(":", 1)[1] if ":" in name else name


def _saved_count(nodes: dict) -> int:
    return sum(1 for node in nodes.values() for tid in node.saved.values() if tid is not None)


class Backwards:
    """The backward() calls of a run, for "did a backward() after the loop go through these graphs".

    For each loop the rules ask about, one sweep over the backward() steps outside it keeps, per
    name a root mentions and per node a root's graph reaches, the latest step that did: a finding
    then looks up its own names and nodes (instead of walking every later step per finding). The
    sweep goes from the last backward() back, and skips what a later one already reached (its latest
    step is known): each node is visited once per sweep, however many backward() calls reach it —
    a graph chained across a thousand backward() calls costs its size, not a thousand times it."""

    def __init__(self, context: Context) -> None:
        self.context = context
        self.steps = [i for i in range(len(context)) if (f := context.facts(i)) is not None and f.backwards]
        self._latest: dict[tuple[int, int] | None, tuple[dict[str, int], dict[str, int]]] = {}

    @classmethod
    def of(cls, context: Context) -> Backwards:
        found = context.memo.get("backwards")
        if found is None:
            found = context.memo["backwards"] = cls(context)
        return found

    def _sweep(self, loop: tuple[int, int] | None) -> tuple[dict[str, int], dict[str, int]]:
        if loop not in self._latest:
            context = self.context
            by_name: dict[str, int] = {}
            by_node: dict[str, int] = {}
            reached: set[str] = set()
            for index in reversed(self.steps):
                if loop is not None and loop[0] <= context.line(index) <= loop[1]:
                    continue
                facts = context.facts(index)
                before = context.before(index)
                for backward in facts.backwards:  # type: ignore[union-attr]
                    for root in backward.roots:
                        for name in _names_in(root):
                            by_name.setdefault(name, index)
                        tid = resolve(before, root, facts.func)  # type: ignore[union-attr]
                        if tid is not None:
                            for nid in reach(before, [tid], skip=reached).nodes:
                                by_node.setdefault(nid, index)
            self._latest[loop] = by_name, by_node
        return self._latest[loop]

    def consumed(self, last: int, loop: tuple[int, int] | None, names: set[str], nodes: set[str]) -> bool:
        """A backward() after the loop goes through these graphs: they were kept on purpose."""
        if bisect_right(self.steps, last) == len(self.steps):
            return False
        by_name, by_node = self._sweep(loop)
        return any(by_name.get(n, -1) > last for n in names) or any(by_node.get(n, -1) > last for n in nodes)


def _names_in(expr: ast.expr) -> Iterator[str]:
    for node in ast.walk(expr):
        if isinstance(node, ast.Name):
            yield node.id


def _additions(context: Context) -> dict[tuple[str, int], dict[str, int]]:
    """(container, line that added) → {item tensor with a grad_fn: step it first appeared in that
    container}. Only what a step's delta names can be new: a key bound there, or a named tensor
    that got its grad_fn there. Within a step, in the order the step lists its variables."""
    index = context.index
    added: dict[tuple[str, int], dict[str, int]] = {}
    seen: set[tuple[str, str]] = set()
    for k, delta in enumerate(context.trace.steps):
        view, before = context.at(k), context.before(k)
        found: list[tuple[float, str, str]] = []
        for key, tid in delta.variables.items():
            container = container_of(key)
            if container is None or (container, tid) in seen:
                continue
            fact = view.tensor(tid)
            if fact is not None and fact.grad_fn is not None:
                found.append((index.places.at(key, k), container, tid))
        for tid, fact in delta.tensors.items():
            if fact.grad_fn is None or ((old := before.tensor(tid)) is not None and old.grad_fn is not None):
                continue
            for name, place in index.names.members(tid, k):
                container = container_of(name)
                if container is not None and (container, tid) not in seen:
                    found.append((place, container, tid))
        for _place, container, tid in sorted(found):
            if (container, tid) not in seen:
                seen.add((container, tid))
                added.setdefault((container, context.line(k)), {})[tid] = k
    return added


def container_graphs(context: Context) -> Iterator[Diagnostic]:
    for (container, line), items in _additions(context).items():
        add_steps = sorted(set(items.values()))
        if len(add_steps) < 2:
            continue
        last = add_steps[-1]
        view = context.at(last)
        keys = view.keys(container)
        held = [tid for key in keys if (tid := view.variable(key)) is not None
                and (fact := view.tensor(tid)) is not None and fact.grad_fn is not None]
        if len(held) < 2:
            continue
        facts = context.source.at(line)
        loop = facts.loop if facts is not None else None
        retained, _storages, nodes = exclusive(view, keys)
        grad_fns = {fn for tid in held if (fn := view.tensor(tid).grad_fn) is not None}  # type: ignore[union-attr]
        if Backwards.of(context).consumed(last, loop, {_bare(container).split("[")[0]}, grad_fns):
            continue
        first = context.at(add_steps[0])
        first_retained = exclusive(first, first.keys(container))[0]
        growth = (retained - first_retained) / (len(add_steps) - 1)
        only_here = len(grad_fns & nodes)
        saved = _saved_count({n: view.node(n) for n in nodes})
        yield _container_diagnostic(
            context, container, line, last, held, retained, growth, only_here, saved,
            len(nodes), len(add_steps), _add_expr(facts.adds if facts else [], container),
        )


def _add_expr(adds: list[Add], container: str) -> Add | None:
    for add in adds:
        if _bare(container) in expr_keys(add.container):
            return add
    return adds[0] if adds else None


def _container_diagnostic(
    context: Context, container: str, line: int, last: int, held: list[str], retained: int, growth: float,
    only_here: int, saved: int, nodes: int, iterations: int, add: Add | None,
) -> Diagnostic:
    view = context.at(last)
    name = _bare(container)
    value = text(add.value) if add is not None else _("the value")
    scalar = all(view.tensor(tid).shape == [] for tid in held)  # type: ignore[union-attr]
    how = f"`{context.line_text(line)}`" if context.line_text(line) else _("line {line}").format(line=line)
    graphs = len(held)
    fields = {"line": line, "how": how, "value": value, "name": name, "iterations": iterations,
              "graphs": graphs, "only_here": only_here, "nodes": nodes, "saved": saved,
              "retained": fmt_bytes(retained), "growth": fmt_bytes(round(growth))}
    earlier = (
        _("The {only_here} from earlier iterations are kept alive by `{name}` alone")
        if only_here < graphs else _("All {graphs} are kept alive by `{name}` alone")
    ).format(**fields)
    head = _(
        "Line {line} ({how}) runs once per loop iteration and stores the tensor `{value}` in `{name}`. "
        "`{value}` still has a grad_fn, and a tensor with a grad_fn keeps its whole autograd graph "
        "alive: every operation that produced it and every tensor those operations saved for backward. "
        "So when the next iteration computes a new `{value}`, the old graph is not freed — `{name}` "
        "still holds it. After {iterations} iterations `{name}` holds {graphs} graphs. "
    ).format(**fields)
    if saved:
        message = head + _(
            "{earlier}: {nodes} graph nodes and {saved} saved tensors, {retained}. Each "
            "iteration adds about {growth} more that is never freed while `{name}` "
            "exists: over thousands of iterations, with real model sizes, this is how a training loop "
            "runs out of memory. The memory chart shows it as the \"held only by the graph\" band "
            "growing step by step."
        ).format(earlier=earlier, **fields)
    else:
        message = head + _(
            "{earlier}: {nodes} graph nodes and {retained}. backward() already freed what "
            "those graphs saved, so here each iteration only adds about {growth} plus "
            "the nodes — but it never stops growing, and each graph keeps everything it saved as soon "
            "as backward() is not called (an evaluation loop, a logging step)."
        ).format(earlier=earlier, **fields)
    if add is not None and add.op in ("append", "add"):
        call = ast.unparse(ast.Call(ast.Attribute(add.container, add.op, ast.Load()), [], []))[:-2]
        fix_item, fix_detach = f"`{call}({value}.item())`", f"`{call}({value}.detach())`"
    else:
        fix_item, fix_detach = f"`{value}.item()`", f"`{value}.detach()`"
    if context.truncated:
        message += _(" (The run stopped at the step limit; if a backward() after the loop goes through "
                     "these tensors, keeping them is intended.)")
    fix = (_(
        "Store the number, not the tensor: {fix_item}. `.item()` returns a plain Python float, so each "
        "iteration's graph is freed as soon as `{value}` is computed anew. (If you need tensors, "
        "{fix_detach} keeps the values without the graph.)") if scalar else _(
        "Store a tensor cut from the graph: {fix_detach} — same values, no graph, so each iteration's "
        "graph is freed as soon as `{value}` is computed anew. If you never backpropagate through "
        "these values (evaluation, logging), compute them under `with torch.no_grad():` instead.")
    ).format(fix_item=fix_item, fix_detach=fix_detach, value=value)
    return Diagnostic(
        rule=CONTAINER_RULE, severity="warning" if saved else "info",
        title=_("`{name}` keeps {graphs} autograd graphs alive: memory grows every iteration").format(
            name=name, graphs=graphs),
        message=message, fix=fix, step=last, line=line, tensors=sorted(held, key=_id_order),
        lines=[], bytes=retained,
    )


def _id_order(tid: str) -> tuple[int, str]:
    digits = tid[1:]
    return (int(digits), tid) if digits.isdigit() else (0, tid)


def _chained(context: Context, earlier: tuple[int, str, str], later: tuple[int, str, str]) -> bool:
    """The later value's graph leads back to the earlier value's grad_fn: one graph, grown.

    Only nodes made since the earlier grad_fn can lead to it, so the search skips older ones: it
    costs about one iteration's graph, however long the chain already is."""
    fn = earlier[2]
    step, tid, later_fn = later
    if later_fn == fn:
        return False
    floor = context.first_seen(fn)
    return fn in reach(context.at(step), [tid], floor=floor or 0, until=fn).nodes


def chained_graphs(context: Context) -> Iterator[Diagnostic]:
    """``total = total + loss`` in a loop: one graph that grows by an iteration's worth each time."""
    # (name, line) → [(step, tensor, its grad_fn)]
    history: dict[tuple[str, int], list[tuple[int, str, str]]] = {}
    for index in range(len(context)):
        facts = context.facts(index)
        if facts is None or facts.loop is None:
            continue
        rebuilt = {name for name in facts.assigned if name in facts.names}
        rebuilt |= {w.receiver.id for w in facts.writes if w.op != "[]=" and hasattr(w.receiver, "id")}
        view = context.at(index)
        for name in rebuilt:
            key = f"{facts.func}:{name}" if facts.func else name
            tid = view.variable(key)
            fact = view.tensor(tid)
            if fact is None or fact.grad_fn is None:
                continue
            history.setdefault((key, context.line(index)), []).append((index, tid, fact.grad_fn))  # type: ignore[arg-type]
    for (key, line), points in history.items():
        pairs = zip(points, points[1:], strict=False)
        if len(points) < 3 or not all(_chained(context, a, b) for a, b in pairs):
            continue
        last, tid = points[-1][:2]
        view = context.at(last)
        facts = context.source.at(line)
        loop = facts.loop if facts is not None else None
        nodes = set(reach(view, [tid]).nodes)
        if Backwards.of(context).consumed(last, loop, {_bare(key)}, nodes):
            continue
        retained = exclusive(view, {key})[0]
        first = exclusive(context.at(points[0][0]), {key})[0]
        growth = (retained - first) / (len(points) - 1)
        count = len(nodes)
        name = _bare(key)
        fields = {"line": line, "code": context.line_text(line), "name": name, "iterations": len(points),
                  "nodes": count, "retained": fmt_bytes(retained), "growth": fmt_bytes(round(growth))}
        yield Diagnostic(
            rule=CHAIN_RULE, severity="warning",
            title=_("`{name}` chains every iteration's graph into one").format(**fields),
            message=_(
                "Line {line} (`{code}`) builds `{name}` from its previous value on "
                "every loop iteration. `{name}` still has a grad_fn, so its graph links all "
                "{iterations} iterations together: {nodes} graph nodes, {retained} kept "
                "alive only through `{name}`, about {growth} more per iteration. "
                "Nothing is freed until `{name}` is."
            ).format(**fields),
            fix=_(
                "If `{name}` is a running total for logging, add numbers: `{name} += loss.item()` "
                "(or `.detach()` the tensor you add). If you do mean to backpropagate through the sum, "
                "call `{name}.backward()` once after the loop — or call `backward()` inside the loop and "
                "keep only `.item()` values."
            ).format(**fields),
            step=last, line=line, tensors=[tid], bytes=retained,
        )

"""Graphs kept alive across loop iterations: a container of tensors with a ``grad_fn``
(``losses.append(loss)``) or a variable rebuilt from itself (``total += loss``). Each iteration's graph
then outlives the iteration.

Not a pitfall when the graphs are *used*: collecting outputs and calling ``backward()`` through them
once after the loop is how an unrolled sequence is trained. So a rule stays quiet when a
``backward()`` after the loop reaches the collected graphs.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

from app.diagnostics.context import Context
from app.diagnostics.source import Add, expr_keys, resolve, text
from app.diagnostics.trace import fmt_bytes, reach
from app.schema import Diagnostic, Step

CONTAINER_RULE = "graph-kept-by-container"
CHAIN_RULE = "graph-chained-across-iterations"


def _container_of(key: str) -> str | None:
    """``losses`` for ``losses[3]``, ``hist['loss']`` for ``hist['loss'][0]``; None for a plain name."""
    if not key.endswith("]") or "[" not in key:
        return None
    return key[: key.rindex("[")]


def _bare(name: str) -> str:
    return name.split(":", 1)[1] if ":" in name else name


def _items(step: Step, container: str) -> list[str]:
    """Tensors with a grad_fn the container holds in this step."""
    return [
        tid for key, tid in step.variables.items()
        if _container_of(key) == container and step.tensors[tid].grad_fn is not None
    ]


def _exclusive(step: Step, excluded: set[str]) -> tuple[int, set[str], set[str]]:
    """Bytes, storages and nodes alive only because of the variables in ``excluded``."""
    everything = reach(step, step.variables.values())
    others = reach(step, (tid for key, tid in step.variables.items() if key not in excluded))
    storages = everything.storages - others.storages
    nodes = everything.nodes - others.nodes
    return sum(step.storages[s].nbytes for s in storages), storages, nodes


def _saved_count(step: Step, nodes: set[str]) -> int:
    return sum(1 for n in nodes for tid in step.nodes[n].saved.values() if tid is not None)


def _consumed(
    context: Context, last: int, loop: tuple[int, int] | None, names: set[str], nodes: set[str]
) -> bool:
    """A backward() after the loop goes through these graphs: they were kept on purpose."""
    for index in range(last + 1, len(context.steps)):
        facts = context.facts(index)
        if facts is None or not facts.backwards:
            continue
        if loop is not None and loop[0] <= context.steps[index].line <= loop[1]:
            continue
        before = context.before(index)
        for backward in facts.backwards:
            for root in backward.roots:
                if any(name in names for name in _names_in(root)):
                    return True
                tid = resolve(before, root, facts.func)
                if tid is not None and reach(before, [tid]).nodes & nodes:
                    return True
    return False


def _names_in(expr: ast.expr) -> Iterator[str]:
    for node in ast.walk(expr):
        if isinstance(node, ast.Name):
            yield node.id


def container_graphs(context: Context) -> Iterator[Diagnostic]:
    steps = context.steps
    # (container, line that added) → {item tensor: step it first appeared in that container}
    added: dict[tuple[str, int], dict[str, int]] = {}
    seen: set[tuple[str, str]] = set()
    for index, step in enumerate(steps):
        for key, tid in step.variables.items():
            container = _container_of(key)
            if container is None or step.tensors[tid].grad_fn is None or (container, tid) in seen:
                continue
            seen.add((container, tid))
            added.setdefault((container, step.line), {})[tid] = index
    for (container, line), items in added.items():
        add_steps = sorted(set(items.values()))
        if len(add_steps) < 2:
            continue
        last = add_steps[-1]
        step = steps[last]
        held = _items(step, container)
        if len(held) < 2:
            continue
        facts = context.source.at(line)
        loop = facts.loop if facts is not None else None
        keys = {key for key in step.variables if _container_of(key) == container}
        retained, _, nodes = _exclusive(step, keys)
        grad_fns = {fn for tid in held if (fn := step.tensors[tid].grad_fn) is not None}
        if _consumed(context, last, loop, {_bare(container).split("[")[0]}, grad_fns):
            continue
        first = steps[add_steps[0]]
        first_retained = _exclusive(first, {k for k in first.variables if _container_of(k) == container})[0]
        growth = (retained - first_retained) / (len(add_steps) - 1)
        only_here = len(grad_fns & nodes)
        yield _container_diagnostic(
            context, container, line, last, held, retained, growth, only_here, _saved_count(step, nodes),
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
    step = context.steps[last]
    name = _bare(container)
    value = text(add.value) if add is not None else "the value"
    scalar = all(step.tensors[tid].shape == [] for tid in held)
    how = f"`{context.line_text(line)}`" if context.line_text(line) else f"line {line}"
    graphs = len(held)
    earlier = (
        f"The {only_here} from earlier iterations are kept alive by `{name}` alone"
        if only_here < graphs else f"All {graphs} are kept alive by `{name}` alone"
    )
    head = (
        f"Line {line} ({how}) runs once per loop iteration and stores the tensor `{value}` in `{name}`. "
        f"`{value}` still has a grad_fn, and a tensor with a grad_fn keeps its whole autograd graph "
        f"alive: every operation that produced it and every tensor those operations saved for backward. "
        f"So when the next iteration computes a new `{value}`, the old graph is not freed — `{name}` "
        f"still holds it. After {iterations} iterations `{name}` holds {graphs} graphs. "
    )
    if saved:
        message = head + (
            f"{earlier}: {nodes} graph nodes and {saved} saved tensors, {fmt_bytes(retained)}. Each "
            f"iteration adds about {fmt_bytes(round(growth))} more that is never freed while `{name}` "
            f"exists: over thousands of iterations, with real model sizes, this is how a training loop "
            f"runs out of memory. The memory chart shows it as the \"held only by the graph\" band "
            f"growing step by step."
        )
    else:
        message = head + (
            f"{earlier}: {nodes} graph nodes and {fmt_bytes(retained)}. backward() already freed what "
            f"those graphs saved, so here each iteration only adds about {fmt_bytes(round(growth))} plus "
            f"the nodes — but it never stops growing, and each graph keeps everything it saved as soon "
            f"as backward() is not called (an evaluation loop, a logging step)."
        )
    if add is not None and add.op in ("append", "add"):
        call = ast.unparse(ast.Call(ast.Attribute(add.container, add.op, ast.Load()), [], []))[:-2]
        fix_item, fix_detach = f"`{call}({value}.item())`", f"`{call}({value}.detach())`"
    else:
        fix_item, fix_detach = f"`{value}.item()`", f"`{value}.detach()`"
    if context.result.truncated:
        message += (" (The run stopped at the step limit; if a backward() after the loop goes through "
                    "these tensors, keeping them is intended.)")
    fix = (
        f"Store the number, not the tensor: {fix_item}. `.item()` returns a plain Python float, so each "
        f"iteration's graph is freed as soon as `{value}` is computed anew. (If you need tensors, "
        f"{fix_detach} keeps the values without the graph.)" if scalar else
        f"Store a tensor cut from the graph: {fix_detach} — same values, no graph, so each iteration's "
        f"graph is freed as soon as `{value}` is computed anew. If you never backpropagate through "
        f"these values (evaluation, logging), compute them under `with torch.no_grad():` instead."
    )
    return Diagnostic(
        rule=CONTAINER_RULE, severity="warning" if saved else "info",
        title=f"`{name}` keeps {graphs} autograd graphs alive: memory grows every iteration",
        message=message, fix=fix, step=last, line=line, tensors=sorted(held, key=_id_order),
        lines=[], bytes=retained,
    )


def _id_order(tid: str) -> tuple[int, str]:
    digits = tid[1:]
    return (int(digits), tid) if digits.isdigit() else (0, tid)


def chained_graphs(context: Context) -> Iterator[Diagnostic]:
    """``total = total + loss`` in a loop: one graph that grows by an iteration's worth each time."""
    steps = context.steps
    history: dict[tuple[str, int], list[tuple[int, int]]] = {}  # (name, line) → [(step, node count)]
    for index, step in enumerate(steps):
        facts = context.source.at(step.line)
        if facts is None or facts.loop is None:
            continue
        rebuilt = {name for name in facts.assigned if name in facts.names}
        rebuilt |= {w.receiver.id for w in facts.writes if w.op != "[]=" and hasattr(w.receiver, "id")}
        for name in rebuilt:
            key = f"{facts.func}:{name}" if facts.func else name
            tid = step.variables.get(key)
            if tid is None or step.tensors[tid].grad_fn is None:
                continue
            count = len(reach(step, [tid]).nodes)
            history.setdefault((key, step.line), []).append((index, count))
    for (key, line), points in history.items():
        counts = [count for _, count in points]
        if len(points) < 3 or any(b <= a for a, b in zip(counts, counts[1:], strict=False)):
            continue
        last = points[-1][0]
        step = steps[last]
        tid = step.variables[key]
        facts = context.source.at(line)
        loop = facts.loop if facts is not None else None
        nodes = reach(step, [tid]).nodes
        if _consumed(context, last, loop, {_bare(key)}, nodes):
            continue
        retained, _, only = _exclusive(step, {key})
        first = _exclusive(steps[points[0][0]], {key})[0]
        growth = (retained - first) / (len(points) - 1)
        name = _bare(key)
        yield Diagnostic(
            rule=CHAIN_RULE, severity="warning",
            title=f"`{name}` chains every iteration's graph into one",
            message=(
                f"Line {line} (`{context.line_text(line)}`) builds `{name}` from its previous value on "
                f"every loop iteration. `{name}` still has a grad_fn, so its graph links all "
                f"{len(points)} iterations together: {counts[-1]} graph nodes, {fmt_bytes(retained)} kept "
                f"alive only through `{name}`, about {fmt_bytes(round(growth))} more per iteration. "
                f"Nothing is freed until `{name}` is."
            ),
            fix=(
                f"If `{name}` is a running total for logging, add numbers: `{name} += loss.item()` "
                f"(or `.detach()` the tensor you add). If you do mean to backpropagate through the sum, "
                f"call `{name}.backward()` once after the loop — or call `backward()` inside the loop and "
                f"keep only `.item()` values."
            ),
            step=last, line=line, tensors=[tid], bytes=retained,
        )

"""State carried from one loop iteration to the next whose graph still reaches given nodes.

``h = f(h)`` (a plain name) or ``out, h = rnn(x, h)`` where ``h`` is an LSTM's ``(h, c)`` tuple: the
new value is computed from the previous iteration's, so its graph reaches back into that
iteration's. Two failures of torch name such a graph — backward() through nodes an earlier pass
freed ("backward through the graph a second time"), and, with ``retain_graph=True``, backward()
through nodes that saved a weight the optimizer has changed since. Their fix is the same cut, at the
top of the loop body, written for what the name holds: ``h = h.detach()`` for a tensor,
``h = tuple(s.detach() for s in h)`` for a tuple (a tuple has no ``detach``), under
``if h is not None:`` when the name is unbound when the loop starts (``h = None`` then ``rnn(x, h)``).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from app.diagnostics.context import Context
from app.diagnostics.index import At
from app.diagnostics.patch import insert_before
from app.diagnostics.source import resolve
from app.diagnostics.trace import reach
from app.schema import Patch


@dataclass(frozen=True)
class Carried:
    name: str
    tensors: tuple[str, ...]  # the tensor, or a tuple's items
    is_tuple: bool

    @property
    def cut(self) -> str:
        """The statement that lets the previous iteration's graph go."""
        if self.is_tuple:
            return f"{self.name} = tuple(s.detach() for s in {self.name})"
        return f"{self.name} = {self.name}.detach()"


def _held(view: At, name: str, func: str | None) -> tuple[tuple[str, ...], bool]:
    """The tensors ``name`` holds at ``view``: itself, else its items (a tuple, a list)."""
    tid = resolve(view, ast.Name(name, ast.Load()), func)
    if tid is not None:
        return (tid,), False
    for key in ((f"{func}:{name}",) if func is not None else ()) + (name,):
        items = [t for k in view.keys(key) if (t := view.variable(k)) is not None]
        if items:
            return tuple(items), True
    return (), False


def carried_state(context: Context, last: At, loop: tuple[int, int], nodes: set[str],
                  func: str | None) -> list[Carried]:
    """Names rebuilt from themselves inside the loop (``h = f(h)``, ``out, h = rnn(x, h)``) whose
    graph, at ``last``, reaches one of ``nodes``."""
    found: list[Carried] = []
    for line in range(loop[0], loop[1] + 1):
        facts = context.source.at(line)
        if facts is None or facts.line != line:
            continue
        for name in sorted(facts.assigned & facts.names):
            if any(c.name == name for c in found):
                continue
            tensors, is_tuple = _held(last, name, func)
            if tensors and reach(last, tensors).nodes.keys() & nodes:
                found.append(Carried(name, tensors, is_tuple))
    # ``self.h = torch.tanh(... self.h ...)`` in a module's forward: carried as ``net.h`` by the loop
    attributes = _self_rebuilt(context)
    for (scope, _head), keys in context.index.headed.items() if attributes else ():
        if scope != func:
            continue
        for key in keys:
            name = key.split(":", 1)[-1]  # a function's local is keyed ``f:net.h``
            if name.count(".") != 1 or name.split(".")[1] not in attributes \
                    or any(c.name == name for c in found):
                continue
            tid = last.variable(key)
            if tid is not None and reach(last, [tid]).nodes.keys() & nodes:
                found.append(Carried(name, (tid,), False))
    return found


def _self_rebuilt(context: Context) -> set[str]:
    """Attributes some statement rebuilds from themselves: ``self.h = f(self.h)`` (any object name)."""
    found = set()
    for line, facts in context.source.by_line.items():
        stmt = facts.node
        if facts.line != line or not isinstance(stmt, ast.Assign) or len(stmt.targets) != 1:
            continue
        target = stmt.targets[0]
        if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) and any(
                isinstance(n, ast.Attribute) and n.attr == target.attr and isinstance(n.value, ast.Name)
                and n.value.id == target.value.id for n in ast.walk(stmt.value)):
            found.add(target.attr)
    return found


def guarded(context: Context, loop_start: int, func: str | None, name: str, cut: str) -> str:
    """``cut`` for a name that holds no tensor when the loop starts: ``if h is not None:`` after
    ``h = None``; ``if isinstance(total, torch.Tensor):`` after ``total = 0`` (an int has no
    ``detach``, and ``0 is not None``)."""
    made = [f for line, f in context.source.by_line.items()
            if line < loop_start and f.line == line and f.func == func and name in f.assigned]
    last = max(made, key=lambda f: f.line).node if made else None
    none = isinstance(last, ast.Assign) and isinstance(last.value, ast.Constant) and last.value.value is None
    test = f"{name} is not None" if none else f"isinstance({name}, torch.Tensor)"
    return f"if {test}:\n    {cut}"


def cut_patch(context: Context, loop_span: tuple[int, int] | None, carried: list[Carried]) -> list[Patch]:
    """The cuts inserted as the loop body's first lines (guarded when a name starts unbound)."""
    loop = context.source.loop(loop_span) if loop_span is not None else None
    if not carried or loop is None or loop.body_line <= loop.start:
        return []
    first = next((k for k in range(len(context)) if context.line(k) == loop.start), None)
    start = context.before(first) if first is not None else None
    texts = []
    for c in carried:
        bound = start is not None and _held(start, c.name, loop.func)[0]
        texts.append(c.cut if bound else guarded(context, loop.start, loop.func, c.name, c.cut))
    return [insert_before(loop.body_line, loop.body_indent, "\n".join(texts))]


__all__ = ["Carried", "carried_state", "cut_patch", "guarded"]

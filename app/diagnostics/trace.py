"""Questions about one step that several rules ask: who reaches what, what only some variables keep
alive, what a line wrote, how a message names a tensor.

Every question reads the step through ``At`` (``app.diagnostics.index``), fact by fact, and costs what
it visits — a rule asks it for the one step it reports, never for every step. "Reach" follows the
same edges the engine followed to find tensors: variable → tensor → ``.grad`` / ``._base`` /
``grad_fn`` → node → ``next`` / ``variable`` / ``saved``.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Collection, Iterable
from dataclasses import dataclass, field

from app.diagnostics.index import MODIFIED_MARK, At, Index, node_edges, tensor_edges
from app.i18n import gettext as _
from app.schema import NodeFact, TensorFact
from app.trace.holding import ACCUMULATE_GRAD

FREED_MARK = "backward through the graph a second time"
__all__ = ["ACCUMULATE_GRAD", "FREED_MARK", "MODIFIED_MARK"]


@dataclass
class Reach:
    tensors: dict[str, TensorFact] = field(default_factory=dict)
    nodes: dict[str, NodeFact] = field(default_factory=dict)
    storages: set[str] = field(default_factory=set)

    def __contains__(self, ident: str) -> bool:
        return ident in self.tensors or ident in self.nodes


def reach(view: At, tensors: Iterable[str] = (), nodes: Iterable[str] = (), *, floor: int = 0,
          until: str | None = None, skip: set[str] | None = None) -> Reach:
    """Everything the given tensors and nodes keep alive at ``view``'s step.

    ``floor`` skips nodes first seen before that step, and ``until`` stops as soon as that node is
    found: together they answer "does this graph lead back to that node" at the cost of the nodes
    made since (a node can only lead to nodes that existed when it was made). ``skip``: ids not to
    enter (what an earlier search covered); every id this search enters is added to it."""
    found = Reach()
    entered = skip if skip is not None else set()
    tensor_queue = deque(tensors)
    node_queue = deque(nodes)
    first_seen = view.index.timeline.first_seen
    while tensor_queue or node_queue:
        while tensor_queue:
            tid = tensor_queue.popleft()
            if tid in entered or (fact := view.tensor(tid)) is None:
                continue
            entered.add(tid)
            found.tensors[tid] = fact
            if fact.storage is not None:
                found.storages.add(fact.storage)
            tensor_queue.extend(t for t in (fact.grad, fact.base) if t is not None)
            if fact.grad_fn is not None:
                node_queue.append(fact.grad_fn)
        while node_queue:
            nid = node_queue.popleft()
            if nid in entered or (floor and first_seen.get(nid, floor) < floor):
                continue
            node = view.node(nid)
            if node is None:
                continue
            entered.add(nid)
            found.nodes[nid] = node
            if nid == until:
                return found
            node_queue.extend(n for n in node.next if n is not None)
            if node.variable is not None:
                tensor_queue.append(node.variable)
            tensor_queue.extend(t for t in node.saved.values() if t is not None)
    return found


def exclusive(view: At, keys: Collection[str]) -> tuple[int, set[str], set[str]]:
    """Bytes, storages and nodes alive only because of the variables ``keys``: what ``reach`` of every
    variable finds and ``reach`` of all the other variables does not.

    Computed from the part those variables reach alone: an element of it is also kept by another
    variable exactly when another variable names it, or an edge from outside the part points at it
    (every fact of a step is reachable from some variable: that is how the engine found it), or it
    hangs off such an element. Edges from outside are counted, not listed (``At.refs``): a weight
    that a thousand graphs use costs one lookup."""
    roots: dict[str, int] = {}
    for key in keys:
        tid = view.variable(key)
        if tid is not None:
            roots[tid] = roots.get(tid, 0) + 1
    part = reach(view, roots)
    inside: dict[str, int] = {}
    edges = [tensor_edges(f) for f in part.tensors.values()] + [node_edges(n) for n in part.nodes.values()]
    for targets in edges:
        for target in targets:
            if target in part:
                inside[target] = inside.get(target, 0) + 1
    shared = [e for e in (*part.tensors, *part.nodes) if view.refs(e) > inside.get(e, 0)]
    shared += [tid for tid in part.tensors if view.name_count(tid) > roots.get(tid, 0)]
    kept = Reach()
    queue = deque(shared)
    while queue:
        ident = queue.popleft()
        if ident in kept:
            continue
        if ident in part.tensors:
            kept.tensors[ident] = fact = part.tensors[ident]
            queue.extend(t for t in tensor_edges(fact) if t in part)
        elif ident in part.nodes:
            kept.nodes[ident] = node = part.nodes[ident]
            queue.extend(t for t in node_edges(node) if t in part)
    alone = {tid: fact for tid, fact in part.tensors.items() if tid not in kept.tensors}
    on_storage: dict[str, int] = {}
    for fact in alone.values():
        if fact.storage is not None:
            on_storage[fact.storage] = on_storage.get(fact.storage, 0) + 1
    storages = {sid for sid, n in on_storage.items() if view.user_count(sid) == n}
    nodes = set(part.nodes) - set(kept.nodes)
    total = 0
    for sid in storages:
        storage = view.storage(sid)
        total += storage.nbytes if storage is not None else 0
    return total, storages, nodes


def leaves_reached(view: At, tid: str) -> set[str]:
    """Leaf tensors whose ``AccumulateGrad`` a backward from ``tid`` would reach."""
    fact = view.tensor(tid)
    if fact is None:
        return set()
    if fact.grad_fn is None:
        return {tid} if fact.requires_grad else set()
    nodes = reach(view, nodes=[fact.grad_fn]).nodes
    return {n.variable for n in nodes.values() if n.variable is not None}


def names_of(view: At, tid: str) -> list[str]:
    """Variable names that point at ``tid`` (plain names first)."""
    return sorted(view.names(tid), key=lambda n: (("[" in n or "." in n or ":" in n), len(n), n))


def label(view: At, tid: str) -> str:
    """How a message names a tensor: its variable name; else the name ``Holding`` gives it
    (``w.grad``); else what in the graph holds it. Never an internal id."""
    names = names_of(view, tid)
    first_name, holder = (names[0], None) if names else view.holding_label(tid)
    if first_name is not None:
        return f"`{first_name}`" if len(first_name) <= 80 else f"`{first_name[:79]}…`"
    return held_by(holder)


def sentences(*parts: str) -> str:
    """Sentences one after the other, as the request's language writes them (Chinese: no space)."""
    return _join(parts)


def _join(parts: tuple[str, ...]) -> str:
    out = ""
    for part in (p.strip() for p in parts if p and p.strip()):
        out = part if not out else _("{first} {then}").format(first=out, then=part)
    return out


def listing(items: Iterable[str]) -> str:
    """``a, b, c`` in the request's language (Chinese lists with 、)."""
    return _(", ").join(items)


def held_by(role: str | None) -> str:
    """``SinBackward0.self`` → "the tensor `SinBackward0` saved as `self`" (``Holding``'s roles)."""
    if role is None:
        return _("an unnamed tensor")
    if role.endswith("._base"):
        return _("the base of {tensor}").format(tensor=held_by(role.removesuffix("._base")))
    node, _sep, saved = role.partition(".")
    if not saved:
        return _("an unnamed leaf") if node == ACCUMULATE_GRAD else _("a tensor `{node}` holds").format(
            node=node)
    return _("the tensor `{node}` saved as `{saved}`").format(node=node, saved=saved)


def version_bumps(index: Index, step: int) -> set[str]:
    """Tensors alive before and after ``step`` whose version counter went up: written in place by
    its line (only the facts the step changed can have moved)."""
    before = index.at(step - 1)
    bumped = set()
    for tid, fact in index.trace.steps[step].tensors.items():
        old = before.tensor(tid)
        if old is not None and (fact.version or 0) > (old.version or 0):
            bumped.add(tid)
    return bumped


def detached_from(view: At, tid: str) -> list[str]:
    """The tensors that require grad and share ``tid``'s memory, when ``tid`` itself is cut off.

    A ``detach()`` or ``.data`` result shares its original's storage but does not require grad,
    has no ``grad_fn`` and no ``_base``: the shape of an alias autograd cannot see through.
    """
    fact = view.tensor(tid)
    if fact is None or fact.storage is None or fact.requires_grad or fact.grad_fn or fact.base:
        return []
    storage = view.storage(fact.storage)
    if storage is None or storage.nbytes == 0 or not view.grad_user_count(fact.storage):
        return []  # (counted first: a storage may carry a thousand views, none requiring grad)
    return [
        other for other in view.users(fact.storage)
        if other != tid and (o := view.tensor(other)) is not None and o.requires_grad
    ]


def saved_by(view: At, storage: str) -> list[tuple[str, str, str]]:
    """(node, saved name, tensor) for every live saved tensor that uses ``storage``, in the order
    the step lists its nodes and each node its saved tensors."""
    found = [(nid, name, tid) for tid in view.users(storage) for nid, name in view.savers(tid)]

    def place(item: tuple[str, str, str]) -> tuple[float, int]:
        node = view.node(item[0])
        saved = list(node.saved) if node is not None else []
        return view.order(item[0]), saved.index(item[1]) if item[1] in saved else 0

    return sorted(found, key=place)


def node_label(name: str) -> str:
    return name.removeprefix("torch::autograd::")

"""What the graph view shows, as changes: fed one replayed step at a time, in time linear in them.

Vertices (the view's boxes), keyed by what they stand for:

* ``n:<node>`` — a ``grad_fn`` node (kind ``fn``) or an ``AccumulateGrad`` (kind ``acc``), with its
  saved tensors as chips inside it;
* ``leaf:<node>`` — the leaf tensor an ``AccumulateGrad`` accumulates into (drawn above it);
* ``out:<tensor>:<node>`` — a tensor bound to a variable whose ``grad_fn`` is that node (below it);
* ``free:<tensor>`` — a tensor bound to a variable outside any graph (no ``grad_fn``, no
  ``AccumulateGrad`` yet): a leaf that requires grad (state ``leaf``), or a no-grad one (``nograd``).

Edges follow ``next_functions`` and point the way data flowed forward: inputs above, outputs below.

Every element keeps a history: the steps at which its visibility, text or state *changed*
(``Events``). Each step only touches what its delta touched: the nodes it set or dropped, the
tensors it set, dropped or renamed (``Holding``), and the few elements that hang off those.

At its birth each vertex gets a *repetition class* (``klass``): vertices of one class were built by
the same line the same way — a loop's iterations, a comprehension's items — and the folded view
draws a class as one box with a count. Vertices of ``nn.Module`` parameters, and the operations that
apply them, also get the module's path (``model.0``) from the parameters' names.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from app.i18n import gettext as _
from app.render.names import is_accumulate, short_node_name
from app.render.steps import StepInput
from app.schema import NodeFact
from app.trace.holding import Holding

SAVED_FREED = "Trying to backward through the graph a second time"
_VERSIONS = re.compile(r"is at version (\d+); expected version (\d+)")
_INDEX = re.compile(r"\[\d+\]")  # losses[3] -> losses[#]; model.0.weight stays
_BACKWARD = re.compile(r"Backward\d*$")
CLASS_DEPTH = 4  # how deep a line's own subgraph shapes its vertices' class
LABEL_NAMES = 3  # a tensor with more names reads "a, b, c +5"

History = list[tuple[int, Any]]  # (step, value from that step on); value None/False/0: none
OrderedSet = dict[str, None]  # a set that iterates in insertion order


def _in_order(ids: set[str]) -> OrderedSet:
    """A set of ids as an ordered set, in an order no hash seed decides."""
    if not ids:
        return {}
    return dict.fromkeys(sorted(ids) if len(ids) > 1 else ids)


def _mark(members: OrderedSet, ident: str, sign: int) -> None:
    if sign > 0:
        members[ident] = None
    else:
        members.pop(ident, None)


def record(history: History, step: int, value: Any) -> None:
    """``value`` from ``step`` on. Changed twice in one step: the last word wins."""
    if history and history[-1][0] == step:
        history.pop()
    if history and history[-1][1] == value or (not history and not value):
        return
    history.append((step, value))


def value_at(history: History, step: int) -> Any:
    """The value at ``step`` (a short scan from the end: used by tests and the inspector only)."""
    for first, value in reversed(history):
        if first <= step:
            return value
    return None


@dataclass
class Vertex:
    key: str
    kind: str  # fn | acc | leaf | out | free
    title: str  # fn/acc: the node's name (AccumulateGrad, MulBackward0)
    tensor: str | None
    node: str | None
    born: int  # step of first appearance
    seq: int  # order of first appearance (ties within a step by discovery)
    line: int  # the snippet line that made it
    klass: int  # repetition class (see the module docstring)
    module: str | None = None
    chips: dict[str, str | None] = field(default_factory=dict)  # saved name -> tensor id
    label_len: int = 0
    chip_len: dict[str, int] = field(default_factory=dict)


@dataclass
class Events:
    """Every element's history of changes, and the vertices' static facts."""

    vertices: dict[str, Vertex] = field(default_factory=dict)
    vis: dict[str, History] = field(default_factory=dict)  # vertex -> shown
    text: dict[str, History] = field(default_factory=dict)  # tensor vertex -> label
    state: dict[str, History] = field(default_factory=dict)  # vertex -> state words
    chip_text: dict[tuple[str, str], History] = field(default_factory=dict)
    chip_state: dict[tuple[str, str], History] = field(default_factory=dict)  # "" | freed | modified
    chip_vis: dict[tuple[str, str], History] = field(default_factory=dict)
    edges: dict[tuple[str, str], History] = field(default_factory=dict)  # -> multiplicity
    # A backward pass's marks on edges (app/render/graph_backward.py): "grad" once a gradient went
    # along, and that gradient's text.
    edge_state: dict[tuple[str, str], History] = field(default_factory=dict)
    edge_text: dict[tuple[str, str], History] = field(default_factory=dict)
    passes: History = field(default_factory=list)  # the container: PASS_OVER while a pass just ended
    node_facts: dict[str, History] = field(default_factory=dict)  # node -> index into facts
    facts: list[Any] = field(default_factory=list)  # the inspector's entries, each once
    node_lines: dict[str, int] = field(default_factory=dict)  # node -> the line that created it
    node_names: dict[str, str] = field(default_factory=dict)
    count: int = 0


def saved_state(node: NodeFact, name: str) -> str:
    error = node.saved_errors.get(name)
    if error is None:
        return "" if node.saved.get(name) is not None else "freed"
    return "freed" if error.startswith(SAVED_FREED) else "modified"


def tensor_label(tid: str, holding: Holding) -> str:
    """What to call a tensor: its variables, else how the user reaches it, else who holds it."""
    own = list(holding.own.get(tid, ()))
    if own:
        more = f" +{len(own) - LABEL_NAMES}" if len(own) > LABEL_NAMES else ""
        return ", ".join(own[:LABEL_NAMES]) + more
    if holding.is_named(tid):
        names = holding.names(tid)
        if names:
            return names[0]
    holders = holding.holders(tid)
    if holders:
        holder = holders[0]
        if "." not in holder:
            return _("unnamed leaf")
        node, saved = holder.split(".", 1)
        return _("{saved} of {node}").format(saved=saved, node=_BACKWARD.sub("", node) or node)
    return _("unnamed tensor")


def _module_of(names: list[str]) -> str | None:
    """``model.0.weight`` -> ``model.0``: the module path of a parameter, from its first dotted name."""
    for name in names:
        head, dot, last = name.rpartition(".")
        if dot and head and last.isidentifier() and "[" not in last:
            return head
    return None


class GraphEvents:
    """The first half of the graph builder: ``add_step`` per replayed step, ``events`` at the end."""

    def __init__(self) -> None:
        self.events = Events()
        self._classes: dict[tuple, int] = {}
        self._node_class: dict[str, int] = {}
        self._node_born: dict[str, int] = {}
        self._node_module: dict[str, tuple[str | None, bool]] = {}  # node -> (module, param only)
        # Ordered sets (dicts of None): what is met in them is drawn in that order, and the order of
        # a set of strings would follow the process's hash seed (PYTHONHASHSEED) into the payload.
        self._parents: dict[str, OrderedSet] = {}  # node -> nodes whose next_functions name it
        self._var_nodes: dict[str, OrderedSet] = {}  # tensor -> AccumulateGrad nodes of it
        self._saved_by: dict[str, OrderedSet] = {}  # tensor -> nodes that saved it
        self._grad_users: dict[str, OrderedSet] = {}  # node -> tensors whose grad_fn it is
        self._tensor_vertex: dict[str, str] = {}  # tensor -> its out/free vertex now
        self._in_edges: dict[str, dict[str, int]] = {}  # node -> src vertex -> multiplicity
        self._facts_seen: dict[tuple, int] = {}
        self._labels: dict[str, str] = {}  # tensor -> its label when its holders' chips were drawn

    # ---- small helpers -----------------------------------------------------------------------
    def _klass(self, key: tuple) -> int:
        return self._classes.setdefault(key, len(self._classes))

    def _vertex(self, step: StepInput, key: str, kind: str, title: str, klass: int, *,
                tensor: str | None = None, node: str | None = None, module: str | None = None) -> Vertex:
        vertex = self.events.vertices.get(key)
        if vertex is None:
            vertex = Vertex(key, kind, title, tensor, node, step.index, len(self.events.vertices),
                            step.changes.line, klass, module)
            self.events.vertices[key] = vertex
        return vertex

    def _show(self, key: str, step: int, shown: bool) -> None:
        record(self.events.vis.setdefault(key, []), step, shown)

    def _label(self, vertex: Vertex, step: int, text: str) -> None:
        vertex.label_len = max(vertex.label_len, len(text))
        record(self.events.text.setdefault(vertex.key, []), step, text)

    # ---- the step ----------------------------------------------------------------------------
    def add_step(self, step: StepInput) -> None:
        state, changes = step.state, step.changes
        index = step.index
        dirty_tensors: OrderedSet = dict.fromkeys(changes.old_tensors)
        moved_nodes: OrderedSet = {}  # appeared or disappeared: their parents' edges change
        for nid, old in changes.old_nodes.items():
            new = state.nodes.get(nid)
            self._index_node(nid, old, -1, dirty_tensors)
            self._index_node(nid, new, +1, dirty_tensors)
            if (old is None) != (new is None):
                moved_nodes[nid] = None
                dirty_tensors.update(self._grad_users.get(nid, {}))
        born = [nid for nid in changes.old_nodes if changes.old_nodes[nid] is None and nid in state.nodes]
        for nid in born:
            self._node_born.setdefault(nid, index)
            self.events.node_lines.setdefault(nid, changes.line)
        self._assign_modules(born, step)
        for nid in born:
            self._classify_node(nid, step, 0)
        for nid in changes.old_nodes:
            self._draw_node(nid, step)
        for nid in moved_nodes:
            for parent in self._parents.get(nid, ()):
                if parent in state.nodes and parent not in changes.old_nodes:
                    self._draw_edges(parent, step)
        for name, old in changes.old_variables.items():
            if old is not None:
                dirty_tensors[old] = None
            new = state.variables.get(name)
            if new is not None:
                dirty_tensors[new] = None
        for tid, old in changes.old_tensors.items():
            new = state.tensors.get(tid)
            old_fn, new_fn = (old.grad_fn if old else None), (new.grad_fn if new else None)
            if old_fn != new_fn:
                if old_fn is not None:
                    self._grad_users.get(old_fn, {}).pop(tid, None)
                if new_fn is not None:
                    self._grad_users.setdefault(new_fn, {})[tid] = None
        touched = dirty_tensors | _in_order(step.held.renamed)
        for tid in touched | _in_order(step.held.reheld):
            label = tensor_label(tid, step.holding)
            self._draw_tensor(tid, step, label)
            if tid not in touched and self._reads_the_same(tid, label):
                continue
            self._labels[tid] = label
            for nid in self._var_nodes.get(tid, ()):
                if nid in state.nodes and f"leaf:{nid}" in self.events.vertices:
                    self._label(self.events.vertices[f"leaf:{nid}"], index, label)
            for nid in self._saved_by.get(tid, ()):
                # (a node set at this step was drawn above, from the same labels)
                if nid in state.nodes and nid not in changes.old_nodes:
                    self._draw_chips(nid, state.nodes[nid], step)
                    self._inspect(nid, step)
        self.events.count = index + 1

    def _reads_the_same(self, tid: str, label: str) -> bool:
        """Only the tensor's graph holders changed (one more node saved it) and its label reads as
        before: what its holders show of it is unchanged. Redrawing them all would make a weight that
        every iteration saves cost O(iterations) per step."""
        return self._labels.get(tid) == label

    def _index_node(self, nid: str, node: NodeFact | None, sign: int, dirty: OrderedSet) -> None:
        if node is None:
            return
        for nxt in node.next:
            if nxt is not None:
                _mark(self._parents.setdefault(nxt, {}), nid, sign)
        if node.variable is not None:
            _mark(self._var_nodes.setdefault(node.variable, {}), nid, sign)
            dirty[node.variable] = None
        for tid in node.saved.values():
            if tid is not None:
                _mark(self._saved_by.setdefault(tid, {}), nid, sign)

    def _assign_modules(self, born: list[str], step: StepInput) -> None:
        """The module path of every node born this step, inputs before the nodes they feed: a node
        applies module ``m`` when every input it has is a parameter of ``m`` (or applies ``m`` only).
        Iterative: one line may build a chain of thousands of nodes (``[h := h * 2 for ...]``)."""
        nodes = step.state.nodes
        todo = set(born)
        entered: set[str] = set()
        for root in born:
            stack = [(root, False)]
            while stack:
                nid, inputs_done = stack.pop()
                if nid not in todo:
                    continue
                if inputs_done:
                    todo.discard(nid)
                    self._node_module[nid] = self._module_from_inputs(nodes[nid], step)
                    continue
                if nid in entered:  # met again before its inputs were done: a cycle (forged)
                    continue
                entered.add(nid)
                stack.append((nid, True))
                stack.extend((nxt, False) for nxt in nodes[nid].next if nxt in todo)

    def _module_from_inputs(self, node: NodeFact, step: StepInput) -> tuple[str | None, bool]:
        """(module, whether the node only applies that module's parameters)."""
        if is_accumulate(node):
            names = step.holding.names(node.variable) if node.variable is not None else []
            return _module_of(names), True
        modules: set[str] = set()
        param_only = True
        for nxt in node.next:
            present = nxt is not None and nxt in step.state.nodes
            module, only = self._node_module.get(nxt, (None, False)) if present else (None, False)
            if module is not None and only:
                modules.add(module)
            else:
                param_only = False  # an input without grad, or not one module's parameter
        module = next(iter(modules)) if len(modules) == 1 else None
        return module, param_only and module is not None

    def _classify_node(self, nid: str, step: StepInput, depth: int) -> int:
        """A node's class: its line, its name and the shape of what its own line built under it (at
        most ``CLASS_DEPTH`` deep, so the recursion is bounded)."""
        found = self._node_class.get(nid)
        if found is not None:
            return found
        node = step.state.nodes[nid]
        if is_accumulate(node):
            tid = node.variable
            names = step.holding.names(tid) if tid is not None else []
            pattern = _INDEX.sub("[#]", names[0]) if names else ""
            klass = self._klass(("acc", step.changes.line, pattern))
        else:
            children: list[Any] = []
            for nxt in node.next:
                child = step.state.nodes.get(nxt) if nxt is not None else None
                if child is None:  # an input without grad: this node applies something to data
                    children.append("x")
                elif is_accumulate(child):  # which parameter it is matters, not when it appeared
                    children.append(("a", self._classify_node(nxt, step, CLASS_DEPTH)))
                elif self._node_born.get(nxt) == step.index and depth < CLASS_DEPTH:
                    children.append(self._classify_node(nxt, step, depth + 1))
                else:
                    children.append("x")  # made earlier (another iteration, another line): outside
            klass = self._klass(("fn", step.changes.line, short_node_name(node.name), tuple(children)))
        if depth == 0 or nid not in self._node_class:
            self._node_class[nid] = klass
        return klass

    def _draw_node(self, nid: str, step: StepInput) -> None:
        state, index = step.state, step.index
        node = state.nodes.get(nid)
        key = f"n:{nid}"
        if node is None:
            self._show(key, index, False)
            self._show(f"leaf:{nid}", index, False)
            vertex = self.events.vertices.get(key)
            for name in vertex.chips if vertex else ():
                record(self.events.chip_vis.setdefault((key, name), []), index, False)
            for src in self._in_edges.pop(nid, {}):
                record(self.events.edges.setdefault((src, key), []), index, 0)
            return
        acc = is_accumulate(node)
        self.events.node_names[nid] = node.name
        module = self._node_module.get(nid, (None, False))[0]
        vertex = self._vertex(step, key, "acc" if acc else "fn", short_node_name(node.name),
                              self._node_class.get(nid, -1), node=nid, module=module)
        self._show(key, index, True)
        if node.variable is not None and node.variable in state.tensors:
            tid = node.variable
            leaf = self._vertex(step, f"leaf:{nid}", "leaf", "", self._klass(("leaf", vertex.klass)),
                                tensor=tid, module=module)
            self._show(leaf.key, index, True)
            self._label(leaf, index, tensor_label(tid, step.holding))
        self._draw_chips(nid, node, step)
        self._draw_edges(nid, step)
        self._inspect(nid, step)

    def _draw_chips(self, nid: str, node: NodeFact, step: StepInput) -> None:
        vertex = self.events.vertices[f"n:{nid}"]
        index, holding = step.index, step.holding
        now = dict.fromkeys([*node.saved, *node.saved_errors])
        for name in list(vertex.chips):
            if name not in now:
                record(self.events.chip_vis.setdefault((vertex.key, name), []), index, False)
        for name in now:
            tid = node.saved.get(name)
            vertex.chips[name] = vertex.chips.get(name) or tid
            named = tid is not None and holding.is_named(tid)
            first = holding.first_name(tid) if named else None
            text = name if first is None else f"{name}={first}"
            vertex.chip_len[name] = max(vertex.chip_len.get(name, 0), len(text))
            chip = (vertex.key, name)
            record(self.events.chip_vis.setdefault(chip, []), index, True)
            record(self.events.chip_text.setdefault(chip, []), index, text)
            record(self.events.chip_state.setdefault(chip, []), index, saved_state(node, name))

    def _draw_edges(self, nid: str, step: StepInput) -> None:
        node, nodes = step.state.nodes[nid], step.state.nodes
        key = f"n:{nid}"
        counts: dict[str, int] = {}
        for nxt in node.next:
            if nxt is not None and nxt in nodes:
                counts[f"n:{nxt}"] = counts.get(f"n:{nxt}", 0) + 1
        if node.variable is not None and node.variable in step.state.tensors:
            counts[f"leaf:{nid}"] = 1
        before = self._in_edges.get(nid, {})
        for src in before.keys() - counts.keys():
            record(self.events.edges.setdefault((src, key), []), step.index, 0)
        for src, count in counts.items():
            record(self.events.edges.setdefault((src, key), []), step.index, count)
        self._in_edges[nid] = counts

    def _draw_tensor(self, tid: str, step: StepInput, label: str) -> None:
        """The out/free vertex of a tensor bound to a variable (none for a leaf drawn by its node),
        labelled ``label`` (``tensor_label`` now)."""
        state, holding, index = step.state, step.holding, step.index
        fact = state.tensors.get(tid)
        key = None
        if fact is not None and holding.own.get(tid) and not any(
                n in state.nodes for n in self._var_nodes.get(tid, ())):
            if fact.grad_fn is not None and fact.grad_fn in state.nodes:
                key = f"out:{tid}:{fact.grad_fn}"
            else:
                key = f"free:{tid}"
        old = self._tensor_vertex.get(tid)
        if old != key and old is not None:
            self._show(old, index, False)
            if old.startswith("out:"):
                record(self.events.edges.setdefault((f"n:{old.rsplit(':', 1)[1]}", old), []), index, 0)
        if key is None:
            self._tensor_vertex.pop(tid, None)
            return
        self._tensor_vertex[tid] = key
        if key.startswith("out:"):
            nid = fact.grad_fn
            klass = self._klass(("out", self._node_class.get(nid, -1)))
            vertex = self._vertex(step, key, "out", "", klass, tensor=tid)
            record(self.events.edges.setdefault((f"n:{nid}", key), []), index, 1)
        else:
            kind = "leaf" if fact.requires_grad else "nograd"
            pattern = _INDEX.sub("[#]", next(iter(holding.own[tid])))
            vertex = self._vertex(step, key, "free", "", self._klass(("free", step.changes.line, pattern)),
                                  tensor=tid)
            record(self.events.state.setdefault(key, []), index, kind)
        self._show(key, index, True)
        self._label(vertex, index, label)

    # ---- the inspector -----------------------------------------------------------------------
    def _inspect(self, nid: str, step: StepInput) -> None:
        """The node's facts now: next_functions, each saved tensor with its versions, its metadata
        keys and its hooks."""
        state, holding = step.state, step.holding
        node = state.nodes[nid]
        nexts = []
        for nxt in node.next:
            child = state.nodes.get(nxt) if nxt is not None else None
            if child is not None:
                nexts.append((nxt, short_node_name(child.name)))
            else:
                nexts.append((nxt, "None" if nxt is None else _("gone")))
        saved = []
        for name in dict.fromkeys([*node.saved, *node.saved_errors]):
            tid = node.saved.get(name)
            error = node.saved_errors.get(name)
            fact = state.tensors.get(tid) if tid is not None else None
            now = fact.version if fact is not None else None
            found = _VERSIONS.search(error) if error else None
            was = int(found.group(2)) if found else (now if error is None else None)
            if found:
                now = int(found.group(1))
            label = tensor_label(tid, holding) if tid is not None else "—"
            saved.append((name, tid, label, was, now, saved_state(node, name), error or ""))
        # metadata keys, and (kind, name) per hook (pre / post / tensor; the snippet's function or null)
        hooks = tuple((hook.kind, hook.name) for hook in node.hooks)
        signature = (tuple(nexts), tuple(saved), tuple(node.metadata), hooks)
        fact_index = self._facts_seen.get(signature)
        if fact_index is None:  # the inspector's entry, as JSON lists
            fact_index = self._facts_seen[signature] = len(self.events.facts)
            self.events.facts.append([[list(n) for n in nexts], [list(e) for e in saved], list(node.metadata),
                                      [list(h) for h in hooks]])
        history = self.events.node_facts.setdefault(nid, [])
        if history and history[-1][0] == step.index:
            history[-1] = (step.index, fact_index)
        elif not history or history[-1][1] != fact_index:
            history.append((step.index, fact_index))  # (index 0 is a value: not record()'s "none")

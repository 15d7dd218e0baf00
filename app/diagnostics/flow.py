"""Where values come from, and where the graph stopped following them.

The autograd graph says which leaves a tensor leads back to *through the graph*. What it cannot say is
what the tensor was computed from when the graph was cut on the way (``h = enc(x).detach()``: ``h``
has no history). ``Flow`` follows the values instead: one pass over the steps, and at each statement
every value it assigns (or writes in place) gets the leaves of everything the statement read. The
trace then says, for each of those leaves, whether the new tensor's graph still reaches it; where it
does not, that step is where the path was *cut*, and the cut travels on with the value.

What a statement reads is found in its source (names, attribute chains, a module's parameters, a
container's items), what those names hold at that step in the trace, and what the functions it
called returned (their ``return`` lines ran as steps in between). A value that is not a tensor (a
float from ``.item()``, a numpy array) carries its leaves by name, and no graph.

Only leaves that require grad are followed: a model's parameters, a tensor made with
``requires_grad=True``. Linear in the steps; each graph node's leaves are found once.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field

from app.diagnostics.context import Context
from app.diagnostics.index import At
from app.diagnostics.source import LineFacts, calls_method, expr_keys, resolve

Leaves = dict[str, int | None]  # leaf -> None (the graph reaches it) or the step that cut it
CUT_CALLS = frozenset({"detach", "detach_", "item", "numpy", "tolist"})


@dataclass
class Flow:
    context: Context
    tensors: dict[str, Leaves] = field(default_factory=dict)  # tensor id -> its leaves
    names: dict[str, Leaves] = field(default_factory=dict)  # a non-tensor's name key -> its leaves
    frozen: dict[str, int] = field(default_factory=dict)  # leaf -> the step it stopped requiring grad
    reaches: dict[str, frozenset[str]] = field(default_factory=dict)  # node -> leaves its graph reaches
    returns: list[tuple[int, str | None, Leaves]] = field(default_factory=list)  # (step, function, leaves)
    cuts: list[tuple[int, str | None, Leaves]] = field(default_factory=list)  # cuts inside functions

    # ---- what a tensor's graph reaches -----------------------------------------------------------
    def graph_leaves(self, view: At, tid: str) -> frozenset[str]:
        fact = view.tensor(tid)
        if fact is None:
            return frozenset()
        if fact.grad_fn is None:
            return frozenset({tid}) if fact.requires_grad else frozenset()
        return self._node_leaves(view, fact.grad_fn)

    def _node_leaves(self, view: At, root: str) -> frozenset[str]:
        memo = self.reaches
        if root in memo:
            return memo[root]
        stack = [(root, False)]
        while stack:
            nid, done = stack.pop()
            if nid in memo:
                continue
            node = view.node(nid)
            if node is None:
                memo[nid] = frozenset()
                continue
            children = [n for n in node.next if n is not None]
            if not done:
                stack.append((nid, True))
                stack.extend((n, False) for n in children if n not in memo)
                continue
            found: frozenset[str] = frozenset({node.variable}) if node.variable is not None else frozenset()
            parts = [memo.get(n, frozenset()) for n in children]
            parts = [p for p in parts if p]
            if len(parts) == 1 and not found:
                memo[nid] = parts[0]  # shared, not copied: a chain costs its length
            else:
                memo[nid] = found.union(*parts)
        return memo[root]

    def reads(self, view: At, parts: list[ast.AST], func: str | None) -> Leaves:
        """The leaves of everything the expressions read at ``view`` (a question asked after the pass)."""
        reader = FlowPass(self.context)
        reader.flow = self
        return reader.reads(view, parts, func)

    # ---- what a value was computed from ----------------------------------------------------------
    def of_tensor(self, view: At, tid: str) -> Leaves:
        """A tensor's leaves: what the pass recorded for it; for a tensor no statement made (an argument
        built inline, ``f(w * 2)``), the leaves its graph reaches."""
        leaves = self.tensors.get(tid)
        if leaves is None:
            leaves = self.tensors[tid] = dict.fromkeys(self.graph_leaves(view, tid))
        fact = view.tensor(tid)
        if fact is not None and fact.is_leaf and fact.requires_grad and tid not in leaves:
            leaves = self.tensors[tid] = {**leaves, tid: None}
        return leaves


def merge(into: Leaves, other: Leaves) -> None:
    """Leaves of two inputs: reached by the graph if either reaches it, else the first cut."""
    for leaf, cut in other.items():
        if leaf not in into or into[leaf] is not None and (cut is None or cut < into[leaf]):
            into[leaf] = cut


def chains(node: ast.AST) -> list[ast.expr]:
    """The maximal name chains an expression reads (``model.fc``, ``x``, ``h[0]``), its stores aside."""
    found: list[ast.expr] = []

    def visit(n: ast.AST) -> None:
        if isinstance(n, ast.Name):
            if isinstance(n.ctx, ast.Load):
                found.append(n)
            return
        if isinstance(n, ast.Attribute | ast.Subscript) and isinstance(n.ctx, ast.Load) and expr_keys(n):
            found.append(n)
            return
        if isinstance(n, ast.Subscript):
            visit(n.value)
            visit(n.slice)
            return
        if isinstance(n, ast.Lambda | ast.FunctionDef):
            return
        for child in ast.iter_child_nodes(n):
            visit(child)

    visit(node)
    return found


def own_parts(stmt: ast.stmt) -> list[ast.AST]:
    """What a statement evaluates itself (a loop's header, not its body)."""
    if isinstance(stmt, ast.For | ast.AsyncFor):
        return [stmt.iter]
    if isinstance(stmt, ast.While | ast.If):
        return [stmt.test]
    if isinstance(stmt, ast.With | ast.AsyncWith):
        return [item.context_expr for item in stmt.items]
    if isinstance(stmt, ast.Assign | ast.AugAssign | ast.AnnAssign):
        return [stmt.value] if stmt.value is not None else []
    if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef | ast.Try | ast.Import
                  | ast.ImportFrom):
        return []
    return [stmt]


def _store_names(target: ast.expr) -> list[ast.expr]:
    """The names a target binds (``out, h`` → both); a subscript or attribute target writes into its
    base in place (returned as is)."""
    if isinstance(target, ast.Tuple | ast.List):
        return [n for elt in target.elts for n in _store_names(elt)]
    if isinstance(target, ast.Starred):
        return _store_names(target.value)
    return [target]


MAX_KEYS = 512  # a container's items read for one chain: a statement that reads a huge list is cut short


class FlowPass:
    """The one pass: ``run`` fills the ``Flow`` step by step."""

    def __init__(self, context: Context) -> None:
        self.context = context
        self.flow = Flow(context)
        self.last_of: dict[str | None, int] = {}  # function -> its latest step
        self._lines: dict[int, _Statement] = {}  # what each line's statement reads and writes

    def key(self, func: str | None, name: str) -> str:
        return f"{func}:{name}" if func else name

    def read(self, view: At, expr: ast.expr, func: str | None) -> Leaves:
        """The leaves of one name chain at ``view``: the tensors it names (``tensors_under``), else a
        non-tensor's own leaves."""
        out: Leaves = {}
        for key in expr_keys(expr):
            for scoped in ((self.key(func, key), key) if func else (key,)):
                if scoped in self.flow.names and view.variable(scoped) is None:
                    return dict(self.flow.names[scoped])
        for tid in tensors_under(view, expr, func):
            merge(out, self.flow.of_tensor(view, tid))
        return out

    def reads(self, view: At, parts: list[ast.AST], func: str | None, then: At | None = None) -> Leaves:
        """The leaves of everything the expressions read at ``view``; a chain ``view`` does not know is
        read at ``then`` (a function's first line: its arguments are named only once it ran)."""
        return self._reads(view, [expr for part in parts for expr in chains(part)], func, then)

    def _reads(self, view: At, exprs: list[ast.expr], func: str | None, then: At | None = None) -> Leaves:
        """``reads`` of the name chains ``exprs``."""
        out: Leaves = {}
        for expr in exprs:
            found = self.read(view, expr, func)
            if not found and then is not None:
                found = self.read(then, expr, func)
            merge(out, found)
        return out

    def run(self) -> Flow:
        context = self.context
        steps = context.trace.steps
        for k in range(len(steps)):
            if steps[k].phase != "forward":
                continue
            self._frozen(k)
            facts = context.facts(k)
            if facts is None or facts.node is None:
                continue
            previous = self.last_of.get(facts.func, -1)
            self.last_of[facts.func] = k
            self._step(k, facts, previous)
        return self.flow

    def _frozen(self, k: int) -> None:
        """Leaves that stopped requiring grad at this step (``p.requires_grad = False``)."""
        before = self.context.before(k)
        for tid, fact in self.context.trace.steps[k].tensors.items():
            if fact.requires_grad or not fact.is_leaf:
                continue  # (asked first: most tensors a step sets are not frozen leaves, and need no read)
            old = before.tensor(tid)
            if old is not None and old.requires_grad:
                self.flow.frozen.setdefault(tid, k)

    def _step(self, k: int, facts: LineFacts, previous: int) -> None:
        stmt = facts.node
        assert stmt is not None
        context, flow, func = self.context, self.flow, facts.func
        before, after = context.before(k), context.at(k)
        # what the functions this line called returned, and cut inside them
        called = [r for r in flow.returns if previous < r[0] < k and r[1] != func]
        inner = [c for c in flow.cuts if previous < c[0] < k and c[1] != func]
        shape = self._lines.get(facts.line)
        if shape is None:
            shape = self._lines[facts.line] = _Statement.of(facts)
        names, in_place, is_return = shape.names, shape.in_place, shape.is_return
        if not names and not in_place and not is_return:
            return
        read = self._reads(before, shape.reads, func, after)
        for leaves in (r[2] for r in called):
            merge(read, leaves)
        if isinstance(stmt, ast.AugAssign) and isinstance(stmt.target, ast.Name):
            merge(read, self.read(before, stmt.target, func))
        if not read:
            return
        inner_cut: dict[str, int] = {}
        for _step, _func, leaves in inner:
            for leaf, cut in leaves.items():
                if cut is not None:
                    inner_cut[leaf] = cut
        if is_return:
            value = stmt.value  # type: ignore[union-attr]
            cut_here = _cut_expression(value) is not None  # ``return z.detach()``: the value leaves cut
            leaves = {leaf: (k if cut_here and cut is None else cut) for leaf, cut in read.items()}
            flow.returns.append((k, func, leaves))
            if cut_here:
                flow.cuts.append((k, func, leaves))
            return
        derivative = any(b.kind == "grad" for b in facts.backwards)  # autograd.grad: not a cut
        for target in names:
            key = self.key(func, expr_keys(target)[0])
            tids = [t for t in [after.variable(key)] if t is not None]
            if not tids and isinstance(target, ast.Name):  # a tuple or list: its items
                tids = [t for item in after.keys_headed(func, target.id)
                        if item.split(":", 1)[-1].startswith(target.id + "[") and (t := after.variable(item))]
            if tids:
                for tid in tids:
                    if before.tensor(tid) is None:  # a new value; a name for an old one changes nothing
                        flow.tensors[tid] = self._connect(after, tid, read, k, inner_cut, func, derivative)
                flow.names.pop(key, None)
            elif not derivative:  # not a tensor: a number, an array — no graph at all
                flow.names[key] = {leaf: (cut if cut is not None else inner_cut.get(leaf, k))
                                   for leaf, cut in read.items()}
                if func is not None and any(c is None for c in read.values()):
                    flow.cuts.append((k, func, flow.names[key]))
        for receiver in in_place:
            tid = next((t for e in chains(receiver) if (t := resolve(after, e, func)) is not None), None)
            if tid is None:
                continue
            merged = dict(flow.of_tensor(before, tid))
            merge(merged, read)
            flow.tensors[tid] = self._connect(after, tid, merged, k, inner_cut, func)

    def _connect(self, view: At, tid: str, read: Leaves, k: int, inner_cut: dict[str, int], func: str | None,
                 derivative: bool = False) -> Leaves:
        """The tensor's leaves after step ``k``: those its graph reaches are connected; an input leaf it
        no longer reaches was cut here (or inside a function this line called, or where it was frozen).
        A derivative (``torch.autograd.grad``) may drop a leaf for good reason: it is left out."""
        reached = self.flow.graph_leaves(view, tid)
        out: Leaves = {}
        new_cuts: Leaves = {}
        for leaf, cut in read.items():
            if leaf in reached:
                out[leaf] = None
            elif derivative:
                continue
            elif cut is not None:
                out[leaf] = cut
            elif leaf in self.flow.frozen and self.flow.frozen[leaf] <= k:
                out[leaf] = self.flow.frozen[leaf]
            else:
                out[leaf] = new_cuts[leaf] = inner_cut.get(leaf, k)
        if func is not None and new_cuts:
            self.flow.cuts.append((k, func, new_cuts))  # a caller's line will find the cut in here
        fact = view.tensor(tid)
        if fact is not None and fact.is_leaf and fact.requires_grad:
            out[tid] = None
        return out


@dataclass
class _Statement:
    """What a line's statement binds (``names``), writes in place and reads (its name chains): the
    same at every step of the line, read from its AST once."""

    names: list[ast.expr]
    in_place: list[ast.expr]
    is_return: bool
    reads: list[ast.expr]

    @classmethod
    def of(cls, facts: LineFacts) -> _Statement:
        stmt = facts.node
        assert stmt is not None
        targets: list[ast.expr] = []
        in_place: list[ast.expr] = []
        if isinstance(stmt, ast.Assign):
            for target in stmt.targets:
                targets += _store_names(target)
        elif isinstance(stmt, ast.AugAssign | ast.AnnAssign):
            targets.append(stmt.target)
        elif isinstance(stmt, ast.For | ast.AsyncFor):
            targets += _store_names(stmt.target)
        for write in facts.writes:
            in_place.append(write.base or write.receiver)
        for node in ast.walk(stmt):  # ``h.detach_()`` cuts ``h`` where it stands
            if calls_method(node, "detach_"):
                in_place.append(node.func.value)  # type: ignore[attr-defined]
        names = [t for t in targets if isinstance(t, ast.Name | ast.Attribute) and expr_keys(t)]
        in_place += [t.value for t in targets if isinstance(t, ast.Subscript)]
        is_return = isinstance(stmt, ast.Return) and stmt.value is not None
        return cls(names, in_place, is_return, [expr for part in own_parts(stmt) for expr in chains(part)])


def tensors_under(view: At, expr: ast.expr, func: str | None) -> list[str]:
    """The tensors a name chain reaches at a step: the tensor it names (a function's local first), else
    every tensor under it (a module's parameters, a container's items, ``model.fc`` for
    ``model.fc.parameters``), else what its base reaches (``x`` for ``x.T``, ``x.detach``)."""
    for key in expr_keys(expr):
        for scope in ((func, None) if func is not None else (None,)):
            scoped = f"{scope}:{key}" if scope else key
            tid = view.variable(scoped)
            if tid is not None:
                return [tid]
            head = key.split(".", 1)[0].split("[", 1)[0]
            inside = [k for k in view.keys_headed(scope, head) if _under(k.split(":", 1)[-1], key)][:MAX_KEYS]
            tids = [t for k in inside if (t := view.variable(k)) is not None]
            if tids:
                return list(dict.fromkeys(tids))
    if isinstance(expr, ast.Attribute | ast.Subscript):
        return tensors_under(view, expr.value, func)  # type: ignore[arg-type]
    return []


def _under(key: str, prefix: str) -> bool:
    return key == prefix or key.startswith(prefix + ".") or key.startswith(prefix + "[")


def _cut_expression(expr: ast.expr) -> ast.expr | None:
    """The call at the top of an expression that returns its value without the graph, if any."""
    node = expr
    while isinstance(node, ast.Call | ast.Attribute | ast.Subscript):
        if calls_method(node, *CUT_CALLS):
            return node
        if isinstance(node, ast.Attribute) and node.attr == "data":
            return node
        node = node.func if isinstance(node, ast.Call) else node.value  # type: ignore[assignment]
    return None


def flow(context: Context) -> Flow:
    """The run's value flow (memoised on the context)."""
    found = context.memo.get("flow")
    if found is None:
        found = context.memo["flow"] = FlowPass(context).run()
    return found

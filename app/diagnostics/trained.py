"""What the snippet means to train: the leaves an optimizer holds, and the ones it updates by hand.

An optimizer is made by a call to ``torch.optim.<Name>(params, ...)``: what ``params`` names at
that step (``model.parameters()``, ``[w, b]``, a list of them, a module's part, param groups as
dicts) is read in the trace — every leaf that requires grad there. A leaf frozen before the optimizer
was made is not among them: the optimizer cannot train it, and nobody meant it to. A hand-written
update (``p -= lr * p.grad``, ``w.data.add_(w.grad, alpha=-lr)``) trains what it writes; inside
``for p in params:`` that is everything ``params`` holds.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field

from app.diagnostics.context import Context
from app.diagnostics.flow import chains, tensors_under
from app.diagnostics.index import At
from app.diagnostics.source import LineFacts, resolve

OPTIMIZERS = frozenset({
    "SGD", "Adam", "AdamW", "Adamax", "Adadelta", "Adagrad", "ASGD", "LBFGS", "NAdam", "RAdam",
    "RMSprop", "Rprop", "SparseAdam", "Adafactor", "Muon",
})


@dataclass
class Group:
    """Leaves trained together: one optimizer (or one of its param groups), or a hand-written update."""

    line: int  # where it was made (or where the update is)
    leaves: list[str] = field(default_factory=list)
    by_hand: bool = False
    step: int = -1  # the step that made it (an optimizer's, or a param group it was given)


@dataclass
class Trained:
    groups: list[Group] = field(default_factory=list)

    def leaves(self) -> set[str]:
        return {leaf for group in self.groups for leaf in group.leaves}

    def group_of(self, leaf: str) -> Group | None:
        return next((g for g in self.groups if leaf in g.leaves), None)


def _is_optimizer(call: ast.Call) -> bool:
    """``torch.optim.SGD(...)`` and the like, and ``opt.add_param_group({...})``: both give an
    optimizer parameters to train."""
    func = call.func
    if isinstance(func, ast.Attribute) and func.attr == "add_param_group":
        return True
    name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
    if name not in OPTIMIZERS:
        return False
    if isinstance(func, ast.Attribute):  # torch.optim.SGD, optim.SGD
        return "optim" in ast.unparse(func.value)
    return True


def _params_arg(call: ast.Call) -> ast.expr | None:
    if isinstance(call.func, ast.Attribute) and call.func.attr == "add_param_group":
        group = call.args[0] if call.args else None  # one param group: its "params"
        return ast.List([group], ast.Load()) if isinstance(group, ast.Dict) else None
    if call.args:
        return call.args[0]
    return next((k.value for k in call.keywords if k.arg == "params"), None)


def tensors_in(view: At, expr: ast.AST, func: str | None) -> list[str]:
    """The tensors an expression names at a step: each name chain's tensor, or the tensors under it
    (``model.fc.parameters()`` → every key under ``model.fc``)."""
    found: list[str] = []
    for chain in chains(expr):
        found += tensors_under(view, chain, func)
    return list(dict.fromkeys(found))


def _leaves(view: At, tids: list[str]) -> list[str]:
    out = []
    for tid in tids:
        fact = view.tensor(tid)
        if fact is not None and fact.is_leaf and fact.requires_grad:
            out.append(tid)
    return out


def trained(context: Context) -> Trained:
    found = context.memo.get("trained")
    if found is None:
        found = context.memo["trained"] = _find(context)
    return found


def _find(context: Context) -> Trained:
    out = Trained()
    updates: set[tuple[int, str]] = set()
    by_line: dict[int, _Line] = {}  # what each line's code does, read from its AST once
    for k in range(len(context)):
        facts = context.facts(k)
        if facts is None or facts.node is None:
            continue
        line = by_line.get(facts.line)
        if line is None:
            line = by_line[facts.line] = _Line.of(facts)
        for call in line.optimizers:
            out.groups += _optimizer_groups(context, k, facts, call)
        for root, text in line.updates:
            if (k, text) not in updates:
                updates.add((k, text))
                group = _update_group(context, k, facts, root)
                if group is not None and group.leaves:
                    known = next((g for g in out.groups if g.by_hand and g.line == group.line), None)
                    if known is None:
                        out.groups.append(group)
                    else:
                        known.leaves += [leaf for leaf in group.leaves if leaf not in known.leaves]
    return out


@dataclass
class _Line:
    """A line's optimizer calls, and the writes it makes that read the written tensor's ``.grad``
    (its root expression and that expression's text): the same at every step of the line."""

    optimizers: list[ast.Call]
    updates: list[tuple[ast.expr, str]]

    @classmethod
    def of(cls, facts: LineFacts) -> _Line:
        assert facts.node is not None
        nodes = list(ast.walk(facts.node))
        optimizers = [node for node in nodes if isinstance(node, ast.Call) and _is_optimizer(node)]
        grads = [ast.unparse(node.value) for node in nodes
                 if isinstance(node, ast.Attribute) and node.attr == "grad"]
        updates = []
        for write in facts.writes:
            root = write.base or write.receiver
            text = ast.unparse(root)
            if text in grads:
                updates.append((root, text))
        return cls(optimizers, updates)


def _optimizer_groups(context: Context, k: int, facts: LineFacts, call: ast.Call) -> list[Group]:
    params = _params_arg(call)
    if params is None:
        return []
    view = context.before(k) if k else context.at(k)
    line = context.line(k)
    parts: list[ast.expr] = [params]
    groups = params.elts if isinstance(params, ast.List | ast.Tuple) else []
    if groups and all(isinstance(e, ast.Dict) for e in groups):  # param groups: one per dict
        parts = [v for d in params.elts for key, v in zip(d.keys, d.values, strict=False)  # type: ignore[attr-defined]
                 if isinstance(key, ast.Constant) and key.value == "params"]
    groups = []
    for part in parts:
        leaves = _leaves(view, tensors_in(view, part, facts.func)) or _leaves(
            context.at(k), tensors_in(context.at(k), part, facts.func))
        if leaves:
            groups.append(Group(line, leaves, step=k))
    return groups


def _update_group(context: Context, k: int, facts: LineFacts, root: ast.expr) -> Group | None:
    """The leaves a hand-written update writes: the receiver, or all a ``for`` over it walks."""
    view = context.before(k)
    name = root.id if isinstance(root, ast.Name) else None
    span = facts.loop
    while name is not None and span is not None:
        loop = context.source.loop(span)
        if loop is None:
            break
        node = loop.node
        if isinstance(node, ast.For | ast.AsyncFor) and name in {n.id for n in ast.walk(node.target)
                                                                 if isinstance(n, ast.Name)}:
            return Group(loop.start, _leaves(view, tensors_in(view, node.iter, facts.func)), by_hand=True)
        span = loop.parent
    tid = resolve(view, root, facts.func)
    return Group(context.line(k), _leaves(view, [tid]) if tid is not None else [], by_hand=True)

"""Would a Python number do where the code now keeps a tensor? The question behind advising
``loss.item()`` rather than ``loss.detach()``.

``.item()`` is the best cut for a number that is only added up, averaged, stored and printed: no
tensor, no graph, no device memory. But the code may go on to treat what it kept as a tensor —
``total.item()`` after the loop, ``torch.stack(self.values)`` in a meter, ``val.detach()`` inside the
helper it is handed to — and a float there fails (``'float' object has no attribute 'item'``). So
follow, in the source, where the value goes: through arithmetic, into the names and attributes it is
assigned to, into the containers it is appended to; a use that needs a tensor (an attribute or method
of it, an index, a call other than a few builtins, a ``return``) answers no. ``.detach()`` is always
right: same type, same values, no graph. Pure ``ast``; nothing runs.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable
from dataclasses import dataclass, field

# Builtins that take a float as well as a 0-d tensor (and return a plain value or print it).
NUMBER_CALLS = frozenset({"float", "int", "round", "abs", "min", "max", "sum", "print", "str", "format",
                          "len", "repr", "bool"})
# Modules whose functions take plain numbers (and lists of them) as well as tensors without a graph.
NUMBER_MODULES = frozenset({"np", "numpy", "math", "statistics", "plt", "random"})
ADDS = frozenset({"append", "appendleft", "extend", "insert", "add"})
ARITHMETIC = (ast.BinOp, ast.UnaryOp, ast.BoolOp, ast.IfExp, ast.FormattedValue, ast.JoinedStr, ast.Compare)


Function = ast.FunctionDef | ast.AsyncFunctionDef


@dataclass
class Routes:
    """Where a value can go in the snippet's source: each node's parent, the snippet's functions and
    the calls of each, the function each name lives in. (Not ``app.diagnostics.flow.Flow``, which
    follows tensors through the trace's graph.)"""

    tree: ast.Module
    parents: dict[ast.AST, ast.AST] = field(default_factory=dict)
    functions: dict[str, list[Function]] = field(default_factory=dict)
    scopes: dict[ast.AST, ast.AST] = field(default_factory=dict)  # a Name -> its function (or the module)
    calls: dict[str, list[ast.Call]] = field(default_factory=dict)  # a function's name -> calls of it
    answers: dict[tuple, bool] = field(default_factory=dict)  # ``takes_number``'s, by its question

    @classmethod
    def of(cls, tree: ast.Module) -> Routes:
        routes = cls(tree)
        stack: list[tuple[ast.AST, ast.AST]] = [(tree, tree)]
        while stack:
            node, scope = stack.pop()
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                routes.functions.setdefault(node.name, []).append(node)
            inner = node if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda) else scope
            for child in ast.iter_child_nodes(node):
                routes.parents[child] = node
                if isinstance(child, ast.Name):
                    routes.scopes[child] = inner
                stack.append((child, inner))
            if isinstance(node, ast.Call):
                func = node.func
                name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
                if name is not None:
                    routes.calls.setdefault(name, []).append(node)
        return routes

    def scope(self, func: str | None) -> ast.AST:
        """The function a local name lives in (the module for None or an unknown one)."""
        found = self.functions.get(func or "", [])
        return found[0] if len(found) == 1 else self.tree

    def callee(self, call: ast.Call, arg: ast.expr) -> tuple[Function, str] | None:
        """The snippet's own function a call hands ``arg`` to, and the parameter that receives it
        (by position, or by name: ``meter.update(val=loss)``)."""
        func = call.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
        found = self.functions.get(name or "", [])
        if len(found) != 1:
            return None
        function = found[0]
        keyword = next((k.arg for k in call.keywords if k.value is arg), None)
        if keyword is not None:
            named = [a.arg for a in function.args.args + function.args.kwonlyargs]
            return (function, keyword) if keyword in named else None  # (into ``**kwargs``: not followed)
        if arg not in call.args:
            return None
        params = [a.arg for a in function.args.posonlyargs + function.args.args]
        is_method = isinstance(func, ast.Attribute) and params[:1] == ["self"]
        position = call.args.index(arg) + (1 if is_method else 0)
        return (function, params[position]) if position < len(params) else None

    def call_taking(self, value: ast.AST) -> ast.Call | None:
        """The call ``value`` is an argument of, by position or by name (``f(x)``, ``f(val=x)``)."""
        parent = self.parents.get(value)
        if isinstance(parent, ast.keyword):
            parent = self.parents.get(parent) if parent.arg is not None else None
            return parent if isinstance(parent, ast.Call) else None
        return parent if isinstance(parent, ast.Call) and value in parent.args else None

    def function_of(self, node: ast.AST) -> Function | None:
        while node in self.parents:
            node = self.parents[node]
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                return node
        return None


LIST_METHODS = frozenset({"append", "appendleft", "extend", "insert", "add", "clear", "pop", "popleft",
                          "copy", "reset", "setdefault", "get", "keys", "values", "items"})


@dataclass
class _Taint:
    """What holds the value: names (per scope) and attributes that are the value, and containers of it."""

    names: set[tuple[ast.AST, str]] = field(default_factory=set)
    attrs: set[str] = field(default_factory=set)
    box_names: set[tuple[ast.AST, str]] = field(default_factory=set)
    box_attrs: set[str] = field(default_factory=set)
    returns: set[ast.AST] = field(default_factory=set)  # functions whose result is the value

    def add(self, routes: Routes, target: ast.expr, box: bool) -> bool:
        """Record where the value went; True when that is new."""
        known: set
        if isinstance(target, ast.Name):
            scope = routes.scopes.get(target, routes.tree)
            known, key = (self.box_names if box else self.names), (scope, target.id)
        elif isinstance(target, ast.Attribute):
            known, key = (self.box_attrs if box else self.attrs), target.attr
        else:
            return False
        if key in known:
            return False
        known.add(key)
        return True


def takes_number(routes: Routes, scope: ast.AST, names: Iterable[str] = (), attrs: Iterable[str] = (),
                 boxes: Iterable[ast.expr] = (), targets: Iterable[ast.expr] = ()) -> bool:
    """Every use of these local names (in ``scope``) and attributes (anywhere), of the items of these
    containers, of what these assignment targets hold, and of what they flow into, works as well with
    a Python number."""
    names, attrs, boxes, targets = list(names), list(attrs), list(boxes), list(targets)
    question = (id(scope), frozenset(names), frozenset(attrs), tuple(map(id, boxes)), tuple(map(id, targets)))
    known = routes.answers.get(question)
    if known is None:  # a loop's findings ask the same question of the same code
        known = routes.answers[question] = _takes_number(routes, scope, names, attrs, boxes, targets)
    return known


def _takes_number(routes: Routes, scope: ast.AST, names: Iterable[str], attrs: Iterable[str],
                  boxes: list[ast.expr], targets: list[ast.expr]) -> bool:
    taint = _Taint({(scope, n) for n in names}, set(attrs))
    for expr, box in [*((b, True) for b in boxes), *((t, False) for t in targets)]:
        stored = _stored(expr)
        if stored is None:
            return False
        taint.add(routes, stored[0], box or stored[1])
    nodes = [n for n in routes.parents if isinstance(n, ast.Name | ast.Attribute)
             and isinstance(n.ctx, ast.Load)]
    changed = True
    while changed:
        changed = False
        uses: list[tuple[ast.AST, bool]] = []
        for node in nodes:
            if isinstance(node, ast.Name):
                key = (routes.scopes.get(node, routes.tree), node.id)
                value, box = key in taint.names, key in taint.box_names
            else:
                up = routes.parents.get(node)
                if isinstance(up, ast.Call) and up.func is node:
                    continue  # ``x.sum()``: a method of something else that has the attribute's name
                value, box = node.attr in taint.attrs, node.attr in taint.box_attrs
            if value or box:
                uses.append((node, box and not value))
        for function in list(taint.returns):  # the function's result, where it is called
            for call in routes.calls.get(function.name, []):  # type: ignore[attr-defined]
                uses.append((call, False))
        for node, box in uses:
            verdict = _use(routes, node, box)
            if verdict is None:
                return False
            for target, is_box in verdict:
                if isinstance(target, ast.FunctionDef | ast.AsyncFunctionDef):
                    if target not in taint.returns:
                        taint.returns.add(target)
                        changed = True
                else:
                    changed |= taint.add(routes, target, is_box)
    return True


def _use(routes: Routes, node: ast.AST, box: bool) -> list[tuple[ast.AST, bool]] | None:
    """Where one use hands the value on (target, is it a container of it), or None: it needs a tensor."""
    parent = routes.parents.get(node)
    if box:  # a container of the value: its items are the value; a few builtins take it whole
        while isinstance(parent, ast.BinOp):  # ``losses + [loss]``: a container again
            node, parent = parent, routes.parents.get(parent)
        if isinstance(parent, ast.Subscript) and parent.value is node:
            if not isinstance(parent.ctx, ast.Load):
                return []  # ``d[k] = v``: written into
            above = routes.parents.get(parent)
            if isinstance(above, ast.Attribute) and above.attr in LIST_METHODS:
                return []  # ``history["loss"].append(...)``: a container inside it
            return _use(routes, parent, False)
        if isinstance(parent, ast.Attribute) and parent.attr in LIST_METHODS:
            return []
        if isinstance(parent, ast.For | ast.comprehension) and parent.iter is node:
            stored = _stored(parent.target)
            return [stored] if stored is not None else None
        call = routes.call_taking(node)
        if call is not None and number_call(call):
            return []
        if isinstance(parent, ast.Expr):
            return []
        if isinstance(parent, ast.Assign | ast.AugAssign) and parent.value is node:
            targets = parent.targets if isinstance(parent, ast.Assign) else [parent.target]
            return [(t, True) for t, _box in map(_stored, targets) if t is not None]  # type: ignore[misc]
        return None
    while isinstance(parent, ARITHMETIC):
        node, parent = parent, routes.parents.get(parent)
    if isinstance(parent, ast.Expr | ast.If | ast.While | ast.Assert):
        return []
    if isinstance(parent, ast.Return):
        function = routes.function_of(parent)
        return [(function, False)] if function is not None else None
    if isinstance(parent, ast.Assign) and parent.value is node:
        return [t for t in map(_stored, parent.targets) if t is not None]  # type: ignore[misc]
    if isinstance(parent, ast.AugAssign):
        target = _stored(parent.target)
        return [target] if parent.value is node and target is not None else []
    call = routes.call_taking(node)
    if call is not None:
        func = call.func
        if number_call(call):
            return []
        if isinstance(func, ast.Attribute) and func.attr in ADDS and node in call.args:
            receiver = _stored(func.value)
            return [(receiver[0], True)] if receiver is not None else None
        found = routes.callee(call, node)  # type: ignore[arg-type]
        if found is not None:  # the snippet's own function: its parameter, inside it
            param = ast.Name(found[1], ast.Load())
            routes.scopes[param] = found[0]
            return [(param, False)]
        return None
    return None


def number_call(call: ast.Call) -> bool:
    """``sum(...)``, ``print(...)``, ``np.mean(...)``, ``plt.plot(...)``: a number does for its arguments."""
    func = call.func
    if isinstance(func, ast.Name):
        return func.id in NUMBER_CALLS
    return isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) \
        and func.value.id in NUMBER_MODULES


def _stored(target: ast.expr) -> tuple[ast.expr, bool] | None:
    """Where an assignment puts the value, and whether that is a container of it: a name, an
    attribute; the container of ``d[k] = v``; the dict of ``d.setdefault(k, [])``."""
    box = False
    while True:
        if isinstance(target, ast.Subscript):
            target, box = target.value, True
        elif isinstance(target, ast.Call) and isinstance(target.func, ast.Attribute) \
                and target.func.attr in ("setdefault", "get"):
            target, box = target.func.value, True
        else:
            break
    return (target, box) if isinstance(target, ast.Name | ast.Attribute) else None


def number_fits(routes: Routes, func: str | None, value: ast.expr, statement: ast.AST | None) -> bool:
    """Would a number do for ``value`` where ``statement`` uses it: handed to the snippet's own
    function (its parameter, inside it), appended to a container (its items) — else no."""
    if statement is None:
        return False
    call = routes.call_taking(value)
    if call is not None:
        if isinstance(call.func, ast.Attribute) and call.func.attr in ADDS and value in call.args:
            return takes_number(routes, routes.scope(func), boxes=[call.func.value])
        found = routes.callee(call, value)
        return found is not None and takes_number(routes, found[0], names=[found[1]])
    return False

"""What the snippet's source says a line does: in-place writes, ``.grad`` reads, ``backward()`` calls,
appends into containers, clones, and the context a line runs in (loop, function, ``no_grad``).

The trace tells *what happened* to tensors; the AST tells *which expression* did it, so a rule can
name ``d.mul_(2)`` rather than "something at line 4". Pure ``ast``; no torch, nothing executed.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field

from app.diagnostics.index import At
from app.snippet import is_loop, nested, parse, span

# Methods that end in "_" but do not write the tensor's elements.
NOT_WRITES = frozenset({"requires_grad_", "retain_grad", "share_memory_", "detach_", "register_hook"})
# Calls that return a result cut from the graph (and what to call them in a message).
CUT_METHODS = {"detach": "detach()", "detach_": "detach_()", "item": ".item()", "tolist": ".tolist()",
               "numpy": ".numpy()"}
# In-place methods whose out-of-place form is not just the name without "_" (None: there is none).
SPECIAL_OUT_OF_PLACE = {
    "zero_": "torch.zeros_like({t})", "fill_": "torch.full_like({t}, {args})", "copy_": "{args}.clone()",
    "normal_": None, "uniform_": None, "bernoulli_": None, "random_": None, "exponential_": None,
    "set_": None, "resize_": None, "index_put_": None, "put_": None,
}
ADD_METHODS = {"append": 0, "insert": 1, "extend": 0, "add": 0}


@dataclass(frozen=True)
class Write:
    """An in-place write: ``receiver.op(...)``, ``receiver += ...`` or ``receiver[...] = ...``."""

    receiver: ast.expr
    op: str
    via: str | None = None  # "detach()" or ".data" when the write goes through such an alias inline
    base: ast.expr | None = None  # the expression the alias was taken from
    node: ast.AST | None = None  # the call or statement that writes

    def out_of_place(self) -> str | None:
        """The same computation written without the in-place write, for a fix."""
        target = ast.unparse(self.receiver)
        if isinstance(self.node, ast.Call) and self.op in SPECIAL_OUT_OF_PLACE:
            args = ", ".join(ast.unparse(a) for a in self.node.args)
            form = SPECIAL_OUT_OF_PLACE[self.op]
            return f"{target} = {form.format(t=target, args=args)}" if form else None
        if isinstance(self.node, ast.Call) and isinstance(self.node.func, ast.Attribute):
            call = ast.Call(ast.Attribute(self.receiver, self.op.removesuffix("_"), ast.Load()),
                            self.node.args, self.node.keywords)
            return f"{target} = {ast.unparse(call)}"
        if isinstance(self.node, ast.AugAssign):
            binary = ast.BinOp(self.receiver, self.node.op, self.node.value)
            return f"{target} = {ast.unparse(binary)}"
        return None


@dataclass(frozen=True)
class Backward:
    kind: str  # "backward" (fills .grad) or "grad" (torch.autograd.grad: returns grads, fills nothing)
    roots: tuple[ast.expr, ...]
    limited: bool = False  # inputs= given: only some leaves receive .grad
    inputs: tuple[ast.expr, ...] = ()  # autograd.grad's inputs: they need requires_grad, not .grad


@dataclass(frozen=True)
class Add:
    """``container.append(value)`` and friends: the value may outlive the loop iteration."""

    container: ast.expr
    value: ast.expr
    op: str


@dataclass(frozen=True)
class CloneAssign:
    target: str
    source: ast.expr
    text: str  # the right-hand side as written
    detached: bool  # the chain also calls detach()


@dataclass
class LineFacts:
    line: int
    end_line: int
    text: str
    func: str | None = None
    loop: tuple[int, int] | None = None
    grad_off: bool = False  # runs under no_grad / inference_mode
    writes: list[Write] = field(default_factory=list)
    grad_reads: list[ast.expr] = field(default_factory=list)
    backwards: list[Backward] = field(default_factory=list)
    adds: list[Add] = field(default_factory=list)
    clone: CloneAssign | None = None
    cuts: list[tuple[str, ast.expr]] = field(default_factory=list)  # (how, expression cut off)
    names: set[str] = field(default_factory=set)
    assigned: set[str] = field(default_factory=set)
    deliberate_cut: bool = False  # `v = <expr>.detach()` (maybe then .clone()...): a chosen boundary
    node: ast.stmt | None = field(default=None, repr=False, compare=False)  # the statement itself
    withs: tuple[ast.With, ...] = field(default=(), repr=False, compare=False)  # the `with` blocks around it


@dataclass(frozen=True)
class Loop:
    """A ``for`` / ``while`` statement: its lines, the function it is in, and where its body starts (a
    fix inserted "at the top of each iteration" goes there)."""

    start: int
    end: int
    func: str | None
    node: ast.For | ast.AsyncFor | ast.While = field(repr=False, compare=False)
    parent: tuple[int, int] | None = None  # the loop around it, in the same function

    @property
    def span(self) -> tuple[int, int]:
        return self.start, self.end

    @property
    def body_line(self) -> int:
        return self.node.body[0].lineno

    @property
    def body_indent(self) -> int:
        """The body's indentation, in characters."""
        return self.node.body[0].col_offset


def calls_method(node: ast.AST, *names: str) -> bool:
    """``node`` is a call of a method with one of these names: ``x.detach()`` for "detach"."""
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in names


def expr_keys(expr: ast.expr) -> list[str]:
    """Variable keys (as the engine spells them) an expression may name: ``x``, ``m.fc.weight``,
    ``losses[0]``, ``model.0.weight`` for ``model[0].weight``."""
    if isinstance(expr, ast.Name):
        return [expr.id]
    if isinstance(expr, ast.Attribute):
        return [f"{key}.{expr.attr}" for key in expr_keys(expr.value)]
    if isinstance(expr, ast.Subscript) and isinstance(expr.slice, ast.Constant):
        index = expr.slice.value
        keys = []
        for key in expr_keys(expr.value):
            keys.append(f"{key}[{index!r}]")
            if isinstance(index, int):
                keys.append(f"{key}.{index}")
        return keys
    return []


def root_name(expr: ast.expr) -> str | None:
    """The variable at the bottom of ``x.detach()[0].T``."""
    while True:
        if isinstance(expr, ast.Name):
            return expr.id
        if isinstance(expr, ast.Attribute | ast.Subscript | ast.Starred):
            expr = expr.value
        elif isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute):
            expr = expr.func.value
        else:
            return None


def resolve(view: At, expr: ast.expr, func: str | None) -> str | None:
    """The tensor id an expression names at a step (function locals first), if it is a plain name."""
    for key in expr_keys(expr):
        if func is not None and (tid := view.variable(f"{func}:{key}")) is not None:
            return tid
        if (tid := view.variable(key)) is not None:
            return tid
    return None


def tensors_named(view: At, names: set[str], func: str | None) -> set[str]:
    """Tensors under any of these names: the variable itself, its items, a module's parameters
    (the function's locals too when ``func`` is given)."""
    found = set()
    for name in names:
        for scope in (None, func) if func is not None else (None,):
            for key in view.keys_headed(scope, name):
                tid = view.variable(key)
                if tid is not None:
                    found.add(tid)
    return found


def _peel_alias(expr: ast.expr) -> tuple[str | None, ast.expr | None]:
    """Walk down a receiver; report the first ``.data`` / ``.detach()`` it goes through."""
    while True:
        if isinstance(expr, ast.Attribute):
            if expr.attr == "data":
                return ".data", expr.value
            expr = expr.value
        elif isinstance(expr, ast.Subscript):
            expr = expr.value
        elif isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute):
            if expr.func.attr == "detach":
                return "detach()", expr.func.value
            expr = expr.func.value
        else:
            return None, None


def _write(receiver: ast.expr, op: str, node: ast.AST) -> Write:
    via, base = _peel_alias(receiver)
    return Write(receiver, op, via, base, node)


def _is_grad_off(item: ast.expr) -> bool:
    """``torch.no_grad()``, ``torch.inference_mode()``, ``torch.set_grad_enabled(False)``, bare or called."""
    call = item if isinstance(item, ast.Call) else None
    func = call.func if call is not None else item
    name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
    mode = argument(call, 0, "mode") if call is not None else None
    if name == "no_grad":
        return True
    if name == "inference_mode":
        return not (mode is not None and _is_const(mode, False))
    if name == "set_grad_enabled":
        return mode is not None and _is_const(mode, False)
    return False


def argument(call: ast.Call, position: int, name: str) -> ast.expr | None:
    """The argument a call passes for a parameter, by position or by name (``set_grad_enabled(False)``,
    ``set_grad_enabled(mode=False)``)."""
    if len(call.args) > position and not any(isinstance(a, ast.Starred) for a in call.args[:position + 1]):
        return call.args[position]
    return next((k.value for k in call.keywords if k.arg == name), None)


def _is_const(node: ast.expr, value: object) -> bool:
    return isinstance(node, ast.Constant) and node.value is value


def _clone_chain(value: ast.expr) -> tuple[ast.expr, bool] | None:
    """``E.clone()``, ``E.clone().detach()``, ``E.detach().clone()``, ``torch.clone(E)`` → (E, detached)."""
    detached = cloned = False
    expr = value
    while isinstance(expr, ast.Call) and not expr.args and not expr.keywords:
        func = expr.func
        if isinstance(func, ast.Attribute) and func.attr in ("clone", "detach"):
            cloned |= func.attr == "clone"
            detached |= func.attr == "detach"
            expr = func.value
        else:
            break
    if (isinstance(expr, ast.Call) and len(expr.args) == 1 and not expr.keywords
            and isinstance(expr.func, ast.Attribute) and expr.func.attr == "clone"
            and isinstance(expr.func.value, ast.Name) and expr.func.value.id == "torch"):
        return expr.args[0], detached
    return (expr, detached) if cloned else None


# Calls that may follow a detach() in a statement that only names the cut-off value.
PLAIN_AFTER_CUT = frozenset({"clone", "requires_grad_", "cpu", "to", "contiguous", "float", "double", "numpy",
                             "item", "tolist"})


def _is_deliberate_cut(value: ast.expr) -> bool:
    """``feat = early(x).detach()``: the statement exists to name a value outside the graph."""
    expr, cut = value, False
    while True:
        if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute):
            method = expr.func.attr
            if method in ("detach", "detach_"):
                return True
            if method not in PLAIN_AFTER_CUT:
                return False
            expr = expr.func.value
        elif isinstance(expr, ast.Attribute) and expr.attr == "data":
            return True
        else:
            return cut


def _own_nodes(stmt: ast.stmt) -> list[ast.AST]:
    """The expressions a statement evaluates on its own line(s), not those of nested statements."""
    if isinstance(stmt, ast.For | ast.AsyncFor):
        return [stmt.target, stmt.iter]
    if isinstance(stmt, ast.While | ast.If):
        return [stmt.test]
    if isinstance(stmt, ast.With | ast.AsyncWith):
        return [item.context_expr for item in stmt.items]
    if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef | ast.Try):
        return []
    return [stmt]


def _header_end(stmt: ast.stmt) -> int:
    body = getattr(stmt, "body", None)
    if isinstance(body, list) and body and _own_nodes(stmt) != [stmt]:
        return max(stmt.lineno, body[0].lineno - 1)
    return stmt.end_lineno or stmt.lineno


def _facts(
    stmt: ast.stmt, source: str, func: str | None, loop: tuple[int, int] | None, grad_off: bool,
    withs: tuple[ast.With, ...] = (),
) -> LineFacts:
    facts = LineFacts(line=stmt.lineno, end_line=_header_end(stmt),
                      text=(ast.get_source_segment(source, stmt) or "").split("\n")[0],
                      func=func, loop=loop, grad_off=grad_off, node=stmt, withs=withs)
    if isinstance(stmt, ast.AugAssign):
        facts.writes.append(_write(stmt.target, type(stmt.op).__name__, stmt))
        if isinstance(stmt.value, ast.List | ast.Tuple | ast.Set):  # (``s |= {x}``: a set's too)
            facts.adds.extend(Add(stmt.target, item, "+=") for item in stmt.value.elts)
    if isinstance(stmt, ast.Assign):
        grown = stmt.value  # ``xs = xs + [x]``: ``xs += [x]`` spelled out; ``s = s | {x}``, a set's
        if isinstance(grown, ast.BinOp) and isinstance(grown.op, ast.Add | ast.BitOr) and \
                isinstance(grown.right, ast.List | ast.Tuple | ast.Set) and len(stmt.targets) == 1 and \
                ast.unparse(grown.left) == ast.unparse(stmt.targets[0]):
            facts.adds.extend(Add(stmt.targets[0], item, "+=") for item in grown.right.elts)
        for target in stmt.targets:
            if isinstance(target, ast.Subscript):
                facts.writes.append(_write(target.value, "[]=", stmt))
                facts.adds.append(Add(target.value, stmt.value, "[]="))
            for name in ast.walk(target):
                if isinstance(name, ast.Name):
                    facts.assigned.add(name.id)
        facts.deliberate_cut = _is_deliberate_cut(stmt.value)
        chain = _clone_chain(stmt.value)
        if chain is not None and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
            facts.clone = CloneAssign(stmt.targets[0].id, chain[0],
                                      ast.get_source_segment(source, stmt.value) or "", chain[1])
    if isinstance(stmt, ast.Return) and stmt.value is not None:
        facts.deliberate_cut = _is_deliberate_cut(stmt.value)
    for top in _own_nodes(stmt):
        for node in ast.walk(top):
            _visit(node, facts)
    return facts


def _visit(node: ast.AST, facts: LineFacts) -> None:
    if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
        facts.names.add(node.id)
    elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load):
        if node.attr == "grad":
            facts.grad_reads.append(node.value)
        elif node.attr == "data":
            facts.cuts.append((".data", node.value))
    elif isinstance(node, ast.Call):
        func = node.func
        if isinstance(func, ast.Attribute):
            method = func.attr
            if method.endswith("_") and not method.startswith("_") and method not in NOT_WRITES:
                facts.writes.append(_write(func.value, method, node))
            if method in CUT_METHODS:
                facts.cuts.append((CUT_METHODS[method], func.value))
            if method == "backward":
                is_module_call = isinstance(func.value, ast.Attribute) and func.value.attr == "autograd"
                # ``torch.autograd.backward(loss)`` or ``(tensors=loss)``
                root = argument(node, 0, "tensors") if is_module_call else func.value
                roots = (root,) if root is not None else ()
                facts.backwards.append(Backward("backward", roots, _has_inputs(node)))
            elif method == "grad" and isinstance(func.value, ast.Attribute) and func.value.attr == "autograd":
                given = argument(node, 1, "inputs")
                inputs = [given] if given is not None else []
                spread = [e for i in inputs for e in (i.elts if isinstance(i, ast.List | ast.Tuple) else [i])]
                output = argument(node, 0, "outputs")
                outputs = (output,) if output is not None else ()
                facts.backwards.append(Backward("grad", outputs, inputs=tuple(spread)))
            index = ADD_METHODS.get(method)
            if index is not None and len(node.args) > index:
                value = node.args[index]
                spread = method == "extend" and isinstance(value, ast.List | ast.Tuple)
                items = value.elts if spread else [value]
                facts.adds.extend(Add(func.value, item, method) for item in items)


def _has_inputs(call: ast.Call) -> bool:
    return any(k.arg == "inputs" for k in call.keywords)


def _one_line_pair(first: LineFacts, later: LineFacts) -> bool:
    """``a; b`` on one line: two simple statements whose one step (the engine steps by line) runs both."""
    simple = not hasattr(first.node, "body") and not hasattr(later.node, "body")
    return simple and first.line == first.end_line == later.line == later.end_line and \
        (first.func, first.loop, first.grad_off) == (later.func, later.loop, later.grad_off)


def _merge(into: LineFacts, later: LineFacts) -> None:
    """What the later statement of the line does, added to the line's facts (its node stays the first's:
    a fix that rewrites a statement rewrites the first one only)."""
    for name in ("writes", "grad_reads", "backwards", "adds", "cuts"):
        getattr(into, name).extend(getattr(later, name))
    into.names |= later.names
    into.assigned |= later.assigned


class SourceFacts:
    """Line → facts of the statement that runs there (a compound statement's header line included)."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.lines = source.splitlines()
        self.by_line: dict[int, LineFacts] = {}
        self.loop_info: dict[tuple[int, int], Loop] = {}
        tree = self.tree = parse(source)
        if tree is not None:
            self._walk(tree.body, source, None, None, False, ())

    def _walk(self, body: list[ast.stmt], source: str, func: str | None, loop: tuple[int, int] | None,
              grad_off: bool, withs: tuple[ast.With, ...]) -> None:
        for stmt in body:
            own_loop = loop
            if is_loop(stmt):
                own_loop = span(stmt)
                self.loop_info[own_loop] = Loop(own_loop[0], own_loop[1], func, stmt, loop)
            facts = _facts(stmt, source, func, own_loop, grad_off, withs)
            for line in range(facts.line, facts.end_line + 1):
                first = self.by_line.setdefault(line, facts)
                if first is not facts and _one_line_pair(first, facts):
                    _merge(first, facts)
            inner_func, inner_loop, inner_off, inner_withs = func, own_loop, grad_off, withs
            if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef):
                inner_func, inner_loop, inner_withs = stmt.name, None, ()
                inner_off = grad_off or any(_is_grad_off(d) for d in stmt.decorator_list)
            if isinstance(stmt, ast.With | ast.AsyncWith):
                inner_off = grad_off or any(_is_grad_off(item.context_expr) for item in stmt.items)
                inner_withs = (*withs, stmt)  # type: ignore[assignment]
            for inner in nested(stmt):
                self._walk(inner, source, inner_func, inner_loop, inner_off, inner_withs)

    def loop(self, span: tuple[int, int] | None) -> Loop | None:
        return self.loop_info.get(span) if span is not None else None

    def at(self, line: int) -> LineFacts | None:
        return self.by_line.get(line)


MAX_QUOTE = 160  # messages quote code; a huge expression must not blow the schema's text bounds


def shorten(code: str) -> str:
    return code if len(code) <= MAX_QUOTE else code[: MAX_QUOTE - 1] + "…"


def text(expr: ast.expr) -> str:
    return shorten(ast.unparse(expr))


def method_text(expr: ast.expr, how: str) -> str:
    """``x.detach()``, ``(x * 3).detach()``, ``x.data`` as written in a message."""
    receiver = text(expr)
    if not isinstance(expr, ast.Name | ast.Attribute | ast.Call | ast.Subscript | ast.Constant):
        receiver = f"({receiver})"
    return f"{receiver}{'' if how.startswith('.') else '.'}{how}"

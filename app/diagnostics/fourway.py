"""The article's four-way table, filled from the run: each tensor a line made with ``clone()``,
``detach()``, ``clone().detach()`` or ``detach().clone()`` — whose memory it shares (if any) and
whether it tracks gradients — as the trace shows it right after that line ran. Pure; the words are
the view's (``app.render.findings``).
"""

from __future__ import annotations

import ast

from app.diagnosis import Made
from app.diagnostics.context import Context
from app.diagnostics.source import resolve, shorten, text

FORMS = ("clone()", "detach()", "clone().detach()", "detach().clone()")
MAX_ROWS = 12


def _form(value: ast.expr) -> tuple[str, ast.expr] | None:
    """(form, the expression it applies to) for ``E.clone()``, ``E.detach()``, their two chains, and
    ``torch.clone(E)``."""
    calls: list[str] = []
    node = value
    while (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and not node.args
           and not node.keywords and node.func.attr in ("clone", "detach")):
        calls.append(node.func.attr)
        node = node.func.value
    if not calls and isinstance(value, ast.Call) and ast.unparse(value.func) == "torch.clone" and value.args:
        return "clone()", value.args[0]
    form = ".".join(f"{c}()" for c in reversed(calls))
    return (form, node) if form in FORMS else None


def made(context: Context) -> list[Made]:
    """The table's rows: each line that made a tensor one of the four ways, the first time it ran."""
    rows: list[Made] = []
    done: set[int] = set()
    forms: dict[int, tuple[str, ast.expr] | None] = {}  # per line: its statement read once, not per step
    for k in range(len(context)):
        facts = context.facts(k)
        stmt = facts.node if facts is not None else None
        if (facts is None or not isinstance(stmt, ast.Assign) or facts.line in done or len(stmt.targets) != 1
                or not isinstance(stmt.targets[0], ast.Name)):
            continue
        if facts.line not in forms:
            forms[facts.line] = _form(stmt.value)
        found = forms[facts.line]
        if found is None:
            continue
        form, source = found
        name = stmt.targets[0].id
        view, before = context.at(k), context.before(k)
        tid = view.variable(f"{facts.func}:{name}" if facts.func else name)
        fact = view.tensor(tid)
        if tid is None or fact is None:
            continue
        done.add(facts.line)
        shares = None
        if fact.storage is not None:
            origin = resolve(before, source, facts.func) or resolve(view, source, facts.func)
            origin_fact = view.tensor(origin) if origin is not None else None
            if origin is not None and origin_fact is not None and origin_fact.storage == fact.storage:
                shares = shorten(text(source))
            else:
                others = [t for t in view.users(fact.storage) if t != tid and view.names(t)]
                shares = sorted(view.names(others[0]), key=len)[0] if others else None
        node = view.node(fact.grad_fn)
        rows.append(Made(name, form, shorten(text(source)), facts.line, k, tid, shares,
                         fact.requires_grad, node.name if node is not None else None))
        if len(rows) >= MAX_ROWS:
            break
    return rows

"""Tensors made under ``torch.inference_mode()`` and then used where autograd needs them.

An inference tensor has no version counter and no autograd metadata, so torch refuses two things
outside inference mode: saving it for backward (an op that records a graph and needs its input
later: ``x @ w``, ``model(x)``, ``F.mse_loss(out, x)``; ``x + w`` saves nothing and passes) and
changing it in place. The run stops with torch's error at the line that *used* it; the cause is the
line that *made* it, often far above. The trace says which tensor it is (``is_inference``) and
where it first appeared; the source says which ``with torch.inference_mode():`` block (or
decorator) was around that line, and the fix is torch's own: ``torch.no_grad()`` there, which records
nothing either but makes normal tensors, or a ``.clone()`` taken outside inference mode.
"""

from __future__ import annotations

import ast

from app.diagnostics.context import Context
from app.diagnostics.index import At
from app.diagnostics.patch import replace_many
from app.diagnostics.source import LineFacts, argument, tensors_named
from app.diagnostics.trace import label, listing
from app.i18n import gettext as _
from app.schema import Diagnostic, Patch, RunError

RULE = "inference-tensor-in-autograd"
SAVED_MARK = "Inference tensors cannot be saved for backward"
INPLACE_MARK = "Inplace update to inference tensor outside InferenceMode"
REQUIRES_MARK = "Setting requires_grad=True on inference tensor outside InferenceMode"
MARKS = (SAVED_MARK, INPLACE_MARK, REQUIRES_MARK)
MAX_NAMED = 3
LOOK_AHEAD = 64  # steps after a tensor appears in which its block is looked for (a helper's lines)


def is_inference_error(error: RunError) -> bool:
    return any(mark in error.message for mark in MARKS)


def _is_inference_mode(expr: ast.expr) -> bool:
    """``torch.inference_mode()`` / ``inference_mode()`` / bare, and not ``inference_mode(False)``."""
    call = expr if isinstance(expr, ast.Call) else None
    func = call.func if call is not None else expr
    name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
    if name != "inference_mode":
        return False
    mode = argument(call, 0, "mode") if call is not None else None  # ``inference_mode(mode=False)``
    return not (isinstance(mode, ast.Constant) and mode.value is False)


def _blocks(tree: ast.AST | None) -> list[tuple[ast.AST, ast.expr]]:
    """Every ``with`` item and decorator that turns inference mode on: (the statement, the item)."""
    found: list[tuple[ast.AST, ast.expr]] = []
    for node in ast.walk(tree) if tree is not None else ():
        if isinstance(node, ast.With | ast.AsyncWith):
            found += [(node, i.context_expr) for i in node.items if _is_inference_mode(i.context_expr)]
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            found += [(node, d) for d in node.decorator_list if _is_inference_mode(d)]
    return found


def _block_around(blocks: list[tuple[ast.AST, ast.expr]], line: int) -> tuple[ast.AST, ast.expr] | None:
    """The innermost inference block whose lines hold ``line``."""
    inside = [(stmt, item) for stmt, item in blocks
              if stmt.lineno <= line <= (stmt.end_lineno or stmt.lineno)]  # type: ignore[attr-defined]
    return max(inside, key=lambda b: b[0].lineno, default=None)  # type: ignore[attr-defined]


def _made(context: Context, tid: str, blocks: list[tuple[ast.AST, ast.expr]]) -> tuple[int, ast.expr | None]:
    """(the line that made the tensor, the inference block around it): the line it first appeared at,
    else the first line after it, while it is new, that sits in such a block (a helper's line made it
    and the caller's ``with`` line named it)."""
    first = context.first_seen(tid)
    if first is None:
        return 0, None
    for k in range(first, min(first + LOOK_AHEAD, len(context))):
        block = _block_around(blocks, context.line(k)) or _called(blocks, context.facts(k))
        if block is not None:
            return context.line(first), block[1]
    return context.line(first), None


Block = tuple[ast.AST, ast.expr]  # (a ``with`` statement or a function, its inference_mode item)


def _origin(context: Context, view: At, tid: str) -> str:
    """The inference tensor first made on the same memory: ``y = x.view(...)`` outside inference mode
    is an inference tensor too (torch keeps no ``_base`` for it), made where ``x`` was."""
    fact = view.tensor(tid)
    if fact is None or fact.storage is None:
        return tid
    alike = [t for t in view.users(fact.storage) if (f := view.tensor(t)) is not None and f.is_inference]
    return min(alike, key=lambda t: context.first_seen(t) or 0, default=tid)


def _called(blocks: list[Block], facts: LineFacts | None) -> Block | None:
    """A function decorated with ``@torch.inference_mode()`` that the line calls by name."""
    if facts is None:
        return None
    return next(((f, d) for f, d in blocks if isinstance(f, ast.FunctionDef | ast.AsyncFunctionDef)
                 and f.name in facts.names), None)


def _culprits(context: Context, view: At, line: int | None) -> list[str]:
    """The inference tensors the failing line names (else every named one: a helper uses it)."""
    facts = context.source.at(line) if line is not None else None
    named = tensors_named(view, facts.names, facts.func) if facts is not None else set()
    mine = [t for t in named if (f := view.tensor(t)) is not None and f.is_inference]
    if not mine:
        named = {t for keys in context.index.headed.values() for key in keys if (t := view.variable(key))}
        mine = [t for t in named if (f := view.tensor(t)) is not None and f.is_inference]
    return sorted(mine, key=view.variable_place)


def _patch(context: Context, item: ast.expr | None) -> list[Patch]:
    """The inference block's ``torch.inference_mode()`` as ``torch.no_grad()``."""
    if item is None:
        return []
    lines = context.source.lines
    new = "torch.no_grad()"
    return [replace_many(lines, item, [(item, new)])]  # type: ignore[arg-type]  # the item's own lines


def inference_error(context: Context, step: int | None, error: RunError) -> Diagnostic:
    line = error.line
    view = context.at(step) if step is not None else None
    tensors = _culprits(context, view, line) if view is not None else []
    blocks = _blocks(context.source.tree)
    made_line, item, origin = 0, None, None
    for tid in tensors:
        origin = _origin(context, view, tid)  # type: ignore[arg-type]
        made_line, item = _made(context, origin, blocks)
        if made_line:
            origin = origin if origin != tid else None
            break
    names = listing(label(view, t) for t in tensors[:MAX_NAMED]) if view is not None and tensors else \
        _("a tensor")
    inplace = INPLACE_MARK in error.message
    fields = {"line": line, "code": context.line_text(line), "names": names, "made": made_line,
              "made_code": context.line_text(made_line),
              "block": item.lineno if item is not None else made_line,
              "torch": error.message.split(".")[0]}
    fields["origin"] = label(view, origin) if view is not None and origin is not None else ""
    where = _(
        " It shares the memory of {origin}, which was made at line {made} (`{made_code}`), under "
        "`torch.inference_mode()` (line {block})."
    ).format(**fields) if made_line and item is not None and origin is not None else _(
        " It was made at line {made} (`{made_code}`), under `torch.inference_mode()` (line {block})."
    ).format(**fields) if made_line and item is not None else _(
        " It was made at line {made} (`{made_code}`), in inference mode."
    ).format(**fields) if made_line else ""
    fields["where"] = where
    if REQUIRES_MARK in error.message:
        message = _(
            "Line {line} (`{code}`) asks {names} to require grad, outside inference mode.{where} A tensor "
            "made in inference mode can never take part in autograd: torch refuses (\"{torch}\")."
        ).format(**fields)
    elif inplace:
        message = _(
            "Line {line} (`{code}`) changes {names} in place, outside inference mode.{where} A tensor made "
            "in inference mode keeps no version counter, so autograd could never tell that it changed: "
            "torch refuses (\"{torch}\")."
        ).format(**fields)
    else:
        message = _(
            "Line {line} (`{code}`) uses {names} in a computation autograd records, and that computation "
            "saves it for backward.{where} A tensor made in inference mode keeps no version counter and "
            "no autograd metadata, so autograd cannot save it: torch refuses (\"{torch}\")."
        ).format(**fields)
    if item is not None:
        fix = _(
            "Make it where autograd can use it: `torch.no_grad()` instead of `torch.inference_mode()` "
            "at line {block} records no graph either, but makes normal tensors. Or keep inference mode and "
            "use a normal copy outside it: `.clone()` of it before line {line}."
        ).format(**fields)
    else:
        fix = _(
            "Make it under `torch.no_grad()` instead of `torch.inference_mode()`: that records no graph "
            "either, but makes normal tensors. Or use a normal copy outside inference mode: `.clone()` of "
            "it before line {line}."
        ).format(**fields)
    return Diagnostic(
        rule=RULE, severity="error",
        title=(_("{names} was made in inference mode and cannot be changed in place outside it") if inplace
               else _("{names} was made in inference mode and cannot be used by autograd")).format(**fields),
        message=message, fix=fix, step=step, line=line, tensors=tensors,
        lines=[made_line] if made_line and made_line != line else [], patch=_patch(context, item),
    )

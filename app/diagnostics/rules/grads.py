"""Gradients that are not where the learner looks for them.

* ``grad-stays-none``: after ``backward()`` a leaf that requires grad still has ``.grad is None``:
  backward never reached it. Why: a ``detach()`` (or ``.data``, ``.item()``) cut the path, it was
  used under ``no_grad``, or the loss simply does not depend on it.
* ``nonleaf-grad-read``: ``.grad`` of a non-leaf is always None unless ``retain_grad()`` was called.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass

from app.diagnostics.context import Context
from app.diagnostics.source import method_text, resolve, tensors_named, text
from app.diagnostics.trace import label, leaves_reached
from app.schema import Diagnostic, Step

NONE_RULE = "grad-stays-none"
NONLEAF_RULE = "nonleaf-grad-read"
CUT_RULE = "graph-cut-by-detach"


@dataclass(frozen=True)
class Cause:
    kind: str  # "cut", "no_grad", "unused"
    line: int | None = None
    how: str = ""
    expr: str = ""
    deliberate: bool = False  # the cut is a statement of its own: `feat = early(x).detach()`
    call: str = ""  # the cutting expression as written: `pred.detach()`


def _depends_on(step: Step, tids: set[str], leaf: str) -> bool:
    return any(tid == leaf or leaf in leaves_reached(step, tid) for tid in tids)


def _cause(context: Context, leaf: str, backward_step: int) -> Cause:
    """The latest line before the backward that cut the leaf out of the graph."""
    cut: Cause | None = None
    no_grad: Cause | None = None
    for index in range(backward_step):
        facts = context.facts(index)
        if facts is None:
            continue
        before = context.before(index)
        for how, expr in facts.cuts:
            tid = resolve(before, expr, facts.func) or resolve(context.steps[index], expr, facts.func)
            names = {n.id for n in ast.walk(expr) if isinstance(n, ast.Name)}
            tids = {tid} if tid is not None else tensors_named(before, names, facts.func)
            if _depends_on(before, tids, leaf) or _depends_on(context.steps[index], tids, leaf):
                cut = Cause("cut", context.steps[index].line, how, text(expr), facts.deliberate_cut,
                            method_text(expr, how))
        updates_leaf = any(resolve(before, w.receiver, facts.func) == leaf for w in facts.writes)
        if facts.grad_off and not updates_leaf:
            tids = tensors_named(before, facts.names, facts.func)
            if _depends_on(before, tids, leaf):
                no_grad = Cause("no_grad", context.steps[index].line)
    return cut or no_grad or Cause("unused")


def grad_stays_none(context: Context) -> Iterator[Diagnostic]:
    steps = context.steps
    reported: set[str] = set()
    for index in range(1, len(steps)):
        facts = context.facts(index)
        if facts is None or not any(b.kind == "backward" and not b.limited for b in facts.backwards):
            continue
        before, step = steps[index - 1], steps[index]
        missing = [
            tid for key, tid in step.variables.items()
            if tid not in reported and tid in before.tensors
            and step.tensors[tid].is_leaf and step.tensors[tid].requires_grad
            and step.tensors[tid].grad is None and _never_gets_grad(context, tid, index)
        ]
        higher_order, grad_inputs = _higher_order(context, index) if missing else (False, set())
        groups: dict[Cause, list[str]] = {}
        for tid in dict.fromkeys(missing):
            reported.add(tid)
            cause = _cause(context, tid, index)
            if tid in grad_inputs or (higher_order and cause.kind == "unused"):
                continue
            groups.setdefault(cause, []).append(tid)
        for cause, tids in groups.items():
            yield _none_diagnostic(context, index, cause, tids, facts.backwards[0].roots)


def _higher_order(context: Context, upto: int) -> tuple[bool, set[str]]:
    """(an autograd.grad ran before ``upto``, the tensors it differentiated with respect to).

    Those inputs need requires_grad for autograd.grad itself, and in gradient-penalty code some
    parameters legitimately drop out of the differentiated graph (a bias has a constant derivative).
    """
    ran, inputs = False, set()
    for index in range(upto):
        facts = context.facts(index)
        for backward in facts.backwards if facts is not None else []:
            if backward.kind != "grad":
                continue
            ran = True
            for expr in backward.inputs:
                tid = context.resolve_before(index, expr, facts.func)  # type: ignore[union-attr]
                if tid is not None:
                    inputs.add(tid)
    return ran, inputs


def _never_gets_grad(context: Context, tid: str, start: int) -> bool:
    for step in context.steps[start:]:
        fact = step.tensors.get(tid)
        if fact is not None and fact.grad is not None:
            return False
    return True


def _none_diagnostic(context: Context, index: int, cause: Cause, tids: list[str], roots: tuple) -> Diagnostic:
    step = context.steps[index]
    names = ", ".join(label(step, tid) for tid in tids)
    plural = len(tids) > 1
    root = f"`{text(roots[0])}`" if roots else "the loss"
    subject = f"{names} {'require' if plural else 'requires'} grad, but {'their' if plural else 'its'} " \
              f"`.grad` is still None after backward() at line {step.line}: backward never reached " \
              f"{'them' if plural else 'it'}."
    severity = "warning"
    call = cause.call
    code = f"line {cause.line} (`{context.line_text(cause.line)}`)"
    if cause.kind == "cut" and cause.deliberate:
        severity = "info"
        new_leaf = "requires_grad_" in context.line_text(cause.line)
        why = (
            f" {code[0].upper()}{code[1:]} stops {'them' if plural else 'it'} on purpose: `{call}` shares "
            f"the memory but not the graph"
            + (", and `requires_grad_()` makes it a new leaf: gradients stop at the new leaf."
               if new_leaf else ", so gradients stop there.")
        )
        fix = (
            f"Nothing to fix if that is what you want (freezing, or a new graph that starts there). To train "
            f"{names}, use `{cause.expr}` without {cause.how}."
        )
    elif cause.kind == "cut":
        why = (
            f" The path was cut at {code}: `{call}` returns a tensor with no grad_fn, so everything "
            f"computed from it is invisible to autograd."
        )
        fix = (
            f"Use `{cause.expr}` itself where the loss needs gradients; keep `{cause.how}` for values you "
            f"only log or store."
        )
    elif cause.kind == "no_grad":
        why = (
            f" It was used at {code} inside a `torch.no_grad()` (or inference_mode) block, where no graph "
            f"is recorded, so the result does not lead back to it."
        )
        fix = "Compute the values the loss depends on outside `torch.no_grad()`; keep no_grad for " \
              "evaluation and for the parameter update itself."
    else:
        why = f" The graph of {root} does not use {'them' if plural else 'it'} at all: nothing the loss " \
              f"was computed from depends on {names}."
        fix = "Use it in the computation of the loss, or, if it is not meant to be trained, create it " \
              "without `requires_grad=True` (or call `.requires_grad_(False)`)."
    return Diagnostic(
        rule=NONE_RULE, severity=severity,  # type: ignore[arg-type]
        title=f"{names}: .grad stays None after backward()",
        message=subject + why, fix=fix, step=index, line=step.line, tensors=tids,
        lines=[cause.line] if cause.line is not None else [],
    )


def hidden_cuts(context: Context) -> Iterator[Diagnostic]:
    """A function the snippet defines returns a result cut from the graph: a detach() inside it.

    At the call site nothing shows it: ``loss = my_loss(pred, y)`` reads like a loss, but has no
    grad_fn. A detach() written in the statement itself is visible and usually deliberate: the
    ``grad-stays-none`` rule explains those once backward() runs.
    """
    steps = context.steps
    for index, step in enumerate(steps):
        facts = context.facts(index)
        if facts is None or facts.grad_off or not facts.assigned:
            continue
        caller = facts.func
        start = index - 1
        while start >= 0 and (context.facts(start) is None or context.facts(start).func != caller):  # type: ignore[union-attr]
            start -= 1
        inside = [
            j for j in range(start + 1, index) if (f := context.facts(j)) is not None and f.func != caller
        ]
        cuts = [
            (j, how, expr) for j in inside for how, expr in context.facts(j).cuts  # type: ignore[union-attr]
            if how in ("detach()", ".data", "detach_()") and not context.facts(j).deliberate_cut  # type: ignore[union-attr]
        ]
        if not cuts:
            continue
        before = context.before(start + 1) if start >= 0 else context.before(0)
        inputs = {t for t in tensors_named(before, facts.names, caller) if before.tensors[t].requires_grad}
        if not inputs:
            continue
        for name in sorted(facts.assigned):
            key = f"{caller}:{name}" if caller else name
            tid = step.variables.get(key)
            if tid is None or before.variables.get(key) == tid or step.tensors[tid].requires_grad:
                continue
            yield _hidden_cut(context, index, tid, name, cuts[-1], inputs, before)


def _hidden_cut(
    context: Context, index: int, tid: str, name: str, cut: tuple[int, str, ast.expr], inputs: set[str],
    before: Step,
) -> Diagnostic:
    step = context.steps[index]
    j, how, expr = cut
    inner = context.facts(j)
    func = inner.func if inner is not None else None
    cut_line = context.steps[j].line
    leaves = sorted({leaf for t in inputs for leaf in leaves_reached(before, t)})
    leaf_names = ", ".join(label(before, leaf) for leaf in leaves) or "the tensors that require grad"
    source = ", ".join(sorted(label(before, t) for t in inputs))
    call = method_text(expr, how)
    return Diagnostic(
        rule=CUT_RULE, severity="warning",
        title=f"`{name}` has no grad_fn: a {how} inside `{func}` cut the graph",
        message=(
            f"Line {step.line} (`{context.line_text(step.line)}`) computes `{name}` from {source}, which "
            f"requires grad, yet `{name}` has no grad_fn: inside `{func}`, line {cut_line} "
            f"(`{context.line_text(cut_line)}`) calls `{call}`, which returns the same values without the "
            f"graph. There is no error now, but backward() on `{name}` would fail (there is nothing to go "
            f"back through), and no gradient can reach {leaf_names}."
        ),
        fix=(
            f"Remove the {how} in `{func}` (use `{text(expr)}` directly) so that `{name}` stays connected to "
            f"the graph. Detach only values you log, or targets that must stay fixed."
        ),
        step=index, line=step.line, tensors=[tid, *sorted(inputs)], lines=[cut_line],
    )


def nonleaf_grad_reads(context: Context) -> Iterator[Diagnostic]:
    reported: set[int] = set()
    for index, step in enumerate(context.steps):
        facts = context.facts(index)
        if facts is None or not facts.grad_reads or step.line in reported:
            continue
        before = context.before(index)
        for expr in facts.grad_reads:
            tid = resolve(before, expr, facts.func) or resolve(step, expr, facts.func)
            fact = before.tensors.get(tid) or step.tensors.get(tid)  # type: ignore[arg-type]
            if tid is None or fact is None or fact.is_leaf or fact.retains_grad:
                continue
            reported.add(step.line)
            name = text(expr)
            created = context.first_seen(tid)
            created_line = context.steps[created].line if created is not None else None
            where = f" right after line {created_line} creates it" if created_line is not None else ""
            yield Diagnostic(
                rule=NONLEAF_RULE, severity="warning",
                title=f"`{name}.grad` is always None: `{name}` is not a leaf",
                message=(
                    f"Line {step.line} reads `{name}.grad`. `{name}` was computed by an operation (its "
                    f"grad_fn is {_grad_fn_name(before if tid in before.tensors else step, tid)}), so it is "
                    f"not a leaf, and backward() only fills `.grad` of leaf tensors; the gradients flowing "
                    f"through intermediate results are freed as soon as they are used. `{name}.grad` is None "
                    f"here and stays None."
                ),
                fix=(
                    f"Call `{name}.retain_grad()`{where}, before backward(), to keep its gradient; or ask "
                    f"for it directly: `torch.autograd.grad(loss, {name})`."
                ),
                step=index, line=step.line, tensors=[tid],
                lines=[created_line] if created_line is not None else [],
            )
            break


def _grad_fn_name(step: Step, tid: str) -> str:
    node = step.tensors[tid].grad_fn
    if node is None or node not in step.nodes:
        return "set"
    return f"`{step.nodes[node].name}`"


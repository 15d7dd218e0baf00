"""Gradients that are not where the learner looks for them.

* ``grad-stays-none``: after ``backward()`` a leaf that requires grad still has ``.grad is None``:
  backward never reached it. Why: a ``detach()`` (or ``.data``, ``.item()``) cut the path, it was
  used under ``no_grad``, or the loss simply does not depend on it.
* ``nonleaf-grad-read``: ``.grad`` of a non-leaf is always None unless ``retain_grad()`` was called.
"""

from __future__ import annotations

import ast
import math
from bisect import bisect_left, bisect_right
from collections.abc import Iterator
from dataclasses import dataclass

from app.diagnostics.context import Context
from app.diagnostics.index import At
from app.diagnostics.source import method_text, resolve, tensors_named, text
from app.diagnostics.trace import label, leaves_reached, listing
from app.i18n import gettext as _
from app.i18n import ngettext
from app.schema import Diagnostic

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


class Causes:
    """Where a leaf was cut out of the graph before a backward(): the latest line that detached a
    value depending on it, else the latest ``no_grad`` line that used it.

    What a line's expressions depend on (the tensors they name and the leaves those reach) is worked
    out once per line run and shared by every leaf asked about; a leaf looks only at the lines run
    while it existed, latest first, and stops at the first that explains it."""

    def __init__(self, context: Context) -> None:
        self.context = context
        self.cut_steps: list[int] = []
        self.off_steps: list[int] = []
        for index in range(len(context)):
            facts = context.facts(index)
            if facts is not None and facts.cuts:
                self.cut_steps.append(index)
            if facts is not None and facts.grad_off:
                self.off_steps.append(index)
        self._cuts: dict[int, list[set[str]]] = {}
        self._used: dict[int, set[str]] = {}

    def _depends(self, views: tuple[At, ...], tids: set[str]) -> set[str]:
        """The tensors and every leaf they reach, at each of the views."""
        found = set(tids)
        for view in views:
            for tid in tids:
                found |= leaves_reached(view, tid)
        return found

    def _cut_sets(self, index: int) -> list[set[str]]:
        """Per cut of step ``index``'s line (in order): what the cut-off expression depends on."""
        if index not in self._cuts:
            context = self.context
            facts = context.facts(index)
            before, after = context.before(index), context.at(index)
            sets = []
            for _how, expr in facts.cuts:  # type: ignore[union-attr]
                tid = resolve(before, expr, facts.func) or resolve(after, expr, facts.func)  # type: ignore[union-attr]
                names = {n.id for n in ast.walk(expr) if isinstance(n, ast.Name)}
                tids = {tid} if tid is not None else tensors_named(before, names, facts.func)  # type: ignore[union-attr]
                sets.append(self._depends((before, after), tids))
            self._cuts[index] = sets
        return self._cuts[index]

    def _used_set(self, index: int) -> set[str]:
        if index not in self._used:
            facts = self.context.facts(index)
            before = self.context.before(index)
            tids = tensors_named(before, facts.names, facts.func)  # type: ignore[union-attr]
            self._used[index] = self._depends((before,), tids)
        return self._used[index]

    def of(self, leaf: str, backward_step: int) -> Cause:
        context = self.context
        born = context.first_seen(leaf) or 0
        for index in reversed(self.cut_steps[bisect_left(self.cut_steps, born):
                                             bisect_left(self.cut_steps, backward_step)]):
            facts = context.facts(index)
            sets = self._cut_sets(index)
            for (how, expr), depends in reversed(list(zip(facts.cuts, sets, strict=True))):  # type: ignore[union-attr]
                if leaf in depends:
                    return Cause("cut", context.line(index), how, text(expr), facts.deliberate_cut,  # type: ignore[union-attr]
                                 method_text(expr, how))
        for index in reversed(self.off_steps[bisect_left(self.off_steps, born):
                                             bisect_left(self.off_steps, backward_step)]):
            facts = context.facts(index)
            before = context.before(index)
            if any(resolve(before, w.receiver, facts.func) == leaf for w in facts.writes):  # type: ignore[union-attr]
                continue  # the update itself (``w -= lr * w.grad``) runs under no_grad on purpose
            if leaf in self._used_set(index):
                return Cause("no_grad", context.line(index))
        return Cause("unused")


def _backward_steps(context: Context) -> list[int]:
    return [
        index for index in range(1, len(context))
        if (facts := context.facts(index)) is not None
        and any(b.kind == "backward" and not b.limited for b in facts.backwards)
    ]


def _first_missed(context: Context, tid: str, backwards: list[int]) -> int | None:
    """The first backward() step after which ``tid`` — a named leaf that requires grad, alive before
    the line — has no ``.grad``, and never gets one later. None if there is none.

    From the step after its last ``.grad`` on, only the tensor's own changes (its fact, its names)
    can make a backward step qualify or not: it jumps from change to change, not step by step."""
    index = context.index
    since = index.grad_until.get(tid, -1) + 1
    if since == math.inf:
        return None
    history = index.timeline.changes_of("tensors", tid)
    if not any(f is not None and f.is_leaf and f.requires_grad for _, f in history):
        return None
    changes = [s for s, _ in history]
    i = bisect_left(backwards, max(since, 1))
    while i < len(backwards):
        b = backwards[i]
        view = context.at(b)
        fact = view.tensor(tid)
        if fact is not None and fact.is_leaf and fact.requires_grad and fact.grad is None \
                and view.name_count(tid) > 0:
            if context.before(b).tensor(tid) is not None:
                return b
            i += 1  # it appeared on this very line: the next backward() may count it
            continue
        # Nothing about tid moves before its next change: skip the backward steps until then.
        j = bisect_right(changes, b)
        upcoming = [changes[j]] if j < len(changes) else []
        if (n := index.names.next_change(tid, b)) is not None:
            upcoming.append(n)
        if not upcoming:
            return None
        i = max(i + 1, bisect_left(backwards, min(upcoming)))
    return None


def grad_stays_none(context: Context) -> Iterator[Diagnostic]:
    backwards = _backward_steps(context)
    if not backwards:
        return
    first: dict[int, list[str]] = {}
    for tid in context.index.names.ever():
        b = _first_missed(context, tid, backwards)  # type: ignore[arg-type]
        if b is not None:
            first.setdefault(b, []).append(tid)  # type: ignore[arg-type]
    causes = Causes(context)
    higher = HigherOrder(context)
    for index in sorted(first):
        facts = context.facts(index)
        step = context.at(index)
        missing = sorted(first[index], key=step.variable_place)  # the order the step lists its variables
        higher_order, grad_inputs = higher.before(index)
        groups: dict[Cause, list[str]] = {}
        for tid in missing:
            cause = causes.of(tid, index)
            if tid in grad_inputs or (higher_order and cause.kind == "unused"):
                continue
            groups.setdefault(cause, []).append(tid)
        for cause, tids in groups.items():
            yield _none_diagnostic(context, index, cause, tids, facts.backwards[0].roots)  # type: ignore[union-attr]


class HigherOrder:
    """(an autograd.grad ran before a step, the tensors it differentiated with respect to).

    Those inputs need requires_grad for autograd.grad itself, and in gradient-penalty code some
    parameters legitimately drop out of the differentiated graph (a bias has a constant derivative).
    Asked for steps in increasing order, it resolves each autograd.grad call once.
    """

    def __init__(self, context: Context) -> None:
        self.context = context
        self.calls = [i for i in range(len(context)) if (f := context.facts(i)) is not None
                      and any(b.kind == "grad" for b in f.backwards)]
        self.done = 0
        self.inputs: set[str] = set()

    def before(self, upto: int) -> tuple[bool, set[str]]:
        context = self.context
        while self.done < len(self.calls) and self.calls[self.done] < upto:
            index = self.calls[self.done]
            facts = context.facts(index)
            for backward in facts.backwards:  # type: ignore[union-attr]
                if backward.kind == "grad":
                    for expr in backward.inputs:
                        tid = context.resolve_before(index, expr, facts.func)  # type: ignore[union-attr]
                        if tid is not None:
                            self.inputs.add(tid)
            self.done += 1
        return self.done > 0, set(self.inputs)


def _none_diagnostic(context: Context, index: int, cause: Cause, tids: list[str], roots: tuple) -> Diagnostic:
    step = context.at(index)
    names = listing(label(step, tid) for tid in tids)
    count = len(tids)
    fields = {"names": names, "line": step.line, "root": f"`{text(roots[0])}`" if roots else _("the loss"),
              "call": cause.call, "code": context.line_text(cause.line), "cause_line": cause.line,
              "expr": cause.expr, "how": cause.how}
    subject = ngettext(
        "{names} requires grad, but its `.grad` is still None after backward() at line {line}: backward "
        "never reached it.",
        "{names} require grad, but their `.grad` is still None after backward() at line {line}: backward "
        "never reached them.", count).format(**fields)
    severity = "warning"
    if cause.kind == "cut" and cause.deliberate:
        severity = "info"
        new_leaf = "requires_grad_" in context.line_text(cause.line)
        why = (ngettext(
            " Line {cause_line} (`{code}`) stops it on purpose: `{call}` shares the memory but not the "
            "graph, "
            "and `requires_grad_()` makes it a new leaf: gradients stop at the new leaf.",
            " Line {cause_line} (`{code}`) stops them on purpose: `{call}` shares the memory but not the "
            "graph, and `requires_grad_()` makes it a new leaf: gradients stop at the new leaf.", count)
            if new_leaf else ngettext(
            " Line {cause_line} (`{code}`) stops it on purpose: `{call}` shares the memory but not the "
            "graph, "
            "so gradients stop there.",
            " Line {cause_line} (`{code}`) stops them on purpose: `{call}` shares the memory but not the "
            "graph, so gradients stop there.", count)).format(**fields)
        fix = _(
            "Nothing to fix if that is what you want (freezing, or a new graph that starts there). To train "
            "{names}, use `{expr}` without {how}."
        ).format(**fields)
    elif cause.kind == "cut":
        why = _(
            " The path was cut at line {cause_line} (`{code}`): `{call}` returns a tensor with no grad_fn, "
            "so "
            "everything computed from it is invisible to autograd."
        ).format(**fields)
        fix = _(
            "Use `{expr}` itself where the loss needs gradients; keep `{how}` for values you "
            "only log or store."
        ).format(**fields)
    elif cause.kind == "no_grad":
        why = _(
            " It was used at line {cause_line} (`{code}`) inside a `torch.no_grad()` (or inference_mode) "
            "block, where no graph is recorded, so the result does not lead back to it."
        ).format(**fields)
        fix = _("Compute the values the loss depends on outside `torch.no_grad()`; keep no_grad for "
                "evaluation and for the parameter update itself.")
    else:
        why = ngettext(
            " The graph of {root} does not use it at all: nothing the loss was computed from depends on "
            "{names}.",
            " The graph of {root} does not use them at all: nothing the loss was computed from depends on "
            "{names}.", count).format(**fields)
        fix = _("Use it in the computation of the loss, or, if it is not meant to be trained, create it "
                "without `requires_grad=True` (or call `.requires_grad_(False)`).")
    return Diagnostic(
        rule=NONE_RULE, severity=severity,  # type: ignore[arg-type]
        title=_("{names}: .grad stays None after backward()").format(**fields),
        message=subject + why, fix=fix, step=index, line=step.line, tensors=tids,
        lines=[cause.line] if cause.line is not None else [],
    )


def hidden_cuts(context: Context) -> Iterator[Diagnostic]:
    """A function the snippet defines returns a result cut from the graph: a detach() inside it.

    At the call site nothing shows it: ``loss = my_loss(pred, y)`` reads like a loss, but has no
    grad_fn. A detach() written in the statement itself is visible and usually deliberate: the
    ``grad-stays-none`` rule explains those once backward() runs.
    """
    # Steps whose line detaches (not as a statement of its own): the candidates for "inside".
    cut_steps = [
        j for j in range(len(context)) if (f := context.facts(j)) is not None and not f.deliberate_cut
        and any(how in ("detach()", ".data", "detach_()") for how, _ in f.cuts)
    ]
    last_of: dict[str | None, int] = {}  # function → the latest step its own code ran
    for index in range(len(context)):
        facts = context.facts(index)
        if facts is None:
            continue
        caller = facts.func
        start = last_of.get(caller, -1)  # the caller's previous line: what ran since is the call
        last_of[caller] = index
        if facts.grad_off or not facts.assigned:
            continue
        cuts = [
            (j, how, expr)
            for j in cut_steps[bisect_right(cut_steps, start):bisect_left(cut_steps, index)]
            if (f := context.facts(j)) is not None and f.func != caller
            for how, expr in f.cuts if how in ("detach()", ".data", "detach_()")
        ]
        if not cuts:
            continue
        step = context.at(index)
        before = context.before(start + 1) if start >= 0 else context.before(0)
        made = []
        for name in sorted(facts.assigned):
            key = f"{caller}:{name}" if caller else name
            tid = step.variable(key)
            fact = step.tensor(tid)
            if tid is None or before.variable(key) == tid or fact is None or fact.requires_grad:
                continue
            made.append((tid, name))
        if not made:
            continue
        inputs = {t for t in tensors_named(before, facts.names, caller)
                  if (f := before.tensor(t)) is not None and f.requires_grad}
        if not inputs:
            continue
        for tid, name in made:
            yield _hidden_cut(context, index, tid, name, cuts[-1], inputs, before)


def _hidden_cut(
    context: Context, index: int, tid: str, name: str, cut: tuple[int, str, ast.expr], inputs: set[str],
    before: At,
) -> Diagnostic:
    step = context.at(index)
    j, how, expr = cut
    inner = context.facts(j)
    func = inner.func if inner is not None else None
    cut_line = context.line(j)
    leaves = sorted({leaf for t in inputs for leaf in leaves_reached(before, t)})
    leaf_names = listing(label(before, leaf) for leaf in leaves) or _("the tensors that require grad")
    fields = {"name": name, "how": how, "func": func, "line": step.line, "code": context.line_text(step.line),
              "source": listing(sorted(label(before, t) for t in inputs)), "cut_line": cut_line,
              "cut_code": context.line_text(cut_line), "call": method_text(expr, how), "leaves": leaf_names,
              "expr": text(expr)}
    return Diagnostic(
        rule=CUT_RULE, severity="warning",
        title=_("`{name}` has no grad_fn: a {how} inside `{func}` cut the graph").format(**fields),
        message=_(
            "Line {line} (`{code}`) computes `{name}` from {source}, which "
            "requires grad, yet `{name}` has no grad_fn: inside `{func}`, line {cut_line} "
            "(`{cut_code}`) calls `{call}`, which returns the same values without the "
            "graph. There is no error now, but backward() on `{name}` would fail (there is nothing to go "
            "back through), and no gradient can reach {leaves}."
        ).format(**fields),
        fix=_(
            "Remove the {how} in `{func}` (use `{expr}` directly) so that `{name}` stays connected to "
            "the graph. Detach only values you log, or targets that must stay fixed."
        ).format(**fields),
        step=index, line=step.line, tensors=[tid, *sorted(inputs)], lines=[cut_line],
    )


def nonleaf_grad_reads(context: Context) -> Iterator[Diagnostic]:
    reported: set[int] = set()
    for index in range(len(context)):
        facts = context.facts(index)
        line = context.line(index)
        if facts is None or not facts.grad_reads or line in reported:
            continue
        before, step = context.before(index), context.at(index)
        for expr in facts.grad_reads:
            tid = resolve(before, expr, facts.func) or resolve(step, expr, facts.func)
            fact = before.tensor(tid) or step.tensor(tid)
            if tid is None or fact is None or fact.is_leaf or fact.retains_grad:
                continue
            reported.add(line)
            name = text(expr)
            created = context.first_seen(tid)
            created_line = context.line(created) if created is not None else None
            fields = {"name": name, "line": line, "created": created_line,
                      "grad_fn": _grad_fn_name(before if before.tensor(tid) is not None else step, tid)}
            yield Diagnostic(
                rule=NONLEAF_RULE, severity="warning",
                title=_("`{name}.grad` is always None: `{name}` is not a leaf").format(**fields),
                message=_(
                    "Line {line} reads `{name}.grad`. `{name}` was computed by an operation (its "
                    "grad_fn is {grad_fn}), "
                    "so it is not a leaf, and backward() only fills `.grad` of leaf tensors; the gradients "
                    "flowing through intermediate results are freed as soon as they are used. "
                    "`{name}.grad` is None here and stays None."
                ).format(**fields),
                fix=(_(
                    "Call `{name}.retain_grad()` right after line {created} creates it, before backward(), "
                    "to "
                    "keep its gradient; or ask for it directly: `torch.autograd.grad(loss, {name})`."
                ) if created_line is not None else _(
                    "Call `{name}.retain_grad()`, before backward(), to keep its gradient; or ask for it "
                    "directly: `torch.autograd.grad(loss, {name})`."
                )).format(**fields),
                step=index, line=line, tensors=[tid],
                lines=[created_line] if created_line is not None else [],
            )
            break


def _grad_fn_name(view: At, tid: str) -> str:
    node = view.node(view.tensor(tid).grad_fn)  # type: ignore[union-attr]
    if node is None:
        return _("set")
    return f"`{node.name}`"

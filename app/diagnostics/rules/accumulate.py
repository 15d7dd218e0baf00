"""Gradients that pile up across training steps: nothing clears ``.grad`` between iterations.

``backward()`` adds into ``.grad``; it never overwrites it. A loop that updates the parameters every
iteration but never zeroes (``opt.zero_grad()``, ``p.grad = None``) steps, from its second iteration
on, with the sum of every gradient so far. Read from the trace, per parameter that an optimizer (or a
hand-written update) trains, in the order things happened to it:

* *filled*: a backward pass gives it a ``.grad`` where it had none;
* *used*: the parameter itself is written outside a backward pass while it has a ``.grad`` (the
  optimizer's step, or the hand-written update);
* *added to*: a backward pass adds into a ``.grad`` that is already there (its version rises, or
  ``create_graph`` replaces it with the sum);
* *cleared*: the ``.grad`` goes (``zero_grad()`` sets it to None), is replaced by the snippet, or a
  write outside backward leaves it all zeros (``zero_grad(set_to_none=False)``, ``p.grad.zero_()``).

A step that uses a gradient which was added to after an earlier step had already used it is the
pitfall. Accumulating over several batches before one step (``step`` and ``zero_grad`` every k
batches), or a second network's backward adding into gradients that are cleared before their own
step (a GAN's discriminator), are not.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass

from app.diagnostics.context import Context
from app.diagnostics.patch import indentation, insert_before
from app.diagnostics.trace import label, listing
from app.diagnostics.trained import Group, trained
from app.i18n import gettext as _
from app.schema import Diagnostic, Patch, TensorFact

RULE = "grads-accumulate-across-steps"
MAX_NAMED = 3


@dataclass(frozen=True)
class Stale:
    """A step that used a gradient holding an earlier iteration's, already used once."""

    leaf: str
    first_use: int  # the step that used the gradient first
    added: int  # the backward step that added to it after that
    use: int  # the step that used the sum


def zeros(fact: TensorFact) -> bool | None:
    """All its elements are zero, as far as the trace shows (None: the trace does not show them)."""
    if fact.summary is not None and fact.summary.min is not None:
        return fact.summary.min == 0 and fact.summary.max == 0
    values = fact.values
    if values is None:
        return None
    stack = [values]
    while stack:
        value = stack.pop()
        if isinstance(value, list):
            stack.extend(value)
        elif value not in (0, 0.0, False):
            return False
    return True


def _backward_steps(context: Context) -> list[bool]:
    """Per step: does it belong to a backward pass (a node step, or the line that called it)."""
    out = []
    for k, delta in enumerate(context.trace.steps):
        facts = context.facts(k)
        out.append(delta.phase == "backward" or (facts is not None and any(
            b.kind == "backward" for b in facts.backwards)))
    return out


Event = tuple[int, int, str]  # (step, order within the step, what)


def grad_events(context: Context, leaf: str) -> list[Event]:
    """One parameter's .grad history, read once per analysis (``rules/cleared.py`` reads it too):

    * ``fill`` / ``add``: a backward pass gives it a .grad, or adds into the one it has;
    * ``use``: the parameter is written outside a backward pass while it has a .grad;
    * ``clear``: the .grad goes to None, or a write outside backward leaves it all zeros (``clear?``:
      a write whose values the trace does not show; ``zeros``: all zeros before the write too);
    * ``set``: the snippet gives it a .grad of its own (not all zeros).
    """
    memo = context.memo.setdefault("grad_events", {})
    found = memo.get(leaf)
    if found is None:
        backward = context.memo.get("backward_steps")
        if backward is None:
            backward = context.memo["backward_steps"] = _backward_steps(context)
        found = memo[leaf] = _events(context, leaf, backward)
    return found


def _events(context: Context, leaf: str, backward: list[bool]) -> list[Event]:
    timeline = context.index.timeline
    events: list[Event] = []
    before: TensorFact | None = None
    grads: list[str] = []
    for k, fact in timeline.changes_of("tensors", leaf):
        context.index.reads += 1
        if fact is None:
            break  # no name reaches it any more: nothing more to follow
        if before is not None:
            if fact.grad != before.grad:
                if fact.grad is None:
                    events.append((k, 2, "clear"))
                elif backward[k]:
                    events.append((k, 0, "fill" if before.grad is None else "add"))
                else:
                    events.append((k, 0, _written(context, k, fact.grad, "set")))
            if (fact.version or 0) > (before.version or 0) and not backward[k] and before.grad is not None:
                events.append((k, 1, "use"))
        elif fact.grad is not None:
            events.append((k, 0, "fill"))
        if fact.grad is not None and fact.grad not in grads:
            grads.append(fact.grad)
        before = fact
    for grad in grads:
        last: TensorFact | None = None
        for k, fact in timeline.changes_of("tensors", grad):
            context.index.reads += 1
            if fact is None:
                break
            if last is not None and (fact.version or 0) > (last.version or 0):
                if backward[k]:
                    events.append((k, 0, "add"))
                elif (what := _written(context, k, grad, None, zeros(last))) is not None:
                    events.append((k, 2, what))
            last = fact
    return sorted(events)


def _written(context: Context, k: int, grad: str, otherwise: str | None,
             was: bool | None = False) -> str | None:
    """What a write outside backward left in a .grad: ``clear`` (all zeros), ``clear?`` (unknown),
    ``zeros`` (zeros it already held: clipping a gradient that backward left all zeros)."""
    fact = context.at(k).tensor(grad)
    zero = zeros(fact) if fact is not None else None
    if zero and was:
        return "zeros"
    return "clear" if zero else "clear?" if zero is None else otherwise


def _stale(events: list[Event], leaf: str) -> Stale | None:
    used: int | None = None  # the step that used the gradient as it is now
    added: int | None = None  # a backward that added to a gradient already used
    first_use = 0
    for k, _order, what in events:
        if what in ("fill", "clear", "clear?", "zeros", "set"):
            used = added = None
        elif what == "add" and used is not None and added is None:
            added, first_use = k, used
        elif what == "use":
            if added is not None:
                return Stale(leaf, first_use, added, k)
            used = k
    return None


def accumulated_grads(context: Context) -> Iterator[Diagnostic]:
    trains = trained(context)
    if not trains.groups:
        return
    found: dict[int, list[tuple[Stale, Group]]] = {}  # by the backward line that adds
    seen: set[str] = set()
    for group in trains.groups:
        for leaf in group.leaves:
            if leaf in seen:
                continue
            seen.add(leaf)
            stale = _stale(grad_events(context, leaf), leaf)
            if stale is not None:
                found.setdefault(context.line(stale.added), []).append((stale, group))
    for stales in sorted(found.values(), key=lambda s: min(x.use for x, _g in s)):
        yield _finding(context, stales)


def _optimizer_name(context: Context, group: Group) -> str | None:
    """The plain name the optimizer was bound to (``opt = torch.optim.SGD(...)``), if any."""
    facts = context.source.at(group.line)
    node = facts.node if facts is not None else None
    if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
        return node.targets[0].id
    return None


def _patch(context: Context, line: int, group: Group, name: str | None) -> list[Patch]:
    """``opt.zero_grad()`` just before the backward() line (in the optimizer's reach)."""
    facts = context.source.at(line)
    made = context.source.at(group.line)
    if name is None or facts is None or facts.node is None or facts.line != line or made is None:
        return []
    if made.func is not None and made.func != facts.func:
        return []  # a local of another function: not reachable from that line
    if isinstance(facts.node, ast.If | ast.For | ast.While | ast.With):
        return []
    lines = context.source.lines
    return [insert_before(line, len(indentation(lines, line)), f"{name}.zero_grad()")]


def _by_hand(context: Context, stales: list[Stale]) -> tuple[list[Patch], list[str]]:
    """``w.grad = None`` after each statement of a hand-written update that used a stale gradient
    (``w -= lr * w.grad``; ``p`` in ``for p in params:``), and those statements as text."""
    patch: list[Patch] = []
    cleared: list[str] = []
    lines = context.source.lines
    done: set[int] = set()
    for stale in stales:
        facts = context.facts(stale.use)
        if facts is None or facts.node is None or facts.line in done:
            continue
        done.add(facts.line)
        roots = [w.base or w.receiver for w in facts.writes]
        texts = list(dict.fromkeys(ast.unparse(r) for r in roots if isinstance(r, ast.Name | ast.Attribute)))
        if len(texts) != 1 or isinstance(facts.node, ast.If | ast.For | ast.While | ast.With):
            continue
        text = f"{texts[0]}.grad = None"
        end = facts.node.end_lineno or facts.line
        patch.append(insert_before(end + 1, len(indentation(lines, facts.line)), text))
        cleared.append(text)
    return patch, cleared


def _finding(context: Context, stales: list[tuple[Stale, Group]]) -> Diagnostic:
    first, group = min(stales, key=lambda s: s[0].use)
    view = context.at(first.use)
    leaves = [s.leaf for s, _g in stales if view.tensor(s.leaf) is not None]
    names = listing(label(view, t) for t in leaves[:MAX_NAMED])
    more = len(leaves) - MAX_NAMED
    if more > 0:
        names = _("{names} and {count} more").format(names=names, count=more)
    line = context.line(first.added)
    name = _optimizer_name(context, group) if not group.by_hand else None
    fields = {"line": line, "code": context.line_text(line), "names": names,
              "use_line": context.line(first.use), "use_code": context.line_text(context.line(first.use)),
              "first": first.first_use + 1, "then": first.use + 1, "opt": name or "optimizer"}
    message = _(
        "Line {line} (`{code}`) adds this iteration's gradients to what the .grad of {names} already holds: "
        "backward() accumulates into .grad, it never overwrites it, and nothing clears it between "
        "iterations. Line {use_line} (`{use_code}`) used that gradient at step {first} and, at step {then}, "
        "uses it again with the next iteration's added: each update moves the parameters by the sum of "
        "every gradient so far, not by this batch's."
    ).format(**fields)
    if group.by_hand:
        patch, cleared = _by_hand(context, [s for s, _g in stales])
        fields["clear"] = "; ".join(cleared) or "p.grad = None"
        fix = _(
            "Clear each gradient once it has been used: `{clear}` right after the update at line "
            "{use_line} (or `.grad.zero_()`), so that the next backward() starts from nothing."
        ).format(**fields)
    else:
        fix = _(
            "Clear the gradients once per iteration, before backward(): `{opt}.zero_grad()` just before "
            "line {line} (or at the top of the loop). It sets every .grad to None, so backward() starts "
            "from nothing. (To accumulate over several batches on purpose, call `{opt}.step()` and "
            "`{opt}.zero_grad()` together every k batches.)"
        ).format(**fields)
        patch = _patch(context, line, group, name)
    grads = [g for t in leaves if (f := view.tensor(t)) is not None and (g := f.grad) is not None]
    return Diagnostic(
        rule=RULE, severity="warning",
        title=_("Gradients of {names} add up across iterations: nothing zeroes them").format(**fields),
        message=message, fix=fix, step=first.use, line=line, tensors=leaves + grads,
        lines=sorted({context.line(first.use)} - {line}), patch=patch,
    )

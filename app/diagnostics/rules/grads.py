"""``grad-stays-none``: a parameter the snippet trains (an optimizer holds it, or an update written by
hand changes it) never gets a gradient, although the loss is computed from it: the path from it to the
loss was cut — by ``.detach()``, ``.data``, ``.item()`` or ``.numpy()``, ``torch.tensor(t)``,
``torch.no_grad()``, or ``requires_grad = False`` on the very parameters the optimizer trains. A
warning at the line that cut it (``app.diagnostics.flow`` finds it: the values still come from the
parameter, the graph no longer does; ``cuts`` says how, and how to undo it). A parameter no optimizer
holds (a teacher, a frozen backbone, a target network) is left alone: not getting a gradient is what it
is for.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from app.diagnostics.context import Context
from app.diagnostics.flow import Flow, flow
from app.diagnostics.index import At
from app.diagnostics.rules.cuts import explain_cut
from app.diagnostics.source import LineFacts, resolve
from app.diagnostics.trace import label, listing, sentences
from app.diagnostics.trained import Trained, trained
from app.i18n import gettext as _
from app.i18n import ngettext
from app.schema import Diagnostic

NONE_RULE = "grad-stays-none"
MAX_NAMED = 4  # parameters a title names; the rest are counted


@dataclass(frozen=True)
class Miss:
    leaf: str
    cut: int  # the step that cut it
    backward: int  # the first backward() step whose loss depended on it


def backward_steps(context: Context) -> list[int]:
    return [k for k in range(len(context)) if (f := context.facts(k)) is not None
            and any(b.kind == "backward" and not b.limited for b in f.backwards)]


def root_leaves(context: Context, values: Flow, step: int, facts: LineFacts,
                before: At | None = None) -> dict[str, int | None]:
    """What the loss of a ``backward()`` line was computed from: its root's leaves (``before``: the
    state the line started from, when its own step is missing — the line failed)."""
    before = before or context.before(step)
    out: dict[str, int | None] = {}
    for backward in facts.backwards:
        for root in backward.roots:
            tid = resolve(before, root, facts.func)
            if tid is not None:
                leaves = values.of_tensor(before, tid)
            else:  # ``y.sum().backward()``: what the expression reads
                leaves = values.reads(before, [root], facts.func)
            for leaf, cut in leaves.items():
                if leaf not in out or (out[leaf] is not None and cut is None):
                    out[leaf] = cut
    return out


def grad_stays_none(context: Context) -> Iterator[Diagnostic]:
    trains = trained(context)
    wanted = trains.leaves()
    if not wanted:
        return
    steps = backward_steps(context)
    if not steps:
        return
    values = flow(context)
    got = context.index.grad_until
    misses: dict[str, Miss] = {}
    for k in steps:
        facts = context.facts(k)
        assert facts is not None
        for leaf, cut in root_leaves(context, values, k, facts).items():
            if cut is not None and leaf in wanted and leaf not in got and leaf not in misses:
                misses[leaf] = Miss(leaf, cut, k)
    frozen = values.frozen
    by_line: dict[int, list[Miss]] = {}  # one finding per line that cut (a loop may cut at every pass)
    for miss in misses.values():
        if frozen.get(miss.leaf) == miss.cut and not _all_frozen(trains, frozen, miss.leaf):
            continue  # one frozen part of what an optimizer trains: a choice (a backbone, for a while)
        by_line.setdefault(context.line(miss.cut), []).append(miss)
    for group in sorted(by_line.values(), key=lambda ms: min(m.cut for m in ms)):
        yield _never_trained(context, trains, values, min(m.cut for m in group), group)


def _all_frozen(trains: Trained, frozen: dict[str, int], leaf: str) -> bool:
    """Every leaf of the optimizer (or param group) that holds ``leaf`` was frozen: it trains nothing."""
    group = trains.group_of(leaf)
    return group is not None and all(other in frozen for other in group.leaves)


def _param_name(view: At, leaf: str) -> str:
    """A parameter as the user calls it: its module path (``encoder.weight``) before a list's item
    (``params[0]``) or a loop's variable (``p``); else what ``label`` says."""
    names = [n for n in view.names(leaf) if ":" not in n]
    if not names:
        return label(view, leaf)
    best = min(names, key=lambda n: ("." not in n or "[" in n.split(".", 1)[0], "[" in n, len(n), n))
    if "." not in best and any("." in n and "[" not in n for n in names):
        best = min((n for n in names if "." in n), key=len)
    return f"`{best}`"


def _names(view: At, leaves: list[str]) -> tuple[str, int]:
    shown = [_param_name(view, leaf) for leaf in leaves[:MAX_NAMED]]
    more = len(leaves) - len(shown)
    text_ = listing(shown)
    if more:
        text_ = ngettext("{names} and {n} more", "{names} and {n} more", more).format(names=text_, n=more)
    return text_, len(leaves)


def _never_trained(context: Context, trains: Trained, values: Flow, cut: int,
                   misses: list[Miss]) -> Diagnostic:
    leaves = [m.leaf for m in misses]
    view = context.at(cut)
    order = {leaf: view.variable_place(leaf) for leaf in leaves}
    leaves.sort(key=lambda leaf: order[leaf])
    names, count = _names(view, leaves)
    explained = explain_cut(context, values, cut, set(leaves), names)
    line = context.line(cut)
    backward = min(m.backward for m in misses)
    group = trains.group_of(leaves[0])
    fields = {"names": names, "line": line, "backward": context.line(backward),
              "held": group.line if group else line}
    if group is not None and group.by_hand:
        owner = ngettext("The update at line {held} changes {names}",
                         "The update at line {held} changes {names}", count).format(**fields)
    else:
        owner = ngettext("The optimizer made at line {held} holds {names}",
                         "The optimizer made at line {held} holds {names}", count).format(**fields)
    head = ngettext(
        "{owner}, and the loss that backward() at line {backward} starts from is computed from it — but no "
        "gradient ever reaches it.",
        "{owner}, and the loss that backward() at line {backward} starts from is computed from them — but no "
        "gradient ever reaches them.", count).format(owner=owner, **fields)
    outcome = _("No error is raised: backward() runs, the optimizer steps, and these parameters never "
                "change.")
    title = ngettext("{names} is never trained: line {line} cuts it off the loss",
                     "{names} are never trained: line {line} cuts them off the loss", count).format(**fields)
    result = _cut_result(context, cut, set(leaves))
    return Diagnostic(
        rule=NONE_RULE, severity="warning", title=title, message=sentences(head, explained.why, outcome),
        fix=explained.fix, step=cut, line=line, tensors=[*result, *leaves], lines=[context.line(backward)],
        patch=explained.patch,
    )


def _cut_result(context: Context, step: int, leaves: set[str]) -> list[str]:
    """The tensor the cutting line made, cut off from the leaves (what the graph shows alone)."""
    facts = context.facts(step)
    if facts is None:
        return []
    view, before = context.at(step), context.before(step)
    out = []
    for name in sorted(facts.assigned):
        key = f"{facts.func}:{name}" if facts.func else name
        tid = view.variable(key)
        if tid is not None and tid != before.variable(key) and tid not in leaves:
            out.append(tid)
    return out

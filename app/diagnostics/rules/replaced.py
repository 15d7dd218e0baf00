"""An optimizer built on parameters that the snippet then replaces.

``opt = torch.optim.SGD(model.parameters())`` keeps the very tensors ``model`` had then. Rebinding
``model = Net()`` (or ``model.fc = nn.Linear(...)``, ``w = torch.randn(..., requires_grad=True)``)
puts new parameters under those names; the optimizer still holds the old ones. From then on every
``backward()`` fills the new parameters' ``.grad``, ``opt.zero_grad()`` clears the old ones, and
``opt.step()`` updates the old ones (which get no gradient): the model that is used never learns.

Read from the trace: the names each of an optimizer's parameters had when it was made; the first
later step that binds such a name to another leaf that requires grad; that leaf gets a gradient,
and no optimizer (made then or later, nor a param group added) holds it. One finding per optimizer
and line that replaced.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass, field

from app.diagnostics.context import Context
from app.diagnostics.patch import indentation, insert_before, segment
from app.diagnostics.trace import label, listing
from app.diagnostics.trained import Group, trained
from app.i18n import gettext as _
from app.schema import Diagnostic, Patch

RULE = "optimizer-holds-replaced-params"
MAX_NAMED = 3


@dataclass
class Replaced:
    group: Group
    step: int  # the first step that bound one of its names to a new parameter
    new: list[str] = field(default_factory=list)  # the new parameters, nobody's to train


def replaced_params(context: Context) -> Iterator[Diagnostic]:
    trains = trained(context)
    groups = [g for g in trains.groups if not g.by_hand and g.step >= 0]
    if not groups:
        return
    held = trains.leaves()
    timeline = context.index.timeline
    got = context.index.grad_until
    found: dict[tuple[int, int], Replaced] = {}
    for group in groups:
        made = context.at(group.step)
        for leaf in group.leaves:
            for key in made.names(leaf):
                for k, tid in timeline.changes_of("variables", key):
                    context.index.reads += 1
                    if k <= group.step or tid is None or tid == leaf:
                        continue
                    fact = context.at(k).tensor(tid)
                    if fact is not None and fact.is_leaf and fact.requires_grad and tid not in held \
                            and tid in got:
                        line = context.line(k)
                        found.setdefault((group.line, line), Replaced(group, k)).new.append(tid)
                    break  # the first rebinding tells; a later one is another story
    for replaced in sorted(found.values(), key=lambda r: r.step):
        yield _finding(context, replaced)


def _optimizer_statement(context: Context, group: Group) -> tuple[str, ast.stmt] | None:
    """(its name, its statement): ``opt = torch.optim.SGD(...)`` on one line, bound to a plain name."""
    facts = context.source.at(group.line)
    node = facts.node if facts is not None else None
    if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name) \
            and node.lineno == node.end_lineno:
        return node.targets[0].id, node
    return None


def _patch(context: Context, line: int, group: Group, statement: tuple[str, ast.stmt] | None) -> list[Patch]:
    """The optimizer made again right after the statement that replaced its parameters (in the same
    function: a rebinding inside another one would make a local of it)."""
    facts = context.source.at(line)
    made = context.source.at(group.line)
    if statement is None or facts is None or facts.node is None or made is None or facts.func != made.func:
        return []
    node = facts.node
    if isinstance(node, ast.If | ast.For | ast.While | ast.With | ast.Try | ast.FunctionDef | ast.ClassDef):
        return []
    lines = context.source.lines
    end = node.end_lineno or node.lineno
    return [insert_before(end + 1, len(indentation(lines, node.lineno)), segment(lines, statement[1]))]


def _finding(context: Context, replaced: Replaced) -> Diagnostic:
    group, step = replaced.group, replaced.step
    view = context.at(step)
    new = [t for t in dict.fromkeys(replaced.new) if view.tensor(t) is not None]
    names = listing(label(view, t) for t in new[:MAX_NAMED])
    if len(new) > MAX_NAMED:
        names = _("{names} and {count} more").format(names=names, count=len(new) - MAX_NAMED)
    line = context.line(step)
    statement = _optimizer_statement(context, group)
    fields = {"line": line, "code": context.line_text(line), "names": names, "made": group.line,
              "made_code": context.line_text(group.line), "opt": statement[0] if statement else "optimizer",
              "statement": segment(context.source.lines, statement[1]).strip() if statement else ""}
    message = _(
        "Line {made} (`{made_code}`) gave the optimizer the parameters that existed then, and it keeps "
        "those very tensors. Line {line} (`{code}`) then puts new parameters under the same names "
        "({names}): every backward() fills their .grad, but `{opt}.step()` updates only the old ones, which "
        "nothing uses any more and which get no gradient. The parameters the code trains never change."
    ).format(**fields)
    fix = _(
        "Make the optimizer after the model is final: move line {made} below line {line}, or build it "
        "again right after line {line}: `{statement}`. (A param group added with `{opt}.add_param_group` "
        "works too, for a part that was swapped.)"
    ).format(**fields) if statement else _(
        "Make the optimizer after the model is final, from the new parameters (`model.parameters()` after "
        "line {line}), or give it the swapped part with `optimizer.add_param_group`."
    ).format(**fields)
    return Diagnostic(
        rule=RULE, severity="warning",
        title=_("The optimizer still holds the parameters line {line} replaced: {names} never learn").format(
            **fields),
        message=message, fix=fix, step=step, line=line, tensors=new, lines=[group.line],
        patch=_patch(context, line, group, statement),
    )

"""A run as plain text, step by step, for a terminal or a CI log (``python -m app render FILE -o
run.txt``, ``autograd_explorer.Run.text()``).

Each step says its line and what the line changed, as the delta trace has it: the names it bound
(each tensor with its dtype and shape, its ``grad_fn`` chain, its storage and whether that storage is
shared, its version), the names it unbound, the version counters it moved, the ``.grad`` it set, a
storage that became shared, what a backward pass's node did, what was printed, the bytes alive when
they changed (with the GPU model's figures, ``app.trace.gpu``), and the findings the diagnostics made
at that step. Pure, and linear in the trace's changes: one replay (``app.render.steps.Driver``) feeds
this builder, the diagnostics and the GPU model.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from app.diagnostics import Analysis
from app.i18n import gettext as _
from app.i18n import ngettext, number
from app.render.names import fold_names, is_accumulate, label
from app.render.notices import RunLimits, cuda_notice, cut_notice, error_view
from app.render.steps import Driver, StepInput
from app.schema import DeltaTrace, Diagnostic, MemoryChange
from app.trace.gpu import GpuMemory, GpuPoint
from app.trace.holding import Holding, short_node_name
from app.trace.replay import State
from app.units import fmt_bytes

CHAIN_NODES = 8  # a grad_fn chain names at most this many nodes, then "…"
INDENT = "  "


def tensor_text(state: State, holding: Holding, tid: str, users: int = 1) -> str:
    """``float32[16] · grad_fn SinBackward0 ← MulBackward0 · storage s4 64 B · v0``."""
    fact = state.tensors.get(tid)
    if fact is None:
        return _("a tensor no longer alive")
    parts = [f"{fact.dtype}[{', '.join(map(str, fact.shape))}]"]
    if fact.device != "cpu":
        parts.append(fact.device)
    if fact.requires_grad and fact.is_leaf:
        parts.append(_("leaf, requires_grad"))
    if fact.base is not None:
        parts.append(_("view of {base}").format(base=_name(state, holding, fact.base)))
    if fact.grad_fn is not None:
        parts.append("grad_fn " + grad_fn_chain(state, holding, fact.grad_fn))
    storage = state.storages.get(fact.storage) if fact.storage else None
    if storage is not None:
        shared = _(", shared by {n} tensors").format(n=users) if users > 1 else ""
        parts.append(_("storage {id} {size}{shared}").format(id=fact.storage, size=_size(storage.nbytes),
                                                               shared=shared))
    if fact.version is not None:
        parts.append(f"v{fact.version}")
    return " · ".join(parts)


def grad_fn_chain(state: State, holding: Holding, nid: str) -> str:
    """The node and what its ``next_functions`` lead to: ``SinBackward0 ← MulBackward0 ←
    AccumulateGrad(w)``; branches in parentheses; at most ``CHAIN_NODES`` nodes."""
    budget = [CHAIN_NODES]

    def walk(node_id: str) -> str:
        node = state.nodes.get(node_id)
        if node is None:
            return "?"
        budget[0] -= 1
        name = short_node_name(node.name)
        if is_accumulate(node) and node.variable is not None:
            name = f"{name}({_name(state, holding, node.variable)})"
        nexts = [n for n in node.next if n is not None]
        if not nexts:
            return name
        if budget[0] <= 0:
            return name + " ← …"
        if len(nexts) == 1:
            return f"{name} ← {walk(nexts[0])}"
        return f"{name} ← (" + ", ".join(walk(n) if budget[0] > 0 else "…" for n in nexts) + ")"

    return walk(nid)


def _name(state: State, holding: Holding, tid: str) -> str:
    return label(holding, tid) if tid in state.tensors else _("a tensor no longer alive")


def _size(nbytes: int) -> str:
    return fmt_bytes(nbytes)


@dataclass
class _Block:
    head: str
    lines: list[str]


class TextBuilder:
    """Each step's lines, from the replay (a view builder of ``app.render.steps``)."""

    def __init__(self, code: str) -> None:
        self.source = code.split("\n")
        self.blocks: list[_Block] = []

    def add_step(self, step: StepInput) -> None:
        state, changes, holding = step.state, step.changes, step.holding
        delta = changes.delta
        source = self.source[delta.line - 1].strip() if 0 < delta.line <= len(self.source) else ""
        head = _("step {n} · line {line}").format(n=step.index + 1, line=delta.line)
        if delta.phase == "backward":
            node = state.nodes.get(delta.node) if delta.node else None
            ran = short_node_name(node.name) if node else "?"
            head += " · " + _("backward: {node} ran").format(node=ran)
        elif source:
            head += " · " + source
        lines: list[str] = []
        for name, tid in delta.variables.items():
            fact = state.tensors.get(tid)
            users = len(step.users.get(fact.storage)) if fact is not None and fact.storage else 1
            lines.append(f"{name} = {tensor_text(state, holding, tid, users)}")
        lines += [_("{name} unbound").format(name=name) for name in delta.dropped.variables]
        for tid, old in changes.old_tensors.items():
            new = state.tensors.get(tid)
            if old is None or new is None:
                continue
            who = label(holding, tid)
            if old.version != new.version and new.version is not None:
                lines.append(_("{name}: _version {old} → {new}").format(name=who, old=old.version,
                                                                        new=new.version))
            if old.grad != new.grad:
                grad = tensor_text(state, holding, new.grad) if new.grad else "None"
                lines.append(f"{who}.grad = {grad}")
        lines += self._newly_shared(step)
        if delta.phase == "backward":
            sent = [label(holding, g) for g in delta.sent if g is not None and g in state.tensors]
            if sent:
                lines.append(_("sent gradients: {grads}").format(grads=", ".join(sent)))
        for printed in delta.stdout.splitlines():
            lines.append("| " + printed)
        self.blocks.append(_Block(head, lines))

    def _newly_shared(self, step: StepInput) -> list[str]:
        """A storage a second tensor started using at this step: who shares it now."""
        found: list[str] = []
        seen: set[str] = set()
        for tid, old in step.changes.old_tensors.items():
            new = step.state.tensors.get(tid)
            sid = new.storage if new is not None else None
            if sid is None or sid in seen or (old is not None and old.storage == sid):
                continue
            users = step.users.get(sid)
            if len(users) > 1:
                seen.add(sid)
                names = fold_names(sorted(label(step.holding, u) for u in users))
                found.append(_("storage {id} is shared by {names}").format(id=sid, names=names))
        return found


def text_view(result: DeltaTrace, code: str, limits: RunLimits | None = None, title: str = "",
              diagnostics: Sequence[Diagnostic] | None = None) -> str:
    """The whole run as text (``diagnostics``: when already found; else found here)."""
    builder = TextBuilder(code)
    gpu = GpuMemory()
    analysis = Analysis(result, code)
    driver = Driver([builder, gpu, analysis])
    for delta in result.steps:
        driver.add(delta)
    found, memory = analysis.result()
    return render_text(result, builder.blocks, memory, gpu.points,
                       found if diagnostics is None else diagnostics, limits or RunLimits(), title)


def render_text(result: DeltaTrace, blocks: Sequence[_Block], memory: Sequence[MemoryChange],
                gpu: Sequence[GpuPoint], diagnostics: Sequence[Diagnostic], limits: RunLimits,
                title: str) -> str:
    at: dict[int, list[Diagnostic]] = {}
    for finding in diagnostics:
        at.setdefault(finding.step if finding.step is not None else -1, []).append(finding)
    out = [summary(result, memory, gpu, diagnostics, limits, title), ""]
    out += [f"{INDENT}{_finding(d)}" for d in at.get(-1, ())]
    last: tuple[int, int, int] | None = None
    for index, block in enumerate(blocks):
        out.append(block.head)
        out += [INDENT + line for line in block.lines]
        if index < len(memory):
            m = memory[index]
            point = gpu[index] if index < len(gpu) else GpuPoint(0, 0)
            now = (m.total_bytes, point.allocated, point.reserved)
            if now != last:
                out.append(INDENT + memory_line(m, point))
                last = now
        out += [INDENT + _finding(d) for d in at.get(index, ())]
    printed = result.error.output if result.error is not None else ""
    if printed:  # no step holds it (a run cut by the clock past the step limit printed on unrecorded)
        out += ["", _("What the run printed after its last step")]
        out += [INDENT + "| " + line for line in printed.splitlines()]
    error = error_view(result.error)
    if error is not None:
        out += ["", error.title, INDENT + error.text] + ([INDENT + error.where] if error.where else [])
    return "\n".join(out) + "\n"


def memory_line(m: MemoryChange, gpu: GpuPoint) -> str:
    return _("memory {total} ({graph} held only by the graph) · on a GPU (model): {allocated} allocated, "
             "{reserved} reserved").format(total=_size(m.total_bytes), graph=_size(m.graph_bytes),
                                           allocated=_size(gpu.allocated), reserved=_size(gpu.reserved))


def _finding(d: Diagnostic) -> str:
    where = _("line {line}").format(line=d.line) if d.line else ""
    return f"! {d.severity} [{d.rule}]" + (f" {where}" if where else "") + f": {d.title.replace('`', '')}"


def summary(result: DeltaTrace, memory: Sequence[MemoryChange], gpu: Sequence[GpuPoint],
            diagnostics: Sequence[Diagnostic], limits: RunLimits, title: str = "") -> str:
    """A few lines: the run's steps and end, its memory peaks, its findings (the notebook's
    ``text/plain`` and the text view's head)."""
    steps = len(result.steps)
    ended = _("finished") if result.ok else (_("stopped by an error") if result.error else _("cut short"))
    notice = cut_notice(result, limits)
    head = "Autograd Explorer" + (f" · {title}" if title else "") + " · " + \
        ngettext("{n} step", "{n} steps", steps).format(n=number(steps)) + f" · {ended}"
    lines = [head]
    for said in (notice, cuda_notice(result)):
        if said is not None:
            lines.append(said.text)
    if memory:
        peak = max(memory, key=lambda m: m.total_bytes)
        lines.append(_("peak memory {total} ({graph} held only by the graph)").format(
            total=_size(peak.total_bytes), graph=_size(peak.graph_bytes)))
    if gpu:
        lines.append(_("on a GPU (a model of the caching allocator): peak {allocated} allocated, {reserved} "
                       "reserved").format(allocated=_size(max(p.allocated for p in gpu)),
                                          reserved=_size(max(p.reserved for p in gpu))))
    if diagnostics:
        lines.append(_("findings: {n}").format(n=len(diagnostics)))
        lines += [INDENT + _finding(d) for d in diagnostics[:5]]
        if len(diagnostics) > 5:
            lines.append(INDENT + _("+{n} more").format(n=len(diagnostics) - 5))
    return "\n".join(lines)

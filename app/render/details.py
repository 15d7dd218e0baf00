"""The facts panel: every fact of a tensor at any step, as (label, text) rows.

A tensor's rows are computed again only at the steps where something they read changed — its own
fact, its names or holders, its storage, its ``grad_fn`` node, the names of its ``.grad`` /
``._base`` — and stored once: ``pairs`` holds each distinct (label, text) row, ``entries`` each
distinct list of rows (as indices into ``pairs``), and ``details[tid]`` the runs of steps at which
the tensor reads as an entry. Only the "id" row shows internal ids.
"""

from __future__ import annotations

from array import array
from collections import Counter
from dataclasses import dataclass
from typing import Any

from app.i18n import gettext as _
from app.render import fmt
from app.render.footprint import Layout, is_contiguous
from app.render.names import (
    fold_names,
    holder_label,
    holders_of,
    holders_text,
    id_order,
    label,
    roles_text,
    short_node_name,
)
from app.render.steps import StepInput
from app.render.tracks import Run, change, close_runs
from app.schema import TensorFact
from app.trace.gpu import GpuMemory
from app.trace.holding import Holding, node_holds
from app.trace.replay import State


def _who(tid: str | None, state: State, holding: Holding) -> str:
    """How a row names another tensor (its .grad, its ._base): by name, never by id."""
    if tid is None:
        return "None"
    if tid not in state.tensors:
        return _("a tensor no longer alive")
    if holding.is_named(tid):
        return fold_names(holding.names(tid)[:1])
    return holder_label(holding, tid)


def values_text(fact: TensorFact) -> str | None:
    """The values row: the tensor as torch prints it, or a summary of a large one."""
    if fact.values is not None:
        return fmt.nested(fact.values)
    if fact.summary is None:
        return None
    summary = fact.summary
    parts = [_("{n} elements").format(n=summary.numel)]
    parts += [f"{name} {fmt.long_scalar(v)}" for name, v in
              (("min", summary.min), ("max", summary.max), ("mean", summary.mean)) if v is not None]
    return " · ".join(parts)


def tensor_facts(state: State, holding: Holding, tid: str, born: int | None,
                 values: str | None = None, held: str | None = None,
                 born_version: int | None = None, gpu_block: int | None = None) -> list[tuple[str, str]]:
    """The rows of one live tensor now. The first row is what the views call it (the panel's title).
    ``values`` and ``held`` (its "held by" row): when the caller has them already; ``born_version``:
    its version counter at the step it appeared; ``gpu_block``: its storage's block in the GPU model."""
    fact = state.tensors[tid]
    if held is None:
        holders = holders_of(holding, tid)
        held = holders_text(holders) if holders else None
    values = values if values is not None else values_text(fact)
    return [*head_rows(holding, tid, fact, held, label(holding, tid)), *layout_rows(fact),
            *storage_rows(state, fact, gpu_block), *flag_rows(fact), *link_rows(state, holding, fact),
            *tail_rows(fact, born, born_version, values)]


# The rows in the panel's order, in five runs: those that read only the tensor's own fact
# (``layout_rows``, ``flag_rows``, ``tail_rows``) are the same for as long as the fact is, and the
# facts builder keeps them; the others read its names, holders, storage and links, and are read again.
REFUSED = "—"  # a fact torch refuses to give: the "torch refuses" row says why


def head_rows(holding: Holding, tid: str, fact: TensorFact, held: str | None,
              title: str) -> list[tuple[str, str]]:
    """title (``names.label``: what the views call it), names, id and "held by"."""
    named = holding.is_named(tid)
    rows: list[tuple[str, str]] = [
        ("title", title),
        # the labels that are torch's attribute names (shape, grad_fn, _version …) stay as torch spells them
        (_("names"), fold_names(holding.names(tid)) if named else _("no variable reaches it")),
        ("id", _("{id} · storage {storage}").format(id=tid, storage=fact.storage) if fact.storage else tid),
    ]
    if held:
        rows.append((_("held by"), held))
    return rows


def layout_rows(fact: TensorFact) -> list[tuple[str, str]]:
    return [
        ("shape", fmt.shape(fact.shape)),
        ("dtype", fact.dtype),
        ("stride", fmt.shape(fact.stride)),
        ("storage_offset", str(fact.storage_offset)),
    ]


def storage_rows(state: State, fact: TensorFact, gpu_block: int | None) -> list[tuple[str, str]]:
    """Its storage's size, and the block the storage would take on a GPU (``app.trace.gpu``: the
    caching allocator's model), when it takes one."""
    storage = state.storages.get(fact.storage) if fact.storage else None
    rows = [(_("storage"), fmt.nbytes(storage.nbytes) if storage else _("none"))]
    if storage is not None and gpu_block is not None:
        rows.append((_("on a GPU"), _("a {block} block (a model of the CUDA caching allocator)").format(
            block=fmt.nbytes(gpu_block))))
    return rows


def flag_rows(fact: TensorFact) -> list[tuple[str, str]]:
    layout = Layout(tuple(fact.shape), tuple(fact.stride), fact.storage_offset)
    return [
        ("is_contiguous", str(is_contiguous(layout))),
        ("requires_grad", str(fact.requires_grad)),
        # torch refuses is_leaf together with grad_fn (a view from unbind/split whose base was
        # written in place): the panel says neither True nor False
        ("is_leaf", REFUSED if "grad_fn" in fact.unavailable else str(fact.is_leaf)),
    ]


def link_rows(state: State, holding: Holding, fact: TensorFact) -> list[tuple[str, str]]:
    """grad_fn, grad and _base: what they point at may change while the fact does not."""
    node = state.nodes.get(fact.grad_fn) if fact.grad_fn else None
    # what torch prints for a node it refuses to give (``grad_fn=<Invalid>`` in a tensor's repr)
    shown = "<Invalid>" if "grad_fn" in fact.unavailable else short_node_name(node.name) if node else "None"
    rows = [("grad_fn", shown),
            ("grad", _who(fact.grad, state, holding))]
    if fact.is_view or fact.base:
        rows.append(("_base", _who(fact.base, state, holding)))
    return rows


def tail_rows(fact: TensorFact, born: int | None, born_version: int | None,
              values: str | None) -> list[tuple[str, str]]:
    """_version, the flags shown only when set, created and values. ``born`` and ``born_version`` are
    fixed once the tensor appears: with ``values`` (one per fact) these rows follow the fact alone."""
    rows = [("_version", _version_text(fact, born, born_version))]
    if fact.retains_grad:
        rows.append(("retains_grad", "True"))
    if fact.is_inference:
        rows.append(("is_inference", "True"))
    if fact.device != "cpu":
        rows.append(("device", fact.device))
    if born is not None:
        rows.append((_("created"), _("line {line}").format(line=born)))
    if values is not None:
        rows.append((_("values"), values))
    if fact.unavailable:  # torch's own reason for each fact it would not give
        rows.append((_("torch refuses"), "; ".join(
            f"{name}{', is_leaf' if name == 'grad_fn' else ''}: {reason}"
            for name, reason in sorted(fact.unavailable.items()))))
    return rows


def _version_text(fact: TensorFact, born: int | None, born_version: int | None) -> str:
    """The counter; a leaf that was already past 0 when it appeared says why (a fresh ``nn.Linear``
    weight is at v1: its constructor initialised it in place, and every in-place write counts)."""
    if fact.version is None:
        return "—"
    # a parameter (a leaf that requires grad), not a .grad buffer: backward's accumulation into a new
    # .grad bumps its counter too, and no constructor is to blame for that
    if (fact.is_leaf and fact.requires_grad and born is not None and born_version
            and fact.version == born_version):
        return _("{version} · initialised in place when line {line} made it (nn.Linear fills a new weight "
                 "and bias with kaiming_uniform_ / uniform_: each in-place write counts)").format(
                     version=fact.version, line=born)
    return str(fact.version)


def _same_values(old: TensorFact, new: TensorFact) -> bool:
    """Whether ``new`` writes the values row ``old`` wrote: a tensor's fact is new at every step that
    moved its ``.grad``, version or names (an optimizer loop: three facts a step, one with new values),
    and formatting its values again is the facts panel's largest cost. Equal values write alike, but
    for the zeros (``0.0 == -0.0``, written "0.0" and "-0.0"): values that hold one are compared bit
    for bit."""
    if old.values is None or old.dtype != new.dtype or old.values != new.values:
        return False
    if _no_zero(new.values):
        return True
    try:
        return array("d", fmt.leaves(old.values)).tobytes() == array("d", fmt.leaves(new.values)).tobytes()
    except TypeError:  # a "NaN" among them: not worth comparing further
        return False


def _no_zero(values: Any) -> bool:
    if isinstance(values, list):
        return all(map(_no_zero, values)) if values and isinstance(values[0], list) else 0 not in values
    return values != 0


@dataclass(frozen=True)
class Facts:
    pairs: list[tuple[str, str]]
    entries: list[list[int]]
    details: dict[str, list[Run]]  # tensor id -> runs of an index into ``entries``
    born: dict[str, int]  # tensor or node id -> the line of the step where it first appears


class FactsBuilder:
    def __init__(self, gpu: GpuMemory | None = None) -> None:
        self.gpu = gpu  # fed each step before this builder: the storages' blocks after it
        self.pairs: dict[tuple[str, str], int] = {}
        self.entries: dict[tuple[int, ...], int] = {}
        self.details: dict[str, list[Run]] = {}
        self.born: dict[str, int] = {}
        self.born_version: dict[str, int | None] = {}  # tensor -> its version counter when it appeared
        self.by_grad_fn: dict[str, set[str]] = {}  # node -> tensors whose grad_fn it is
        # tensor -> (fact, its layout, flag and tail rows as indices into ``pairs``): what its fact alone says
        self._own: dict[str, tuple[TensorFact, tuple[int, ...], tuple[int, ...], tuple[int, ...]]] = {}
        # tensor -> its latest fact with values and their row's text (kept when the tensor goes: the
        # same id may come back with the same values)
        self._values: dict[str, tuple[TensorFact, str | None]] = {}
        # tensor -> how many graph nodes hold it in each role, kept from the node changes: a leaf that
        # 1,000 iterations' nodes saved reads "MulBackward0.self ×1000" without listing them each time
        self.roles: dict[str, Counter[str]] = {}

    def add_step(self, step: StepInput) -> None:
        state, changes, holding, held = step.state, step.changes, step.holding, step.held
        for kind in ("tensors", "nodes"):
            for ident in changes.appeared(kind):
                self.born.setdefault(ident, changes.line)
        for tid in changes.appeared("tensors"):
            if tid in state.tensors:
                self.born_version.setdefault(tid, state.tensors[tid].version)
        dirty = set(changes.old_tensors) | held.renamed | held.reheld
        for tid, old in changes.old_tensors.items():
            new = state.tensors.get(tid)
            if old is not None and old.grad_fn is not None and (new is None or new.grad_fn != old.grad_fn):
                self.by_grad_fn.get(old.grad_fn, set()).discard(tid)
            if new is not None and new.grad_fn is not None:
                self.by_grad_fn.setdefault(new.grad_fn, set()).add(tid)
        for nid, old_node in changes.old_nodes.items():
            dirty.update(self.by_grad_fn.get(nid, ()))
            new_node = state.nodes.get(nid)
            for node, delta in ((old_node, -1), (new_node, 1)):
                for tid, role in node_holds(node) if node is not None else ():
                    counts = self.roles.setdefault(tid, Counter())
                    counts[role] += delta
                    if counts[role] <= 0:
                        del counts[role]
                    dirty.add(tid)
        for sid in changes.old_storages:
            dirty.update(step.users.get(sid))
        for tid in list(dirty):  # the .grad / ._base rows of others name this one
            dirty.update(holding.pointers.get(tid, ()))
        for tid in sorted(dirty, key=id_order):  # in id order: the same run gives the same payload
            runs = self.details.setdefault(tid, [])
            fact = state.tensors.get(tid)
            if fact is None:
                change(runs, step.index, None)
                self._own.pop(tid, None)
                continue
            change(runs, step.index, self.entries.setdefault(self._rows(tid, fact, step),
                                                             len(self.entries)))

    def _rows(self, tid: str, fact: TensorFact, step: StepInput) -> tuple[int, ...]:
        """``tensor_facts`` as indices into ``pairs``. The runs that read only the fact are computed
        (and their values formatted) once per fact; rows new to ``pairs`` are added in the panel's
        order either way, so the table comes out as if every row were computed every time."""
        entry, state, holding = self._entry, step.state, step.holding
        head = entry(head_rows(holding, tid, fact, self._held(tid, holding), step.label(tid)))
        own = self._own.get(tid)
        fresh = own is None or own[0] is not fact
        # A new fact is most often new values or a new .grad in the layout of the last one: its layout
        # and flag rows are the last fact's when what they read is equal (rows new to ``pairs`` are
        # still added in the panel's order).
        layout = flags = None
        if own is not None:
            last = own[0]
            if (last.shape, last.stride, last.storage_offset) == (fact.shape, fact.stride,
                                                                  fact.storage_offset):
                layout = own[1] if last.dtype == fact.dtype else None
                same_flags = ((last.requires_grad, last.is_leaf, "grad_fn" in last.unavailable)
                              == (fact.requires_grad, fact.is_leaf, "grad_fn" in fact.unavailable))
                flags = own[2] if same_flags else None
        layout = layout if layout is not None else entry(layout_rows(fact))
        gpu_block = self.gpu.block_size(fact.storage) if self.gpu is not None and fact.storage else None
        storage = entry(storage_rows(state, fact, gpu_block))
        flags = flags if flags is not None else entry(flag_rows(fact))
        links = entry(link_rows(state, holding, fact))
        if fresh:
            values = self._values_text(tid, fact)
            tail = entry(tail_rows(fact, self.born.get(tid), self.born_version.get(tid), values))
            self._own[tid] = (fact, layout, flags, tail)
        else:
            tail = own[3]
        return head + layout + storage + flags + links + tail

    def _values_text(self, tid: str, fact: TensorFact) -> str | None:
        """``values_text`` of a new fact, reused when the tensor's last values are written alike."""
        last = self._values.get(tid)
        if last is not None and _same_values(last[0], fact):
            return last[1]
        text = values_text(fact)
        if fact.values is not None:
            self._values[tid] = (fact, text)
        return text

    def _entry(self, rows: list[tuple[str, str]]) -> tuple[int, ...]:
        """The rows as indices into ``pairs``, each new row added (a loop, not a generator: this
        runs for every row of every tensor a step touches)."""
        pairs = self.pairs
        entry = []
        for pair in rows:
            found = pairs.get(pair)
            if found is None:
                found = pairs[pair] = len(pairs)
            entry.append(found)
        return tuple(entry)

    def _held(self, tid: str, holding: Holding) -> str:
        """The "held by" row: the roles that hold ``tid``, or what holds a view of it (``…._base``)."""
        counts = self.roles.get(tid)
        if counts:
            return roles_text(counts)
        holders = holding.holders(tid)
        return holders_text(holders) if holders else ""

    def finish(self, count: int) -> Facts:
        for runs in self.details.values():
            close_runs(runs, count)
        details = {tid: runs for tid, runs in self.details.items() if runs}
        return Facts(list(self.pairs), [list(e) for e in self.entries], details, self.born)

"""The memory view: storages as strips of element cells, tensors as footprint rows over them.

Tensors that share a storage sit on the same strip: a ``detach()`` on its original's, a ``clone()``
on a new one. A storage no named tensor reaches is "held by the graph" (``Holding`` decides).

The page holds the union of what any step shows, so what repeats is folded. Storages that look alike
— same group, same size and layouts, names that differ only in subscripts (``losses[0]`` …
``losses[999]``), or held the same way — form a *family*, drawn as a few *slots*: its first members,
a count of the rest (which expands into their list), and its newest member. A slot shows one member,
then another: its cells, labels and tensor (``data-t``) are tracks like any text. A 1,000-iteration
leak is then a handful of strips, and each step records only what it changed: a cell's text and its
"changed" mark change only when its storage's values do, a slot's member only when the family does.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Iterator
from dataclasses import dataclass, field
from itertools import islice

from app.i18n import gettext as _
from app.i18n import ngettext
from app.render import fmt
from app.render.arrays import ArrayIndex, BufferBuilder
from app.render.folds import Entry, Members
from app.render.footprint import Layout
from app.render.kinds import GRAPH, KINDS, Kind, storage_kind, tensor_kind_of
from app.render.memory_records import (
    CELLS_PER_LINE,
    Record,
    RowNow,
    Shape,
    layout_of,
    member_label,
    strip_for,
    tensor_names,
    unmarked,
)
from app.render.memory_view import Family, Group, Largest, MemoryView, Strip
from app.render.names import family, holders_of, holders_text, id_order, tensor_kind
from app.render.steps import StepInput
from app.render.tracks import Tracks
from app.schema import StorageFact, TensorFact

CELL_LIMIT = 2 * CELLS_PER_LINE  # storages of at most this many elements are drawn cell by cell (two
#                                  lines at most, the names on the first); longer ones as one scaled bar
MAX_ROWS = 12  # footprint rows per strip; further tensors on one storage are counted
FIRST_SLOTS = 2  # a family shows its first members, then a count, then its newest member
MAX_FAMILIES = 40  # per group; storages of further families are counted and listed, not drawn
SEP = " "  # between the cell texts of a strip in its one text track (``fmt.scalar`` has no spaces)
LARGEST = 5  # storages in the "largest" list
OPEN_UP_TO = 12  # a view that never draws more strips than this opens its groups; a larger one shows
#                  each group as one line, closed


@dataclass
class _Slot:
    strip: Strip
    showing: str | None = None


@dataclass
class _Family:
    index: int
    group: Kind
    title: str
    shape: Shape | None  # None: a group's overflow, drawn as a count only
    order: int  # where it sits in its group: where its first member's storage first appeared
    alive: dict[str, None] = field(default_factory=dict)  # members in order of joining
    slots: list[_Slot] = field(default_factory=list)
    slot_of: dict[str, int] = field(default_factory=dict)
    fold_k: int | None = None
    count_k: int | None = None
    hidden: int = 0
    shown: int = 0  # slots showing a member
    members: Members = field(default_factory=Members)

    def wanted(self) -> list[str]:
        """The members the slots show: all when few, else the first ones and the newest."""
        if self.shape is None:
            return []
        if len(self.alive) <= FIRST_SLOTS + 1:
            return list(self.alive)
        return [*islice(self.alive, FIRST_SLOTS), next(reversed(self.alive))]


class MemoryBuilder:
    """Fed by ``drive``: keeps each live storage's record and its family's slots up to date."""

    def __init__(self, tracks: Tracks) -> None:
        self.tracks = tracks
        self.empty_k = tracks.key(("memory-empty",))
        self.tallies: dict[Kind, _Tally] = {}  # a group's storages and bytes; PARAMETERS: all modules'
        self._tallied: dict[str, tuple[Kind, int]] = {}  # storage -> the group and bytes it counts in
        self._retallied: dict[Kind, None] = {}  # in order: the payload is the same in any process
        self.records: dict[str, Record] = {}
        self.member_of: dict[str, _Family] = {}
        self.families: dict[tuple, _Family] = {}
        self.first_seen: dict[str, int] = {}  # storage -> its rank in order of first appearance
        self.per_group: dict[Kind, int] = {}  # families per group
        self.strips_shown = 0  # strips the step draws
        self.most_strips = 0  # the most strips one step draws
        self.largest = [self._largest_slot(i) for i in range(LARGEST)]
        self._top: list[str] = []  # the storages the list shows, largest first
        self.most_storages = 0
        self._marked: set[str] = set()  # storages whose "changed" / "bump" marks end at the next step
        self._texts: dict[str, tuple[StorageFact, tuple[str, ...]]] = {}  # storage -> (fact, cell texts)
        # tensor -> (fact, its storage's element size, (its layout, how it reads its cells), its version
        # text): what a row reads of the tensor's fact alone, made again only when the fact is new
        self._rows: dict[str, tuple[TensorFact, int, tuple[Layout, str], str]] = {}
        self.arrays = ArrayIndex()
        self.buffers = BufferBuilder(tracks)

    # ---- one step --------------------------------------------------------------------------------
    def add_step(self, step: StepInput) -> None:
        state, changes, held = step.state, step.changes, step.held
        marked, self._marked = self._marked, set()
        dirty: set[str] = set()
        for tid, old in changes.old_tensors.items():
            new = state.tensors.get(tid)
            dirty.update(f.storage for f in (old, new) if f is not None and f.storage is not None)
        dirty.update(changes.old_storages)
        for aid, old in changes.old_arrays.items():  # numpy arrays: views of a storage, or own buffers
            new = state.arrays.get(aid)
            self.arrays.move(aid, old, new)
            dirty.update(f.storage for f in (old, new) if f is not None and f.storage is not None)
            self.buffers.change(aid, new, step.index)
        self.buffers.end_step(step.index)
        dirty.update(held.storage_flips)
        for tid in held.renamed | held.reheld:
            fact = state.tensors.get(tid)
            if fact is not None and fact.storage is not None:
                dirty.add(fact.storage)
        touched: dict[int, _Family] = {}
        for sid in sorted(dirty | marked, key=id_order):
            self._update(sid, step, touched, sid not in dirty)
        for fam in sorted(touched.values(), key=lambda f: f.index):
            self._assign(fam, step.index)
        for group in self._retallied:
            tally = self.tallies[group]
            self.tracks.change_vis(tally.k, step.index, tally.storages > 0)
            self.tracks.change_text(tally.size_k, step.index, _size_text(tally.storages, tally.nbytes))
        self._retallied.clear()
        self.tracks.change_vis(self.empty_k, step.index, not state.storages)
        self.most_storages = max(self.most_storages, len(self.records))
        self.most_strips = max(self.most_strips, self.strips_shown)
        if dirty:
            self._rank(dirty, step.index)

    def _update(self, sid: str, step: StepInput, touched: dict[int, _Family], unmark: bool = False) -> None:
        """``unmark``: nothing the record reads changed at this step (no tensor on the storage, the
        storage, its group, names, holders or arrays): only its "changed" and "bump" marks end."""
        storage = step.state.storages.get(sid)
        prev = self.records.get(sid)
        fam = self.member_of.get(sid)
        if storage is None:
            if fam is not None:
                self._leave(fam, sid, step.index)
                touched[fam.index] = fam
            self.records.pop(sid, None)
            self._texts.pop(sid, None)
            return
        self.first_seen.setdefault(sid, len(self.first_seen))
        record = unmarked(prev) if unmark and prev is not None else self._record(sid, storage, step, prev)
        self.records[sid] = record
        if record.changed or any(row.bumped for row in record.rows):
            self._marked.add(sid)
        if fam is None or not self._fits(fam, record):
            if fam is not None:
                self._leave(fam, sid, step.index)
                touched[fam.index] = fam
            fam = self._family(sid, record)
            fam.alive[sid] = None
            self.member_of[sid] = fam
            touched[fam.index] = fam
        elif record != prev and sid in fam.slot_of:
            self._show(fam.slots[fam.slot_of[sid]], sid, record, step.index)
        tallied = self._tallied.get(sid)
        if tallied != (fam.group, record.shape.nbytes):  # joined, or an overflow member grew
            if tallied is not None:
                self._untally(sid)
            self._tally(sid, fam.group, record.shape.nbytes)
        first = record.rows[0].tensor if record.rows else None
        fam.members.set(sid, step.index, member_label(record), first)

    def _record(self, sid: str, storage: StorageFact, step: StepInput, prev: Record | None) -> Record:
        state, holding, old_tensors = step.state, step.holding, step.changes.old_tensors
        tids = sorted(step.users.get(sid), key=id_order)
        drawn = tids[:MAX_ROWS]
        group = (storage_kind([tensor_kind_of(holding, tid, state.tensors[tid]) for tid in tids])
                 if holding.storage_named(sid) else GRAPH)
        count = storage.nbytes // max(storage.element_size, 1)
        valued = storage.values is not None
        scaled = not valued or count > CELL_LIMIT
        layouts, rows = [], []
        for tid in drawn:
            fact = state.tensors[tid]
            own = self._rows.get(tid)
            if own is None or own[0] is not fact or own[1] != storage.element_size:
                version = "" if fact.version is None else f"v{fact.version}"
                own = self._rows[tid] = (fact, storage.element_size, layout_of(fact, storage), version)
            layouts.append(own[2])
            version = own[3]
            old = old_tensors.get(tid)
            bumped = (old is not None and old.version is not None and fact.version is not None
                      and fact.version > old.version)
            kind = tensor_kind(fact, holding.is_named(tid))
            rows.append(RowNow(tid, step.label(tid), kind, version, bumped))
        cells = None
        changed = ""
        if valued:
            cells = self._cells(sid, storage, count)
            old_storage = step.changes.old_storages.get(sid)
            if (prev is not None and prev.cells is not None and old_storage is not None
                    and prev.cells != cells):  # equal tuples: nothing changed, no cell to compare
                pairs = enumerate(zip(prev.cells, cells, strict=False))
                changed = SEP.join(str(i) for i, (a, b) in pairs if a != b)
        note = None
        if group is GRAPH:
            roles = [role for tid in tids for role in holders_of(holding, tid)]
            note = _("held by {holders}").format(holders=holders_text(roles)) if roles else None
        labels = [row.label for row in rows]
        shape = Shape(group, count, storage.element_size, storage.dtype, storage.nbytes, scaled, valued,
                       tuple(layouts))
        title = family(labels[0]) if labels else _("storage")
        return Record(shape, family(" · ".join(labels)), title, cells, changed, note, len(tids) - len(drawn),
                       tuple(rows), self.arrays.text(sid, state.arrays))

    def _cells(self, sid: str, storage: StorageFact, count: int) -> tuple[str, ...]:
        """Every cell's text, formatted again only when the storage's fact changed."""
        cached = self._texts.get(sid)
        if cached is not None and cached[0] is storage:
            return cached[1]
        scalar = fmt.scalar
        texts = [scalar(v) for v in (storage.values or ())[:count]]
        if SEP in "".join(texts):  # only a value written as text can hold one: rare, so looked for at once
            texts = [text.replace(SEP, "") for text in texts]
        cells = tuple(texts + [""] * (count - len(texts)))
        self._texts[sid] = (storage, cells)
        return cells

    def _fits(self, fam: _Family, record: Record) -> bool:
        key = self._key(record)
        return self.families.get(key) is fam or (fam.shape is None and key not in self.families
                                                  and fam.group == record.shape.group)

    @staticmethod
    def _key(record: Record) -> tuple:
        return (record.shape, record.pattern)

    def _family(self, sid: str, record: Record) -> _Family:
        key = self._key(record)
        fam = self.families.get(key)
        if fam is not None:
            return fam
        group = record.shape.group
        if self.per_group.get(group, 0) >= MAX_FAMILIES:
            overflow = ("overflow", group)
            fam = self.families.get(overflow)
            if fam is None:
                fam = self.families[overflow] = _Family(len(self.families), group, _("other storages"), None,
                                                        1 << 62)  # after every family
            return fam
        self.per_group[group] = self.per_group.get(group, 0) + 1
        # A storage whose family changes (x gets a view d: "x" becomes "x · d") keeps its place.
        fam = self.families[key] = _Family(len(self.families), group, record.title, record.shape,
                                           self.first_seen[sid])
        return fam

    def _leave(self, fam: _Family, sid: str, index: int) -> None:
        del fam.alive[sid]
        del self.member_of[sid]
        self._untally(sid)
        fam.members.leave(sid, index)

    # ---- groups and the largest storages ---------------------------------------------------------
    def _tally_of(self, group: Kind) -> _Tally:
        tally = self.tallies.get(group)
        if tally is None:
            tally = self.tallies[group] = _Tally(self.tracks.key(("group", *group)),
                                                 self.tracks.key(("group", *group, "size")))
        return tally

    def _tally(self, sid: str, group: Kind, nbytes: int) -> None:
        """``sid`` counts in ``group`` (and, a parameter, in all parameters') from this step on."""
        self._tallied[sid] = (group, nbytes)
        for key in _tallies(group):
            tally = self._tally_of(key)
            tally.storages += 1
            tally.nbytes += nbytes
            self._retallied[key] = None

    def _untally(self, sid: str) -> None:
        group, nbytes = self._tallied.pop(sid)
        for key in _tallies(group):
            tally = self.tallies[key]
            tally.storages -= 1
            tally.nbytes -= nbytes
            self._retallied[key] = None

    def _largest_slot(self, i: int) -> Largest:
        k = self.tracks.key
        return Largest(k(("largest", i)), k(("largest", i, "name")), k(("largest", i, "kind")),
                       k(("largest", i, "size")))

    def _rank_key(self, sid: str) -> tuple[int, int]:
        return (-self.records[sid].shape.nbytes, self.first_seen[sid])

    def _rank(self, dirty: set[str], index: int) -> None:
        """Keep the list of the largest storages (biggest first, the older first among equals): made
        again only when a storage it shows changed, or one that changed would now be in it."""
        top = self._top
        records = self.records
        if top and len(top) == min(LARGEST, len(records)) and dirty.isdisjoint(top):
            last = self._rank_key(top[-1])
            if not any(sid in records and self._rank_key(sid) < last for sid in dirty):
                return
        self._top = top = heapq.nsmallest(LARGEST, records, key=self._rank_key)
        kinds = dict(_kind_titles())
        for slot, sid in itertools.zip_longest(self.largest, top):
            if slot is None:
                break
            record = records.get(sid) if sid is not None else None
            self.tracks.change_vis(slot.k, index, record is not None)
            if record is None:
                self.tracks.change_ref(slot.k, index, None)
                continue
            self.tracks.change_ref(slot.k, index, record.rows[0].tensor if record.rows else None)
            self.tracks.change_text(slot.name_k, index, tensor_names(record))
            self.tracks.change_text(slot.kind_k, index, kinds[record.shape.group.kind])
            self.tracks.change_text(slot.size_k, index, fmt.nbytes(record.shape.nbytes))

    # ---- slots -----------------------------------------------------------------------------------
    def _assign(self, fam: _Family, index: int) -> None:
        want = fam.wanted()
        for j, sid in enumerate(want):
            if j == len(fam.slots):
                fam.slots.append(_Slot(self._strip(fam, j)))
            slot = fam.slots[j]
            if slot.showing != sid:
                if slot.showing is not None and fam.slot_of.get(slot.showing) == j:
                    del fam.slot_of[slot.showing]
                slot.showing = sid
                fam.slot_of[sid] = j
                self._show(slot, sid, self.records[sid], index)
        for j in range(len(want), len(fam.slots)):
            slot = fam.slots[j]
            if slot.showing is not None:
                if fam.slot_of.get(slot.showing) == j:
                    del fam.slot_of[slot.showing]
                slot.showing = None
                self._hide(slot.strip, index)
        self.strips_shown += len(want) - fam.shown
        fam.shown = len(want)
        hidden = len(fam.alive) - len(want)
        if hidden != fam.hidden:
            if fam.fold_k is None:
                fam.fold_k = self.tracks.key(("fold", fam.index))
                fam.count_k = self.tracks.key(("fold", fam.index, "count"))
            self.tracks.change_vis(fam.fold_k, index, hidden > 0)
            self.tracks.change_text(fam.count_k, index, f"{hidden:,}" if hidden else None)
            fam.hidden = hidden

    def _hide(self, strip: Strip, index: int) -> None:
        """A slot with no member hides and stands for no tensor (highlights must not find it)."""
        self.tracks.change_vis(strip.k, index, False)
        self.tracks.change_ref(strip.k, index, None)
        for row in strip.rows:
            self.tracks.change_ref(row.k, index, None)

    def _show(self, slot: _Slot, sid: str, record: Record, index: int) -> None:
        tracks, strip = self.tracks, slot.strip
        tracks.change_vis(strip.k, index, True)
        tracks.change_ref(strip.k, index, sid)
        tracks.change_text(strip.note_k, index, record.note)
        more = _("+{n} more tensors on this storage").format(n=record.more) if record.more else None
        tracks.change_text(strip.more_k, index, more)
        tracks.change_text(strip.numpy_k, index, record.numpy or None)
        if record.cells is not None:
            tracks.change_text(strip.cells_k, index, SEP.join(record.cells))
            tracks.change_state(strip.cells_k, index, record.changed)
        for row, now in zip(strip.rows, record.rows, strict=True):
            tracks.change_ref(row.k, index, now.tensor)
            tracks.change_state(row.k, index, now.kind)
            tracks.change_text(row.label_k, index, now.label)
            tracks.change_text(row.version_k, index, now.version or None)
            tracks.change_state(row.version_k, index, "bump" if now.bumped else "")

    def _strip(self, fam: _Family, j: int) -> Strip:
        assert fam.shape is not None
        return strip_for(self.tracks, fam.shape, ("strip", fam.index, j))

    # ---- the view --------------------------------------------------------------------------------
    def finish(self, count: int) -> MemoryView:
        folds: dict[int, list[Entry]] = {}
        by_group: dict[Kind, list[Family]] = {}
        for fam in sorted(self.families.values(), key=lambda f: (f.order, f.index)):
            entries = fam.members.close(count)
            if fam.fold_k is not None:
                folds[fam.fold_k] = entries
            if not fam.slots and fam.fold_k is None:
                continue
            strips = [slot.strip for slot in fam.slots]
            by_group.setdefault(fam.group, []).append(Family(
                fam.title, tuple(strips[:FIRST_SLOTS]), fam.fold_k, fam.count_k, tuple(strips[FIRST_SLOTS:])))
        groups = []
        for kind, title, hint in KINDS:
            if kind == "parameter":  # a line per module, in the order they appeared, under one for all
                parts = tuple(self._group(group, group.module, "", families)
                              for group, families in by_group.items() if group.kind == kind and group.module)
                loose = by_group.get(Kind(kind), [])  # plain variables: no module line of their own
                if parts or loose:
                    tally = self.tallies[PARAMETERS]
                    groups.append(Group(tally.k, tally.size_k, kind, _(title), _(hint), tuple(loose), parts))
            elif (group := Kind(kind)) in by_group:
                groups.append(self._group(group, _(title), _(hint), by_group[group]))
        opened = self.most_strips <= OPEN_UP_TO
        # the list when the groups start closed (their strips then show no one) and it says more than them
        largest = tuple(self.largest) if self.most_storages > LARGEST and not opened else ()
        if not largest:
            self.tracks.drop([k for s in self.largest for k in (s.k, s.name_k, s.kind_k, s.size_k)])
        return MemoryView(self.empty_k, tuple(groups), folds, self.buffers.finish(), largest, open=opened)

    def _group(self, group: Kind, title: str, hint: str, families: list[Family]) -> Group:
        tally = self.tallies[group]
        return Group(tally.k, tally.size_k, group.kind, title, hint, tuple(families))


@dataclass
class _Tally:
    """A group's storages and bytes at the step being read."""

    k: int
    size_k: int
    storages: int = 0
    nbytes: int = 0


PARAMETERS = Kind("parameter", "\0all")  # the tally of every module's parameters


def _tallies(group: Kind) -> tuple[Kind, ...]:
    """The lines a storage counts in: its group's; a parameter's in all parameters' too (a parameter
    no module keeps has no line of its own: it is drawn in that one)."""
    if group.kind != "parameter":
        return (group,)
    return (group, PARAMETERS) if group.module else (PARAMETERS,)


def _size_text(storages: int, nbytes: int) -> str | None:
    if not storages:
        return None
    return ngettext("{n} storage · {size}", "{n} storages · {size}", storages).format(
        n=storages, size=fmt.nbytes(nbytes))


def _kind_titles() -> Iterator[tuple[str, str]]:
    return ((kind, _(title)) for kind, title, _hint in KINDS)


"""The memory view: storages as strips of element cells, tensors as footprints over them.

One strip per storage and per group, over all steps (the union), so stepping only shows, hides and
relabels elements. Tensors that share a storage sit on the same strip: a ``detach()`` on its
original's, a ``clone()`` on a new one. A storage no named tensor reaches is "held by the graph".
"""

from __future__ import annotations

from dataclasses import dataclass

from app.render import fmt
from app.render.footprint import Layout, cell_map, coverage, layout_flags
from app.render.names import display_name, tensor_kind
from app.render.tracks import Tracks
from app.schema import RunResult, StorageFact, TensorFact

SMALL_LIMIT = 64  # storages of at most this many elements are drawn cell by cell
CELLS_PER_LINE = 6
BINS = 32
LEVELS = 4  # coverage shades of a scaled strip: 1 (a sliver) .. 4 (every byte)

ITEMSIZE = {
    "bool": 1, "uint8": 1, "int8": 1, "int16": 2, "int32": 4, "int64": 8, "float16": 2, "bfloat16": 2,
    "float32": 4, "float64": 8, "complex32": 4, "complex64": 8, "complex128": 16, "uint16": 2,
    "uint32": 4, "uint64": 8, "float8_e4m3fn": 1, "float8_e5m2": 1,
}

GROUPS = (
    ("named", "Reached from your variables", "storages a variable (or its .grad / ._base) reaches"),
    ("graph", "Held by the graph", "storages only the autograd graph keeps alive: saved tensors"),
)


@dataclass(frozen=True)
class Mark:
    """One storage cell under one tensor: which tensor index lives there."""

    text: str
    title: str
    band: int  # parity of the first index: rows of a matrix alternate tints
    many: bool  # an expanded tensor addresses this cell more than once


@dataclass(frozen=True)
class Row:
    k: int
    label_k: int
    version_k: int
    tensor: str
    layout: str
    flags: tuple[str, ...]
    marks: tuple[Mark | None, ...]  # one slot per cell (strips drawn cell by cell)
    levels: tuple[int, ...]  # coverage level per bin (scaled strips)


@dataclass(frozen=True)
class Strip:
    k: int
    note_k: int
    storage: str
    group: str
    size: str  # "6 × float32 · 24 B"
    scale: str  # how a large storage is drawn, else ""
    cells: int
    scaled: bool
    per_bin: int
    cell_keys: tuple[int, ...]
    lines: tuple[tuple[int, int], ...]
    rows: tuple[Row, ...]


@dataclass(frozen=True)
class Group:
    k: int
    name: str
    title: str
    hint: str
    strips: tuple[Strip, ...]


@dataclass(frozen=True)
class MemoryView:
    empty_k: int
    groups: tuple[Group, ...]


def mark_text(indices: list[tuple[int, ...]]) -> Mark:
    first = indices[0]
    title = ", ".join("[" + ", ".join(map(str, i)) + "]" for i in indices[:8])
    if len(indices) > 8:
        title += f" … ({len(indices)} in all)"
    if len(indices) > 1:
        return Mark(f"×{len(indices)}", title, 0, True)
    if not first:
        text = "•"
    elif len(first) <= 3:
        text = ",".join(map(str, first))
    else:
        text = "…"
    # rows of a matrix (or higher) alternate tints; a vector's cells need no banding
    return Mark(text, title, first[0] % 2 if len(first) >= 2 else 0, False)


def _levels(cover: tuple[float, ...]) -> tuple[int, ...]:
    return tuple(0 if c <= 0 else max(1, min(LEVELS, round(c * LEVELS))) for c in cover)


class _MemoryBuilder:
    def __init__(self, tracks: Tracks) -> None:
        self.tracks = tracks
        self.strips: dict[tuple[str, str], dict] = {}
        self.prev_values: dict[str, list[str]] = {}
        self.prev_versions: dict[str, int | None] = {}

    def _strip(self, sid: str, group: str, storage: StorageFact) -> dict:
        found = self.strips.get((sid, group))
        if found is None:
            count = storage.nbytes // max(storage.element_size, 1)
            scaled = storage.values is None or count > SMALL_LIMIT
            cells = 0 if scaled else count
            key = ("strip", sid, group)
            found = self.strips[(sid, group)] = {
                "k": self.tracks.key(key),
                "note_k": self.tracks.key((*key, "note")),
                "storage": sid,
                "group": group,
                "fact": storage,
                "count": count,
                "scaled": scaled,
                "cell_keys": tuple(self.tracks.key((*key, "cell", i)) for i in range(cells)),
                "rows": {},
            }
        return found

    def _row(self, strip: dict, tid: str, fact: TensorFact) -> dict:
        itemsize = ITEMSIZE.get(fact.dtype, strip["fact"].element_size)
        layout = Layout(tuple(fact.shape), tuple(fact.stride), fact.storage_offset, itemsize)
        signature = (layout, fact.dtype)
        found = strip["rows"].get((tid, signature))
        if found is not None:
            return found
        key = ("row", strip["storage"], strip["group"], tid, signature)
        marks: tuple[Mark | None, ...] = ()
        levels: tuple[int, ...] = ()
        cell_size = max(strip["fact"].element_size, 1)
        mapped = None if strip["scaled"] else cell_map(layout, cell_size)
        if mapped is not None:
            slots: list[Mark | None] = [None] * len(strip["cell_keys"])
            for cell, indices in mapped.items():
                if 0 <= cell < len(slots):
                    slots[cell] = mark_text(indices)
            marks = tuple(slots)
        else:
            levels = _levels(coverage(layout, strip["fact"].nbytes, BINS))
        description = f"{fmt.shape(fact.shape)} · stride {fmt.shape(fact.stride)}"
        found = strip["rows"][(tid, signature)] = {
            "k": self.tracks.key(key),
            "label_k": self.tracks.key((*key, "label")),
            "version_k": self.tracks.key((*key, "version")),
            "tensor": tid,
            "layout": description,
            "flags": layout_flags(layout),
            "marks": marks,
            "levels": levels,
        }
        return found

    def add_step(self, index: int, step, names: dict, holders: dict) -> None:
        tracks = self.tracks
        on_storage: dict[str, list[str]] = {}
        for tid, fact in step.tensors.items():
            if fact.storage is not None and fact.storage in step.storages:
                on_storage.setdefault(fact.storage, []).append(tid)
        values_now: dict[str, list[str]] = {}
        for sid, storage in step.storages.items():
            tids = on_storage.get(sid, [])
            group = "named" if any(t in names for t in tids) else "graph"
            strip = self._strip(sid, group, storage)
            tracks.show(strip["k"], index)
            if group == "graph":
                held = sorted({h for t in tids for h in holders.get(t, [])})
                tracks.set_text(strip["note_k"], index, "held by " + ", ".join(held) if held else "")
            self._cells(strip, storage, index, values_now)
            for tid in tids:
                self._place(strip, tid, step.tensors[tid], index, names, holders)
        self.prev_values = values_now
        self.prev_versions = {tid: fact.version for tid, fact in step.tensors.items()}

    def _cells(self, strip: dict, storage: StorageFact, index: int, values_now: dict) -> None:
        if strip["scaled"] or storage.values is None:
            return
        texts = [fmt.scalar(v) for v in storage.values]
        before = self.prev_values.get(strip["storage"])
        values_now[strip["storage"]] = texts
        for i, k in enumerate(strip["cell_keys"]):
            text = texts[i] if i < len(texts) else ""
            self.tracks.set_text(k, index, text)
            if before is not None and i < len(before) and before[i] != text:
                self.tracks.set_state(k, index, "changed")

    def _place(self, strip: dict, tid: str, fact: TensorFact, index: int, names: dict, holders: dict) -> None:
        row = self._row(strip, tid, fact)
        tracks = self.tracks
        tracks.show(row["k"], index)
        tracks.set_state(row["k"], index, tensor_kind(fact, tid in names))
        tracks.set_text(row["label_k"], index, display_name(tid, names, holders))
        if fact.version is not None:
            tracks.set_text(row["version_k"], index, f"v{fact.version}")
            before = self.prev_versions.get(tid)
            if before is not None and fact.version > before:
                tracks.set_state(row["version_k"], index, "bump")

    def finish(self) -> MemoryView:
        groups = []
        for name, title, hint in GROUPS:
            strips = tuple(_freeze(s) for s in self.strips.values() if s["group"] == name)
            group_k = self.tracks.key(("group", name))
            self.tracks.vis.setdefault(group_k, [])
            for strip in strips:  # a group's header shows while any of its strips does
                for first, last, _ in self.tracks.vis.get(strip.k, []):
                    for step in range(first, last + 1):
                        self.tracks.show(group_k, step)
            groups.append(Group(group_k, name, title, hint, strips))
        empty_k = self.tracks.key(("memory-empty",))
        return MemoryView(empty_k, tuple(groups))


def _freeze(strip: dict) -> Strip:
    fact: StorageFact = strip["fact"]
    count = strip["count"]
    cells = len(strip["cell_keys"])
    size = f"{count} × {fact.dtype} · {fmt.nbytes(fact.nbytes)}"
    per_bin = max(1, -(-count // BINS)) if strip["scaled"] else 1
    scale = f"scaled: {per_bin} per block" if strip["scaled"] else ""
    lines = tuple((a, min(a + CELLS_PER_LINE, cells)) for a in range(0, cells, CELLS_PER_LINE))
    rows = tuple(
        Row(**{name: r[name] for name in Row.__dataclass_fields__}) for r in strip["rows"].values()
    )
    return Strip(strip["k"], strip["note_k"], strip["storage"], strip["group"], size, scale, cells,
                 strip["scaled"], per_bin, strip["cell_keys"], lines or ((0, 0),), rows)


def build_memory(result: RunResult, tracks: Tracks, names: list[dict], holders: list[dict]) -> MemoryView:
    """The memory view over every step; ``names``/``holders`` are per step (see ``names.py``)."""
    builder = _MemoryBuilder(tracks)
    for index, step in enumerate(result.steps):
        builder.add_step(index, step, names[index], holders[index])
    view = builder.finish()
    for index, step in enumerate(result.steps):
        if not step.storages:
            tracks.show(view.empty_k, index)
    tracks.vis.setdefault(view.empty_k, [])  # shown only at the steps above
    return view

"""What one storage of the memory view reads as at a step (its record: shape, names, cells, rows),
and the strip a family of such storages is drawn on (``strip_for``), made once per slot from the shape
all its members share."""

from __future__ import annotations

from typing import NamedTuple

from app.dtypes import dtype_itemsize
from app.i18n import gettext as _
from app.render import fmt
from app.render.footprint import Layout, cell_map, coverage, layout_flags
from app.render.grid import grid, reads_as
from app.render.kinds import Kind
from app.render.memory_view import Mark, Row, Strip
from app.render.tracks import Tracks
from app.schema import StorageFact, TensorFact

CELLS_PER_LINE = 6
BINS = 32
LEVELS = 4  # coverage shades of a scaled strip: 1 (a sliver) .. 4 (every byte)


def mark_text(indices: list[tuple[int, ...]]) -> Mark:
    first = indices[0]
    title = ", ".join("[" + ", ".join(map(str, i)) + "]" for i in indices[:8])
    if len(indices) > 8:
        title += _(" … ({n} in all)").format(n=len(indices))
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


def levels_of(cover: tuple[float, ...]) -> tuple[int, ...]:
    return tuple(0 if c <= 0 else max(1, min(LEVELS, round(c * LEVELS))) for c in cover)


# The three records below are rebuilt for every storage a step touches (thousands of times on a long
# run): named tuples, which build several times faster than frozen dataclasses and compare and hash
# the same way, field by field.
class Shape(NamedTuple):
    """What a strip's elements are made of: members of a family all have the same."""

    group: Kind
    count: int
    element_size: int
    dtype: str
    nbytes: int
    scaled: bool
    valued: bool
    rows: tuple[tuple[Layout, str], ...]  # (layout, how it reads its cells: grid.reads_as) of each drawn row


class RowNow(NamedTuple):
    tensor: str
    label: str
    kind: str
    version: str
    bumped: bool


class Record(NamedTuple):
    """One storage as it reads after the latest step that touched it."""

    shape: Shape
    pattern: str
    title: str
    cells: tuple[str, ...] | None
    changed: str
    note: str | None
    more: int
    rows: tuple[RowNow, ...]
    numpy: str = ""  # the numpy arrays viewing it


def strip_for(tracks: Tracks, shape: Shape, key: tuple) -> Strip:
    """The strip a family's slot draws its members on: everything of it its shape fixes (cells,
    lines, footprint marks or coverage bins, grids); who it shows is tracked under ``key``."""
    k = tracks.key
    rows = []
    for r, (layout, dtype) in enumerate(shape.rows):
        marks: tuple[Mark | None, ...] = ()
        levels: tuple[int, ...] = ()
        mapped = None if shape.scaled else cell_map(layout, max(shape.element_size, 1))
        if mapped is not None:
            slots: list[Mark | None] = [None] * shape.count
            for cell, indices in mapped.items():
                if 0 <= cell < len(slots):
                    slots[cell] = mark_text(indices)
            marks = tuple(slots)
        else:
            levels = levels_of(coverage(layout, shape.nbytes, BINS))
        description = f"{fmt.shape(layout.shape)} · stride {fmt.shape(layout.stride)}"
        drawn = grid(layout, shape.count, dtype == shape.dtype, values=shape.valued)
        rows.append(Row(k((*key, "row", r)), k((*key, "row", r, "label")), k((*key, "row", r, "version")),
                        description, layout_flags(layout), marks, levels, drawn))
    cells = 0 if shape.scaled else shape.count
    per_bin = max(1, -(-shape.count // BINS)) if shape.scaled else 1
    lines = tuple((a, min(a + CELLS_PER_LINE, cells)) for a in range(0, cells, CELLS_PER_LINE))
    return Strip(
        k(key), k((*key, "note")), k((*key, "cells")), k((*key, "more")),
        f"{shape.count} × {shape.dtype} · {fmt.nbytes(shape.nbytes)}",
        _("scaled: {n} per block").format(n=per_bin) if shape.scaled else "", cells, shape.scaled,
        shape.valued, per_bin, lines or ((0, 0),), tuple(rows), k((*key, "numpy")),
    )


def unmarked(record: Record) -> Record:
    """The record as ``MemoryBuilder._record`` makes it again the step after its marks: no cell changed, no
    version went up (a sixth of the records a long run makes)."""
    rows = tuple(row._replace(bumped=False) if row.bumped else row for row in record.rows)
    return record._replace(changed="", rows=rows)


def layout_of(fact: TensorFact, storage: StorageFact) -> tuple[Layout, str]:
    """A row's layout (in the tensor's own element size: a dtype view reads the bytes in other units)
    and how it reads the storage's cells."""
    itemsize = dtype_itemsize(fact.dtype)
    if itemsize is None:
        itemsize = storage.element_size
    return Layout(tuple(fact.shape), tuple(fact.stride), fact.storage_offset, itemsize), reads_as(fact)


def tensor_names(record: Record) -> str:
    """The names of a storage's first tensors."""
    return " · ".join(row.label for row in record.rows[:3]) or _("no tensor")


def member_label(record: Record) -> str:
    """How a member reads in its family's expanded list: its tensors' names, its size."""
    return f"{tensor_names(record)} — {record.shape.count} × {record.shape.dtype}"

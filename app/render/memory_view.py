"""The memory view's model: what ``app.render.memory.MemoryBuilder`` hands the page's ``_memory.html``
and the picture's ``svg_memory``: groups of storage families, each a few strips of cells with a
footprint row per tensor, whose texts and members are tracks (``app.render.tracks``)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from app.render.arrays import Buffers
from app.render.folds import Entry
from app.render.grid import Grid


@dataclass(frozen=True)
class Mark:
    """One storage cell under one tensor: which tensor index lives there."""

    text: str
    title: str
    band: int  # parity of the first index: rows of a matrix alternate tints
    many: bool  # an expanded tensor addresses this cell more than once


@dataclass(frozen=True)
class Row:
    """A footprint row: its layout is fixed for the strip; who it is (label, version) is tracked."""

    k: int  # ref: the tensor (data-t); state: its legend kind
    label_k: int
    version_k: int  # text "v3"; state "bump" at the step the version went up
    layout: str
    flags: tuple[str, ...]
    marks: tuple[Mark | None, ...]  # one slot per cell (strips drawn cell by cell)
    levels: tuple[int, ...]  # coverage level per bin (scaled strips)
    grid: Grid | None = None  # a 2-D tensor's rows × columns over the strip's cells (app.render.grid)


@dataclass(frozen=True)
class Strip:
    k: int  # vis; ref: the storage shown (data-s)
    note_k: int  # "held by …" (graph group)
    cells_k: int  # text: every cell's text, SEP-separated; state: indices of the cells just changed
    more_k: int  # "+3 more tensors on this storage"
    size: str  # "6 × float32 · 24 B"
    scale: str  # how a large storage is drawn, else ""
    cells: int  # cells drawn one by one (0: the storage is drawn as one scaled bar)
    scaled: bool
    valued: bool  # the storage's values are read (cells_k holds them): a bar shows them as one line
    per_bin: int
    lines: tuple[tuple[int, int], ...]
    rows: tuple[Row, ...]
    numpy_k: int = -1  # text: the numpy arrays that are views of this storage (app.render.arrays)


@dataclass(frozen=True)
class Family:
    title: str  # what its members are called: "losses[…]", "self of Sin"
    first: tuple[Strip, ...]
    fold_k: int | None  # the "N more" element and its member list, when the family ever folds
    count_k: int | None  # the N
    last: tuple[Strip, ...]


@dataclass(frozen=True)
class Group:
    """One kind of memory (``app.render.kinds``): one line, its storages and bytes at the step, that
    opens into its strips — or, for parameters, into one such group per module."""

    k: int  # vis: the group has storages at the step
    size_k: int  # text: "3 storages · 1.2 KiB"
    name: str  # its kind: parameter, gradient, …, graph
    title: str
    hint: str
    families: tuple[Family, ...]
    parts: tuple[Group, ...] = ()  # parameters: a group per module


@dataclass(frozen=True)
class Largest:
    """One line of the "largest storages" list: the storage's first tensor, what it is, its size."""

    k: int  # vis; ref: the storage's first tensor (data-t)
    name_k: int
    kind_k: int
    size_k: int


@dataclass(frozen=True)
class MemoryView:
    empty_k: int
    groups: tuple[Group, ...]
    folds: dict[int, list[Entry]]  # fold key -> its members over the run
    buffers: Buffers | None = None  # numpy arrays on buffers of their own
    largest: tuple[Largest, ...] = ()  # empty: the run never holds more storages than the list
    open: bool = True  # groups start open (a small view) or closed, one line each

    def leaf_groups(self) -> Iterator[Group]:
        """The groups that hold strips: each kind's, and a module's for parameters."""
        for group in self.groups:
            yield group
            yield from group.parts

    def strips(self) -> Iterator[tuple[Group, Strip]]:
        for group in self.leaf_groups():
            for fam in group.families:
                for strip in (*fam.first, *fam.last):
                    yield group, strip


"""The histories the diagnostics index keeps (``app.diagnostics.index.Index``): a value over the run
(``Series``), a number per key over the run (``Counts``), and key → members as spans of steps
(``Relation``), each answering "at step k" by a bisect or a scan of one key's own history, never of a
step; ``Reads`` counts what the rules read through them (the linear-time tests)."""

from __future__ import annotations

from array import array
from bisect import bisect_right
from collections.abc import Hashable
from typing import Any

OPEN = 2**62  # the end of a span that has not ended


class Series:
    """One value over the run: from ``steps[i]`` on it is ``values[i]`` (before the first: ``default``)."""

    __slots__ = ("default", "steps", "values")

    def __init__(self, default: Any = None) -> None:
        self.default = default
        self.steps = array("q")
        self.values: list[Any] = []

    def set(self, step: int, value: Any) -> None:
        if self.steps and self.steps[-1] == step:
            self.values[-1] = value
        elif not self.values or self.values[-1] != value:
            self.steps.append(step)
            self.values.append(value)

    def at(self, step: int) -> Any:
        i = bisect_right(self.steps, step) - 1
        return self.values[i] if i >= 0 else self.default


class Counts:
    """Per key, a number over the run. Each key's history is two arrays of ints: a long run makes
    no Python object per change (the garbage collector walks every such object, again and again)."""

    def __init__(self) -> None:
        self._table: dict[Hashable, tuple[array, array]] = {}

    def __contains__(self, key: Hashable) -> bool:
        return key in self._table

    def set(self, key: Hashable, step: int, value: int) -> None:
        entry = self._table.get(key)
        if entry is None:
            entry = self._table[key] = (array("q"), array("q"))
        steps, values = entry
        if steps and steps[-1] == step:
            values[-1] = value
        elif not values or values[-1] != value:
            steps.append(step)
            values.append(value)

    def at(self, key: Hashable, step: int) -> int:
        entry = self._table.get(key)
        if entry is None:
            return 0
        i = bisect_right(entry[0], step) - 1
        return entry[1][i] if i >= 0 else 0

    def next_change(self, key: Hashable, step: int) -> int | None:
        """The first step after ``step`` at which the number changes, if any."""
        entry = self._table.get(key)
        if entry is None:
            return None
        i = bisect_right(entry[0], step)
        return entry[0][i] if i < len(entry[0]) else None


class Reads:
    """How many facts the rules read (``Index.reads``). Shared by an index and its relations, so
    that a relation does not hold its index: no reference cycle, and the index of a page request is
    freed as soon as it is dropped, not at the next collection (which walked its 58,000 objects)."""

    __slots__ = ("count",)

    def __init__(self) -> None:
        self.count = 0


class Relation:
    """key → members over time. Each membership is a span of steps [start, end); ``members(key, k)``
    scans the spans of that key only, and ``size(key, k)`` is a lookup. The spans of all keys live
    in a few flat arrays (each key keeps the indexes of its own), for the reason ``Counts`` gives."""

    def __init__(self, reads: Reads, *, sized: bool = False) -> None:
        self._reads = reads
        self._members: list[Any] = []
        self._data: list[Any] = []
        self._starts = array("q")
        self._ends = array("q")
        self._spans: dict[Hashable, array] = {}  # key -> indexes of its spans, in the order they began
        self._open: dict[tuple[Hashable, Hashable], int] = {}
        self._sized = sized  # keep each key's member count over time (``size``, ``next_change``)
        self._sizes = Counts()
        self._size: dict[Hashable, int] = {}

    def add(self, key: Hashable, member: Hashable, step: int, data: Any = None) -> None:
        if (key, member) in self._open:
            self.remove(key, member, step)
        span = len(self._members)
        self._members.append(member)
        self._data.append(data)
        self._starts.append(step)
        self._ends.append(OPEN)
        spans = self._spans.get(key)
        if spans is None:
            spans = self._spans[key] = array("q")
        spans.append(span)
        self._open[(key, member)] = span
        if self._sized:
            self._resize(key, step, +1)

    def remove(self, key: Hashable, member: Hashable, step: int) -> None:
        span = self._open.pop((key, member), None)
        if span is None:
            return
        self._ends[span] = step  # a span that began at this very step is empty: never visible
        if self._sized:
            self._resize(key, step, -1)

    def _resize(self, key: Hashable, step: int, delta: int) -> None:
        size = self._size[key] = self._size.get(key, 0) + delta
        self._sizes.set(key, step, size)

    def members(self, key: Hashable, step: int) -> list[tuple[Any, Any]]:
        """(member, data) of every membership of ``key`` at ``step``, in the order they began."""
        spans = self._spans.get(key, ())
        self._reads.count += len(spans) + 1
        starts, ends, members, data = self._starts, self._ends, self._members, self._data
        return [(members[i], data[i]) for i in spans if starts[i] <= step < ends[i]]

    def size(self, key: Hashable, step: int) -> int:
        self._reads.count += 1
        return self._sizes.at(key, step)

    def next_change(self, key: Hashable, step: int) -> int | None:
        """The first step after ``step`` at which ``key`` gains or loses a member."""
        return self._sizes.next_change(key, step)

    def ever(self) -> list[Hashable]:
        """Every key that ever had a member."""
        return list(self._spans)

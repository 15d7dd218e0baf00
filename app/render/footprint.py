"""Which storage elements a tensor addresses, from its shape, stride and offset alone.

Element ``index`` of a tensor lives at storage element ``offset + sum(index[d] * stride[d])``. A
transpose visits the same cells in another order, a strided slice skips cells, and an ``expand``
(stride 0) addresses one cell many times: drawing these numbers is drawing the truth.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

from app.i18n import gettext as _

# Past this many elements we stop enumerating one by one and draw coverage instead.
MAX_ENUMERATED = 4096
MAX_RUNS = 65536


@dataclass(frozen=True)
class Layout:
    shape: tuple[int, ...]
    stride: tuple[int, ...]
    offset: int
    itemsize: int = 4

    @property
    def numel(self) -> int:
        return math.prod(self.shape)


def is_contiguous(layout: Layout) -> bool:
    """Row-major contiguity, ignoring dimensions of size 1 (torch's rule)."""
    expected = 1
    for size, stride in zip(reversed(layout.shape), reversed(layout.stride), strict=True):
        if size == 1:
            continue
        if stride != expected:
            return False
        expected *= size
    return True


def layout_flags(layout: Layout) -> tuple[str, ...]:
    """Words that say how this layout differs from a plain contiguous block."""
    flags: list[str] = []
    if layout.numel == 0:
        return (_("empty"),)
    if any(s == 0 and n > 1 for n, s in zip(layout.shape, layout.stride, strict=True)):
        flags.append(_("expanded"))
    if not is_contiguous(layout):
        flags.append(_("non-contiguous"))
    if layout.offset:
        flags.append(_("offset {offset}").format(offset=layout.offset))
    return tuple(flags)


def cell_map(layout: Layout, cell_size: int) -> dict[int, list[tuple[int, ...]]] | None:
    """Storage cell (of ``cell_size`` bytes) -> the tensor indices stored there, in row-major order.

    None when the tensor has too many elements to enumerate.
    """
    if layout.numel > MAX_ENUMERATED:
        return None
    cells: dict[int, list[tuple[int, ...]]] = {}
    for index in itertools.product(*(range(n) for n in layout.shape)):
        element = layout.offset + sum(i * s for i, s in zip(index, layout.stride, strict=True))
        cells.setdefault(element * layout.itemsize // cell_size, []).append(index)
    return cells


def _runs(layout: Layout) -> tuple[list[int], int] | None:
    """Start elements of contiguous runs, and the run length; None when there are too many runs."""
    dims = [(n, s) for n, s in zip(layout.shape, layout.stride, strict=True) if n != 1 and s != 0]
    run = 1
    # Fold trailing dimensions that continue a contiguous run into one.
    while dims and dims[-1][1] == run:
        run *= dims.pop()[0]
    count = math.prod(n for n, _ in dims)
    if count > MAX_RUNS:
        return None
    starts = [
        layout.offset + sum(i * s for i, (_, s) in zip(index, dims, strict=True))
        for index in itertools.product(*(range(n) for n, _ in dims))
    ]
    return starts, run


def extent(layout: Layout) -> tuple[int, int]:
    """First and one-past-last storage element the tensor can touch (strides are never negative)."""
    if layout.numel == 0:
        return layout.offset, layout.offset
    last = layout.offset + sum((n - 1) * s for n, s in zip(layout.shape, layout.stride, strict=True))
    return layout.offset, last + 1


def coverage(layout: Layout, storage_bytes: int, bins: int) -> tuple[float, ...]:
    """Fraction of each of ``bins`` equal byte ranges of the storage that the tensor addresses."""
    size = max(storage_bytes, 1)
    covered = [0.0] * bins
    width = size / bins
    found = _runs(layout)
    if found is None:  # too fragmented to list: shade its whole extent at its average density
        lo, hi = extent(layout)
        density = min(1.0, layout.numel / max(hi - lo, 1))
        intervals = [(lo * layout.itemsize, hi * layout.itemsize, density)]
    else:
        starts, run = found
        intervals = [(s * layout.itemsize, (s + run) * layout.itemsize, 1.0) for s in starts]
    for start, end, density in intervals:
        first, last = int(start // width), int(min(end - 1, size - 1) // width)
        for b in range(first, min(last, bins - 1) + 1):
            overlap = min(end, (b + 1) * width) - max(start, b * width)
            covered[b] += density * max(overlap, 0.0) / width
    return tuple(min(c, 1.0) for c in covered)

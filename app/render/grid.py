"""A 2-D tensor drawn as its shape: rows × columns, each cell reading the storage cell it lives in.

The strip shows a storage in storage order; a matrix is easier to read as a matrix. Element
``[r, c]`` of a tensor lives at storage element ``offset + r * stride[0] + c * stride[1]``
(``footprint``), so a ``.t()`` view of a 2 × 3 matrix is a 3 × 2 grid whose cells point at the same
six storage cells in another order: the grid shows the truth of the strides, not a copy.

Only the first rows and columns are drawn (a window, said in words as "rows 0–15 of 100"): an
``expand``-ed view addresses few cells but can have many elements. A storage of more than 64
elements carries no values (the engine reads none), so its grid shows only where each element lives.
"""

from __future__ import annotations

from dataclasses import dataclass

from app.i18n import gettext as _
from app.render.footprint import Layout
from app.schema import TensorFact

MAX_ROWS = 16
MAX_COLS = 12
# A storage too big to read (no values: only its addresses to show) gets a smaller window.
INDEX_ROWS = 6
INDEX_COLS = 8


@dataclass(frozen=True)
class Grid:
    rows: int  # rows drawn: tensor rows 0 .. rows - 1
    cols: int
    cells: tuple[int, ...]  # storage cell of each drawn [r, c], row by row
    window: str  # "rows 0–15 of 100 · columns 0–11 of 20" when not all are drawn, else ""
    values: bool = True  # False: the storage's values are not read (too big), only addresses shown

    def row(self, r: int) -> tuple[int, ...]:
        return self.cells[r * self.cols:(r + 1) * self.cols]


def reads_as(fact: TensorFact) -> str:
    """How a tensor reads its storage's cells: its dtype, and whether it negates or conjugates them."""
    return fact.dtype + (" conj" if fact.is_conj else "") + (" neg" if fact.is_neg else "")


def grid(layout: Layout, cells: int, same_type: bool, values: bool = True) -> Grid | None:
    """The grid of a 2-D ``layout`` over a storage of ``cells`` cells, or None when there is none to draw.

    ``values``: the storage's values are drawn (a small storage); without them the window is smaller.
    ``same_type``: the tensor reads the storage's values as they are (``reads_as`` is the storage's
    dtype). A view as another dtype (``x.view(torch.int32)``) reinterprets the bytes, a ``conj()``
    view negates imaginary parts: the storage's values are not its elements, so no grid is drawn.
    """
    if len(layout.shape) != 2 or layout.numel == 0 or not same_type:
        return None
    (n, m), (s0, s1) = layout.shape, layout.stride
    rows, cols = (min(n, MAX_ROWS), min(m, MAX_COLS)) if values else (min(n, INDEX_ROWS), min(m, INDEX_COLS))
    drawn = tuple(layout.offset + r * s0 + c * s1 for r in range(rows) for c in range(cols))
    if any(not 0 <= cell < cells for cell in drawn):  # a layout the storage cannot hold: draw nothing false
        return None
    parts = []
    if rows < n:
        parts.append(_("rows 0–{last} of {n}").format(last=rows - 1, n=n))
    if cols < m:
        parts.append(_("columns 0–{last} of {n}").format(last=cols - 1, n=m))
    return Grid(rows, cols, drawn, " · ".join(parts), values)

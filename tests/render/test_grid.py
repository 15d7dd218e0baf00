"""A 2-D tensor's grid: cell [r, c] is the storage cell torch says element [r, c] lives in."""

from __future__ import annotations

import pytest
import torch

from app.render.footprint import Layout
from app.render.grid import INDEX_COLS, INDEX_ROWS, MAX_COLS, MAX_ROWS, grid
from tests.render.conftest import explore, row_of, trace_v1

CASES = {
    "contiguous": lambda: torch.arange(12.).reshape(3, 4),
    "transpose": lambda: torch.arange(12.).reshape(3, 4).t(),
    "strided slice with offset": lambda: torch.arange(20.).reshape(4, 5)[1:, 1::2],
    "expand": lambda: torch.arange(3.).expand(2, 3),
    "unfold (overlapping windows)": lambda: torch.arange(6.).unfold(0, 3, 1),
    "big expand (a window)": lambda: torch.arange(2.).expand(40, 2),
    "wide row (a window)": lambda: torch.zeros(1, 30),
}


def _layout(tensor: torch.Tensor) -> Layout:
    return Layout(tuple(tensor.shape), tuple(tensor.stride()), tensor.storage_offset(), tensor.element_size())


def _torch_cell(tensor: torch.Tensor, r: int, c: int) -> int:
    return (tensor[r, c].data_ptr() - tensor.untyped_storage().data_ptr()) // tensor.element_size()


@pytest.mark.parametrize("name", list(CASES))
def test_grid_cells_are_torch_addresses(name: str) -> None:
    tensor = CASES[name]()
    cells = tensor.untyped_storage().nbytes() // tensor.element_size()
    g = grid(_layout(tensor), cells, True)
    assert g is not None
    rows, cols = min(tensor.shape[0], MAX_ROWS), min(tensor.shape[1], MAX_COLS)
    assert (g.rows, g.cols) == (rows, cols)
    assert [list(g.row(r)) for r in range(rows)] == [[_torch_cell(tensor, r, c) for c in range(cols)]
                                                     for r in range(rows)]
    cut = tensor.shape[0] > MAX_ROWS or tensor.shape[1] > MAX_COLS
    assert bool(g.window) == cut


def test_no_grid_where_it_would_not_be_the_tensor() -> None:
    assert grid(_layout(torch.arange(3.)), 3, True) is None  # 1-D: the strip is its shape
    assert grid(_layout(torch.zeros(2, 2, 2)), 8, True) is None
    assert grid(_layout(torch.zeros(0, 3)), 0, True) is None
    assert grid(_layout(torch.arange(4.).reshape(2, 2)), 4, False) is None  # another dtype's view
    assert grid(Layout((2, 2), (2, 1), 2, 4), 4, True) is None  # past the storage's end: nothing false


def test_the_memory_view_draws_a_grid_for_each_matrix_on_a_small_storage() -> None:
    code = ("w = torch.arange(6.).reshape(2, 3)\nt = w.t()\nv = w.view(torch.int32)\n"
            "b = torch.zeros(10, 20)\nbt = b.t()\n")
    view = explore(code)
    names = dict(trace_v1(code).steps[-1].variables)
    assert row_of(view, names["w"]).grid.cells == (0, 1, 2, 3, 4, 5)
    assert row_of(view, names["t"]).grid.cells == (0, 3, 1, 4, 2, 5)
    assert row_of(view, names["v"]).grid is None  # int32 read of float32 cells
    assert row_of(view, names["w"]).grid.values and not row_of(view, names["w"]).grid.window
    # 200 elements: no values were read, so the grid is where each element lives, in a smaller window
    big, transposed = row_of(view, names["b"]).grid, row_of(view, names["bt"]).grid
    assert not big.values and (big.rows, big.cols) == (INDEX_ROWS, INDEX_COLS)
    assert big.row(1) == tuple(range(20, 20 + INDEX_COLS))
    assert transposed.row(1) == tuple(1 + 20 * c for c in range(INDEX_COLS))
    assert transposed.window == "rows 0–5 of 20 · columns 0–7 of 10"

"""Footprints: which storage cells a tensor addresses, checked against torch's own addresses."""

from __future__ import annotations

import pytest
import torch

from app.render.footprint import Layout, cell_map, coverage, is_contiguous, layout_flags
from tests.render.conftest import explore, row_of, run_namespace, strip_of, torch_cells, trace_v1

CASES = {
    "contiguous": lambda: torch.arange(12.).reshape(3, 4),
    "transpose": lambda: torch.arange(12.).reshape(3, 4).t(),
    "strided slice": lambda: torch.arange(12.).reshape(3, 4)[::2, 1::2],
    "column with offset": lambda: torch.arange(12.).reshape(3, 4)[1:, 2],
    "expand": lambda: torch.arange(3.).expand(2, 3),
    "permute 3d": lambda: torch.arange(24.).reshape(2, 3, 4).permute(2, 0, 1),
    "diagonal": lambda: torch.arange(16.).reshape(4, 4).diagonal(),
    "unfold (overlapping windows)": lambda: torch.arange(6.).unfold(0, 3, 1),
    "scalar": lambda: torch.tensor(5.),
}


def _layout(tensor: torch.Tensor) -> Layout:
    return Layout(tuple(tensor.shape), tuple(tensor.stride()), tensor.storage_offset(), tensor.element_size())


@pytest.mark.parametrize("name", list(CASES))
def test_cell_map_matches_torch_addresses(name: str) -> None:
    tensor = CASES[name]()
    assert cell_map(_layout(tensor), tensor.element_size()) == torch_cells(tensor)


@pytest.mark.parametrize("name", list(CASES))
def test_contiguity_matches_torch(name: str) -> None:
    tensor = CASES[name]()
    assert is_contiguous(_layout(tensor)) == tensor.is_contiguous()


def test_flags_say_how_a_layout_differs() -> None:
    assert layout_flags(_layout(torch.arange(3.).expand(2, 3))) == ("expanded", "non-contiguous")
    assert layout_flags(_layout(torch.arange(12.).reshape(3, 4)[1:, 2])) == ("non-contiguous", "offset 6")
    assert layout_flags(_layout(torch.arange(4.))) == ()
    assert layout_flags(_layout(torch.ones(0, 3))) == ("empty",)


def test_dtype_views_map_through_bytes() -> None:
    # float32 storage read as int16: two int16 elements per float32 cell
    tensor = torch.arange(4.).view(torch.int16)[1::3]
    layout = _layout(tensor)
    expected: dict[int, list] = {}
    for index, cell16 in torch_cells(tensor).items():
        expected.setdefault(index * 2 // 4, []).extend(cell16)
    assert cell_map(layout, 4) == expected


def test_coverage_of_large_storages() -> None:
    full = torch.zeros(1000)
    assert coverage(_layout(full), 4000, 10) == (1.0,) * 10
    first_half = full[:500]
    assert coverage(_layout(first_half), 4000, 10) == (1.0,) * 5 + (0.0,) * 5
    every_other = full[::2]
    assert all(abs(c - 0.5) < 0.01 for c in coverage(_layout(every_other), 4000, 10))
    column = torch.zeros(100, 10)[:, 3]  # one element in ten, across the whole storage
    assert all(abs(c - 0.1) < 0.01 for c in coverage(_layout(column), 4000, 10))


def _row(view, name: str):
    """The memory row of the tensor variable ``name`` at the last step."""
    return row_of(view, trace_variables(view)[name])


def trace_variables(view) -> dict[str, str]:
    return dict(trace_v1(view.code).steps[-1].variables)


def _strip_of(view, name: str):
    return strip_of(view, trace_variables(view)[name])[1]


@pytest.mark.parametrize("name", ["x", "t", "s", "n", "e", "c", "d"])
def test_real_trace_rows_mark_exactly_the_cells_torch_addresses(views_code: str, name: str) -> None:
    view = explore(views_code)
    expected = torch_cells(run_namespace(views_code)[name])
    marks = {cell: mark for cell, mark in enumerate(_row(view, name).marks) if mark is not None}
    assert set(marks) == set(expected)
    for cell, indices in expected.items():
        if len(indices) > 1:  # expand: one cell read several times
            assert marks[cell].many and marks[cell].text == f"×{len(indices)}"
        else:
            assert marks[cell].text == ",".join(map(str, indices[0]))


def test_views_share_a_strip_and_copies_get_their_own(views_code: str) -> None:
    view = explore(views_code)
    x_strip = _strip_of(view, "x")
    for name in ("t", "s", "n", "d"):
        assert _strip_of(view, name) is x_strip, name
    assert _strip_of(view, "c") is not x_strip
    assert _strip_of(view, "e") is not x_strip
    assert x_strip.cells == 12 and not x_strip.scaled
    assert "non-contiguous" in _row(view, "t").flags
    assert "expanded" in _row(view, "e").flags

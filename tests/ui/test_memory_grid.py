"""2-D tensors laid out by their shape, in a real browser, with torch as the oracle.

Row r, column c of a tensor's grid must show ``t[r, c]`` as torch has it at that step, and point at
the storage cell torch says it lives in (``storage_offset + r * stride(0) + c * stride(1)``).
"""

from __future__ import annotations

import os
import re

import torch

from app.render import fmt
from tests.browser_support import axe_violations, open_page, run_code, serious, step_label

CODE = """\
w = torch.arange(12.).reshape(3, 4)
t = w.t()
s = w[1:, ::2]
w[2, 0] = -1.0
"""


def _torch_steps() -> list[dict[str, torch.Tensor]]:
    """The snippet's tensors after each of its lines, as torch has them (each a copy of that moment)."""
    scope: dict = {"torch": torch}
    seen = []
    for line in CODE.splitlines():
        exec(line, scope)  # noqa: S102 - our own four lines, the oracle for the page
        seen.append({name: (v.clone(), v.storage_offset(), v.stride())
                     for name, v in scope.items() if isinstance(v, torch.Tensor)})
    return seen


def _grids(page) -> dict[str, tuple[list[list[str]], list[list[int]]]]:
    """Each visible grid by its tensor's name: its values and the storage cells (@n) it points at."""
    return page.evaluate("""() => {
      const out = {};
      for (const grid of document.querySelectorAll('[data-testid=memory-view] .strip:not([hidden]) .grid')) {
        const name = grid.querySelector('.grid-head .fp-name').textContent;
        const rows = [...grid.querySelectorAll('tbody tr')];
        out[name] = [rows.map(r => [...r.querySelectorAll('td b')].map(b => b.textContent)),
                     rows.map(r => [...r.querySelectorAll('td')].map(td => +td.dataset.c))];
      }
      return out;
    }""")


def _grid(page, name: str):
    """The grid of the tensor labelled exactly ``name`` (not ``big._base`` for ``big``)."""
    label = page.locator(".grid-head .fp-name", has_text=re.compile(f"^{re.escape(name)}$"))
    return page.locator("[data-testid=memory-view] .grid", has=label)


def test_grids_show_each_tensor_as_torch_indexes_it(page) -> None:
    open_page(page, "/")
    run_code(page, CODE)
    expected = _torch_steps()
    assert step_label(page) == "Step 4 of 4 · after line 4 ran"
    for step in range(4):  # w alone, with t = w.t(), with the slice, after the in-place write
        page.evaluate("n => AX.go(n)", step)
        grids = _grids(page)
        assert sorted(grids) == sorted(expected[step]), step
        for name, (tensor, offset, stride) in expected[step].items():
            values, cells = grids[name]
            rows, cols = tensor.shape
            assert values == [[fmt.scalar(tensor[r, c].item()) for c in range(cols)] for r in range(rows)]
            (s0, s1) = stride
            assert cells == [[offset + r * s0 + c * s1 for c in range(cols)] for r in range(rows)]
    # the write shows in every grid that reads the cell, marked as changed there
    changed = page.locator(".grid td b[data-state~=changed]").all_inner_texts()
    assert changed == ["-1."] * 3  # w[2, 0], t[0, 2], s[1, 0]: one storage cell, three views of it
    assert serious(axe_violations(page, include=("[data-testid=memory-view]",))) == []


def test_pointing_at_a_grid_cell_marks_its_storage_cell(page) -> None:
    open_page(page, "/")
    run_code(page, "w = torch.arange(6.).reshape(2, 3)\nt = w.t()\n")
    transposed = _grid(page, "t")
    transposed.locator("tbody tr").nth(2).locator("td").nth(1).hover()  # t[2, 1] = w[1, 2]: cell 5
    pointed = page.locator(".pointed")
    assert pointed.count() == 3  # the strip's cell 5, and the grid cells of w and t that read it
    assert page.locator(".cell.pointed small").inner_text() == "5"
    assert page.locator(".grid td.pointed b").all_inner_texts() == ["5.", "5."]
    assert "hl" in (transposed.get_attribute("class") or "")  # the tensor lights up everywhere, as a row does
    page.mouse.move(0, 0)
    transposed.focus()  # the keyboard's way to the same facts
    shown = page.locator("[data-role=detail]").get_attribute("data-tensor")
    assert shown == transposed.get_attribute("data-t")
    assert page.locator("[data-role=detail-title]").inner_text() == "t"


def test_a_big_grid_is_a_window_and_fits_a_dark_phone(page) -> None:
    page.set_viewport_size({"width": 390, "height": 844})
    page.emulate_media(color_scheme="dark")
    open_page(page, "/")
    run_code(page, "x = torch.tensor([1., 2.])\ne = x.expand(40, 2)\nw = torch.zeros(1, 30)\n"
                   "big = torch.zeros(10, 20).t()\n")
    grid = _grid(page, "e")
    assert grid.locator("tbody tr").count() == 16
    assert "rows 0–15 of 40" in grid.locator(".grid-head").inner_text()
    assert grid.locator("td b").all_inner_texts() == ["1.", "2."] * 16
    wide = _grid(page, "w")
    assert "columns 0–11 of 30" in wide.locator(".grid-head").inner_text()
    assert wide.locator("tbody td").count() == 12
    # 200 elements: no values read, only where each element lives, as torch addresses it
    big = _grid(page, "big")
    assert "where each element lives" in big.locator(".grid-head").inner_text()
    oracle = torch.zeros(10, 20).t()
    cells = [(oracle[1, c].data_ptr() - oracle.data_ptr()) // oracle.element_size() for c in range(8)]
    assert big.locator("tbody tr").nth(1).locator("td").all_inner_texts() == [f"@{n}" for n in cells]
    assert page.evaluate("document.documentElement.scrollWidth") <= 390  # a wide grid scrolls in itself
    assert serious(axe_violations(page, include=("[data-testid=memory-view]",))) == []


if os.environ.get("AX_SCREENSHOT"):  # eyes only: AX_SCREENSHOT=/tmp/grid.png pytest -k screenshot
    def test_screenshot(page) -> None:
        open_page(page, "/")
        run_code(page, CODE)
        page.get_by_test_id("memory-view").screenshot(path=os.environ["AX_SCREENSHOT"])

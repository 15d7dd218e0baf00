"""A hovered tensor's facts are where the eye is (issue 14 §1): inside the viewport at every width,
wherever the hovered row sits, and nothing under them stops responding to the pointer."""

from __future__ import annotations

import re

import pytest

from tests.browser_support import open_memory, open_page, run_code

# A small CNN step: enough tensors that the panel's own place in the page is far below the fold.
CNN = """\
net = nn.Sequential(nn.Conv2d(1, 4, 3), nn.ReLU(), nn.Conv2d(4, 8, 3), nn.ReLU(),
                    nn.Flatten(), nn.Linear(32, 10))
opt = torch.optim.SGD(net.parameters(), lr=0.1)
x = torch.randn(2, 1, 6, 6)
loss = F.cross_entropy(net(x), torch.tensor([1, 3]))
loss.backward()
opt.step()
"""


def _in_viewport(page, selector: str) -> bool:
    return page.evaluate("""sel => {
      const box = document.querySelector(sel).getBoundingClientRect();
      return box.width > 0 && box.top >= 0 && box.left >= 0
        && box.bottom <= innerHeight + 1 && box.right <= innerWidth + 1;
    }""", selector)


@pytest.mark.parametrize("width", [1440, 390])
def test_a_hovered_tensors_facts_are_inside_the_viewport(page, width: int) -> None:
    page.set_viewport_size({"width": width, "height": 900})
    open_page(page, "/")
    run_code(page, CNN)
    detail = "[data-testid=tensor-detail]"
    # the panel's own place is below the fold: without docking its facts would be out of sight
    assert page.evaluate("sel => document.querySelector(sel).getBoundingClientRect().top", detail) > 900
    open_memory(page)  # a model's memory is one closed line per kind of storage
    row = page.locator("[data-testid=memory-view] .fp:not([hidden]) .fp-name").first
    row.scroll_into_view_if_needed()
    row.hover()
    assert re.search(r"shape\s+\(", page.locator(detail).inner_text())
    assert _in_viewport(page, detail)
    # the pointer passes through the docked panel: what lies under it still answers
    pointer = page.evaluate("sel => getComputedStyle(document.querySelector(sel)).pointerEvents", detail)
    assert pointer == "none"
    page.mouse.move(2, 2)
    page.wait_for_function("sel => !document.querySelector(sel).hasAttribute('data-tensor')", arg=detail)

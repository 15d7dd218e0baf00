"""The step and its views on one screen (issue 27), in a real browser: the stepper stays in sight on
every width and in full-screen graph, the graph keeps the node that ran in a backward pass in view,
the docked facts cover nothing of the tensor they describe, and a lang=zh-CN page draws its run in
Chinese in an English browser."""

from __future__ import annotations

import pytest

from tests.browser_support import open_memory, open_page, run_code, step_label

CNN = """\
net = nn.Sequential(nn.Conv2d(1, 4, 3), nn.ReLU(), nn.Conv2d(4, 8, 3), nn.ReLU(),
                    nn.Flatten(), nn.Linear(32, 10))
opt = torch.optim.SGD(net.parameters(), lr=0.1)
for epoch in range(2):
    x = torch.randn(2, 1, 6, 6)
    loss = F.cross_entropy(net(x), torch.tensor([1, 3]))
    opt.zero_grad()
    loss.backward()
    opt.step()
"""

# A long chain: its backward pass walks a column of nodes taller than the graph's view.
CHAIN = ("w = torch.randn(3, requires_grad=True)\nh = w\nfor i in range(40):\n    h = (h * 1.1).sin()\n"
         "h.sum().backward()\n")

IN_SIGHT = """() => {
  const r = document.querySelector('#run .stepper').getBoundingClientRect();
  const hit = document.elementFromPoint(r.left + 20, r.top + r.height / 2);
  const mine = !!hit && document.querySelector('#run .stepper').contains(hit);
  return r.top >= 0 && r.bottom <= innerHeight && mine;
}"""


@pytest.mark.parametrize(("width", "height"), [(1440, 900), (390, 844)])
def test_the_stepper_stays_in_sight_wherever_the_graph_is(page, width: int, height: int) -> None:
    page.set_viewport_size({"width": width, "height": height})
    open_page(page)
    run_code(page, CNN)
    graph = page.locator("[data-role=graph-viewport]")
    top = graph.evaluate("g => g.getBoundingClientRect().top + scrollY")
    for y in (top - height / 2, top, top + graph.evaluate("g => g.offsetHeight") - 100):
        page.evaluate("y => scrollTo(0, y)", max(y, 0))
        assert page.evaluate(IN_SIGHT), y
    before = step_label(page)
    page.locator("#run .stepper [data-testid=step-prev]").click()  # it steps from there, no scrolling
    assert step_label(page) != before


def test_full_screen_graph_keeps_the_stepper(page) -> None:
    open_page(page)
    run_code(page, CNN)
    page.locator("[data-graph=wide]").click()
    assert page.evaluate("document.body.classList.contains('graph-wide-open')")
    assert page.evaluate(IN_SIGHT)
    stepper = page.locator("#run .stepper").bounding_box()
    graph = page.locator(".graph.graph-wide").bounding_box()
    assert stepper["y"] + stepper["height"] <= graph["y"]  # above the graph, not over it
    before = step_label(page)
    page.locator("#run .stepper [data-testid=step-first]").click()
    assert step_label(page) != before
    page.keyboard.press("Escape")
    assert not page.evaluate("document.body.classList.contains('graph-wide-open')")


def test_step_into_keeps_the_node_that_ran_in_view(page) -> None:
    open_page(page)
    run_code(page, CHAIN)
    page.locator("[data-graph-mode=all]").click()
    page.get_by_test_id("step-first").click()
    while not page.get_by_test_id("step-into").is_visible():
        page.get_by_test_id("step-next").click()
    page.get_by_test_id("step-into").click()
    seen = 0
    while page.get_by_test_id("step-phase").is_visible() and seen < 90:
        ran = page.locator('.drawing:not([hidden]) .node[data-state~="ran"]:not([hidden])')
        if ran.count():
            box, view = ran.first.bounding_box(), page.locator("[data-role=graph-viewport]").bounding_box()
            label = step_label(page)
            assert view["y"] <= box["y"] and box["y"] + box["height"] <= view["y"] + view["height"], label
            assert view["x"] <= box["x"] and box["x"] + box["width"] <= view["x"] + view["width"]
            seen += 1
        page.get_by_test_id("step-next").click()
    assert seen > 40  # the pass walked the whole chain, every node in view when it ran


@pytest.mark.parametrize("width", [1440, 390])
def test_the_docked_facts_cover_nothing_of_their_tensor(page, width: int) -> None:
    """A row at the bottom of the window (where the facts dock by default, as wide as a phone) is
    hovered: the facts go to another corner rather than over it."""
    page.set_viewport_size({"width": width, "height": 844})
    open_page(page)
    run_code(page, CNN)
    open_memory(page)
    rows = [r for r in page.locator("[data-testid=memory-view] .fp-label").all() if r.is_visible()]
    assert len(rows) >= 4
    for row in rows[:4]:
        row.evaluate("r => r.scrollIntoView({block: 'end'})")  # at the window's bottom edge
        row.hover()
        detail = page.get_by_test_id("tensor-detail")
        assert detail.get_attribute("data-tensor")
        d, r = detail.bounding_box(), row.bounding_box()
        overlap = (min(d["x"] + d["width"], r["x"] + r["width"]) > max(d["x"], r["x"])
                   and min(d["y"] + d["height"], r["y"] + r["height"]) > max(d["y"], r["y"]))
        assert not overlap, (d, r)


def test_a_chinese_page_draws_its_run_in_chinese_in_an_english_browser(browser, server) -> None:
    context = browser.new_context(viewport={"width": 1440, "height": 900}, base_url=server, locale="en-US",
                                  extra_http_headers={"Accept-Language": "en-US,en;q=0.9"})
    page = context.new_page()
    try:
        open_page(page, "/?lang=zh-CN")
        run_code(page, CNN)
        run = page.locator("#run")
        text = run.inner_text()
        for chinese in ("诊断", "内存", "计算图", "第 "):
            assert chinese in text, chinese
        for english in ("Diagnostics", "Memory over time", "Autograd graph", "All nodes", "Step "):
            assert english.lower() not in text.lower(), english
        labels = run.locator("[aria-label]").evaluate_all("els => els.map(e => e.getAttribute('aria-label'))")
        assert "First step" not in labels and "Fit" not in labels
    finally:
        context.close()


def test_fit_never_draws_the_labels_below_a_legible_size(page) -> None:
    """A graph taller than its view is fitted at the legible floor and panned, not shrunk to 8 px."""
    open_page(page)
    run_code(page, CHAIN)
    page.locator("[data-graph-mode=all]").click()
    page.locator("[data-graph=fit]").click()
    size = page.evaluate("""() => {
      const label = document.querySelector('#graph-view .drawing:not([hidden]) .node:not([hidden]) .label');
      return label.getBoundingClientRect().height;
    }""")
    assert page.evaluate("AX.graph.transform.k") >= 0.75
    assert size >= 9  # a 12 px label at the floor's scale
    for _ in range(3):  # zooming out is still the reader's to choose
        page.locator("[data-graph=zoom-out]").click()
    assert page.evaluate("AX.graph.transform.k") < 0.75

"""The graph viewer in a real browser: zoom, pan, fit, full screen, folding, the inspector."""

from __future__ import annotations

from tests.browser_support import open_page, run_code, step_label

LEAK = (
    "w = torch.randn(4, requires_grad=True)\n"
    "losses = []\n"
    "for i in range(5):\n"
    "    loss = (w * i).exp().sum()\n"
    "    losses.append(loss)\n"
)
INPLACE = (
    "x = torch.tensor([1., 2., 3.], requires_grad=True)\n"
    "y = x.exp()\n"
    "alias = y.detach()\n"
    "alias.zero_()\n"
)

HOOKED = (
    "x = torch.ones(2, requires_grad=True)\n"
    "y = x.exp()\n"
    "def scale(g):\n"
    "    return g * 2\n"
    "h = y.register_hook(scale)\n"
    "p = y.grad_fn.register_prehook(lambda grads: None)\n"
    "y.grad_fn.metadata['tag'] = 1\n"
)


def _view(page) -> dict:
    return page.evaluate("() => ({k: AX.graph.transform.k, x: AX.graph.transform.x, y: AX.graph.transform.y,"
                         " mode: AX.graph.mode})")


def _shown_titles(page) -> list[str]:
    labels = page.locator("#graph-view .drawing:not([hidden]) .node:not([hidden]) .label")
    return labels.evaluate_all("els => els.map((e) => e.textContent)")  # SVG text: no innerText


def test_zoom_pan_fit_and_full_screen_and_the_view_stays_while_stepping(page) -> None:
    open_page(page)
    run_code(page, LEAK)
    start = _view(page)
    page.get_by_role("button", name="Zoom in").click()
    assert abs(_view(page)["k"] - start["k"] * 1.5) < 1e-6
    page.get_by_role("button", name="Zoom out").click()
    assert abs(_view(page)["k"] - start["k"]) < 1e-6
    viewport = page.locator("[data-role=graph-viewport]")
    viewport.scroll_into_view_if_needed()
    box = viewport.bounding_box()
    cx, cy = box["x"] + box["width"] / 2, box["y"] + box["height"] / 2
    page.mouse.move(cx, cy)
    page.mouse.wheel(0, -400)  # the wheel zooms (d3-zoom)
    page.wait_for_function("k => AX.graph.transform.k > k * 1.2", arg=start["k"])
    before = _view(page)
    page.mouse.move(cx, cy)
    page.mouse.down()
    page.mouse.move(cx + 60, cy + 30, steps=5)
    page.mouse.up()
    dragged = _view(page)
    assert abs(dragged["x"] - before["x"] - 60) < 2 and abs(dragged["y"] - before["y"] - 30) < 2
    label = step_label(page)
    viewport.focus()
    viewport.press("ArrowRight")  # in the graph the arrows pan; they do not step
    assert abs(_view(page)["x"] - (dragged["x"] - 80)) < 1e-6
    assert step_label(page) == label
    viewport.press("+")
    assert _view(page)["k"] > dragged["k"]
    kept = _view(page)
    page.get_by_test_id("step-prev").click()
    page.get_by_test_id("step-prev").click()
    assert step_label(page) != label
    assert _view(page) == kept  # stepping keeps zoom and position
    page.get_by_role("button", name="Fit").click()
    fitted = _view(page)
    assert fitted["k"] <= 1.0 and fitted != kept
    small = viewport.bounding_box()
    page.get_by_role("button", name="Full screen").click()
    wide = viewport.bounding_box()
    assert wide["width"] > small["width"] * 1.5 and wide["height"] > small["height"]
    assert "graph-wide" in page.locator("#graph-view").get_attribute("class")
    page.keyboard.press("Escape")
    assert "graph-wide" not in page.locator("#graph-view").get_attribute("class")


def test_a_loop_is_folded_and_unfolds_from_its_count(page) -> None:
    open_page(page)
    run_code(page, LEAK)
    assert _view(page)["mode"] == "repeats"
    assert page.get_by_role("button", name="Fold repeats").get_attribute("aria-pressed") == "true"
    assert _shown_titles(page).count("MulBackward0") == 1
    count = page.locator("#graph-view .drawing:not([hidden]) .node-fn:not([hidden]) .count").first
    assert count.text_content() == "×5"
    count.click()  # unfold
    assert _view(page)["mode"] == "all"
    assert _shown_titles(page).count("MulBackward0") == 5
    assert page.get_by_role("button", name="All nodes").get_attribute("aria-pressed") == "true"
    page.get_by_role("button", name="Fold repeats").click()
    assert _shown_titles(page).count("MulBackward0") == 1


def test_the_inspector_by_mouse_and_by_keyboard(page) -> None:
    open_page(page)
    run_code(page, INPLACE)
    inspector = page.locator("[data-role=graph-inspector]")
    exp = page.locator("#graph-view .drawing:not([hidden]) .node-fn:not([hidden])", has_text="ExpBackward0")
    exp.locator(".label").click()  # (the middle of the box is its saved-tensor chip)
    assert inspector.is_visible()
    text = inspector.inner_text()
    assert "ExpBackward0" in text and "line 2" in text and "AccumulateGrad" in text
    assert "saved at version 0, now 1" in text and "modified in place" in text
    assert "metadata keys\nnone" in text and "hooks\nnone" in text
    assert exp.locator("> title").text_content().startswith("ExpBackward0")  # the tooltips
    assert "saved tensor result" in exp.locator(".chip > title").text_content()
    page.get_by_test_id("step-prev").click()  # before zero_(): the saved result is intact
    assert "saved at version 0, now 0" in inspector.inner_text()
    page.keyboard.press("Escape")
    assert not inspector.is_visible()
    viewport = page.locator("[data-role=graph-viewport]")
    viewport.focus()
    for _ in range(8):  # Tab walks the nodes in reading order, from the top
        page.keyboard.press("Tab")
        focused = page.evaluate("() => document.activeElement.querySelector('.label')?.textContent")
        if focused == "ExpBackward0":
            break
    assert focused == "ExpBackward0"
    page.keyboard.press("Enter")
    assert inspector.is_visible() and "ExpBackward0" in inspector.inner_text()


def test_the_inspector_lists_metadata_keys_and_hooks_as_they_change(page) -> None:
    open_page(page)
    run_code(page, HOOKED)
    inspector = page.locator("[data-role=graph-inspector]")
    exp = page.locator("#graph-view .drawing:not([hidden]) .node-fn:not([hidden])", has_text="ExpBackward0")
    exp.locator(".label").click()
    text = inspector.inner_text()
    assert "metadata keys\n1: tag" in text
    assert "hooks\n2: tensor hook scale, node pre-hook <lambda>" in text
    page.get_by_test_id("step-prev").click()  # before the metadata was written
    assert "metadata keys\nnone" in inspector.inner_text()
    page.get_by_test_id("step-prev").click()  # before the pre-hook
    assert "hooks\n1: tensor hook scale" in inspector.inner_text()


POST_ACCUMULATE = (
    "w = torch.ones(2, requires_grad=True)\n"
    "def after(p):\n"
    "    return None\n"
    "y = (w * 2).sum()\n"
    "h = w.register_post_accumulate_grad_hook(after)\n"
)


def test_a_post_accumulate_grad_hook_is_named_as_such_in_both_languages(page) -> None:
    for path, label in (("/", "post-accumulate-grad hook after"), ("/?lang=zh-CN", "梯度累加后钩子 after")):
        open_page(page, path)
        run_code(page, POST_ACCUMULATE)
        acc = page.locator("#graph-view .drawing:not([hidden]) .node-acc:not([hidden])")
        acc.locator(".label").click()
        inspector = page.locator("[data-role=graph-inspector]")
        assert f": {label}" in inspector.inner_text()


def test_a_run_swapped_out_before_its_first_frame_raises_nothing(page) -> None:
    """Back and Forward in quick succession swap a run out before the browser paints its first frame.
    Its graph's first fit, due at that frame, then met a detached svg, and d3-zoom's default extent
    read the svg's width (100 %: nothing to resolve it against): "Failed to read the 'value' property
    from 'SVGLength'". The frames are held here so that the swap comes first on any machine."""
    open_page(page)
    page.evaluate("() => { window.heldFrames = []; requestAnimationFrame = (f) => heldFrames.push(f); }")
    run_code(page, "a = torch.ones(2)\n")
    first = page.evaluate("() => AX.graph.svg.isConnected && heldFrames.length")
    run_code(page, "b = torch.zeros(3) + 1\n")
    assert first and page.evaluate("() => heldFrames.length") > first  # both runs' first fits are due
    page.evaluate("() => heldFrames.splice(0).forEach((f) => f(performance.now()))")
    assert page.evaluate("() => AX.graph.svg.isConnected")
    assert page.locator("#graph-view [data-role=graph-zoom]").get_attribute("transform")  # the new one fitted

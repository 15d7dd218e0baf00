"""The numpy bridge in a real browser: shared arrays under their tensor's strip, copies apart."""

from __future__ import annotations

from tests.browser_support import open_page, step_label


def _views(page) -> list[str]:
    return [t for t in page.locator("[data-testid=memory-view] .strip:not([hidden]) .numpy-views")
            .all_inner_texts() if t]


def _buffers(page) -> list[str]:
    shown = "[data-testid=numpy-buffers]:not([hidden]) .numpy-buffer:not([hidden])"
    return page.locator(shown).all_inner_texts()


def test_numpy_shares_then_copies_as_the_steps_go(page) -> None:
    open_page(page, "/?example=numpy-shares-or-copies")
    assert step_label(page) == "Step 7 of 7 · line 7"
    (views,) = _views(page)
    assert "numpy a: (3,) · strides (4,) bytes · float32 · from byte 0" in views and "numpy s:" in views
    (copy,) = _buffers(page)
    assert copy.startswith("numpy c: numpy's own buffer, 12 B") and "[0., 7., 0.]" in copy
    cells = page.locator("[data-testid=memory-view] .strip:not([hidden]) .cell b").all_inner_texts()
    assert cells == ["5.", "0.", "0."]  # a[0] = 5. wrote t's memory; c[1] = 7. did not
    page.get_by_test_id("step-first").click()
    for _ in range(2):
        page.locator("body").press("ArrowRight")
    assert step_label(page) == "Step 3 of 7 · line 3"  # a = t.numpy()
    assert [v.startswith("numpy a:") and "numpy s" not in v for v in _views(page)] == [True]
    assert _buffers(page) == [] and page.get_by_test_id("numpy-buffers").is_hidden()

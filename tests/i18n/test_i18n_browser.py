"""The Chinese page in a real browser (uvicorn + Debian's chromium): laid out without horizontal
overflow at a phone's 390 px and a desktop's 1440 px, and the language switch remembered across
reloads and new visits, the page's code and step kept."""

from __future__ import annotations

import pytest

from tests.browser_support import RUN_TIMEOUT_MS, open_page, wait_for_run

OVERFLOW = """() => {
  const width = document.documentElement.clientWidth;
  const wide = [...document.querySelectorAll("body *")].filter(el => {
    const box = el.getBoundingClientRect();
    return box.width > 0 && box.right > width + 1 && getComputedStyle(el).position !== "fixed"
      && !el.closest(".graph-viewport, .code-editor, .lines, .strip, pre, dialog:not([open])");
  }).map(el => el.tagName.toLowerCase() + "." + [...el.classList].join(".") + " "
    + Math.round(el.getBoundingClientRect().right));
  return {scroll: document.documentElement.scrollWidth, width, wide: wide.slice(0, 8)};
}"""


@pytest.mark.parametrize("width", [390, 1440])
def test_chinese_page_fits_the_screen(browser, server, width: int) -> None:
    context = browser.new_context(viewport={"width": width, "height": 860}, base_url=server, locale="zh-CN")
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.set_default_timeout(RUN_TIMEOUT_MS)
    try:
        open_page(page, "/?example=losses-keep-graphs")  # Accept-Language: zh-CN, from the browser
        assert page.evaluate("document.documentElement.lang") == "zh-CN"
        assert page.get_by_test_id("share").inner_text() == "分享"
        assert "留下了每次迭代的计算图" in page.locator(".diag-title").first.inner_text()
        assert "被计算图持有" in page.get_by_test_id("memory-view").inner_text()  # the run, drawn in Chinese
        page.get_by_test_id("step-first").click()  # explorer.js writes the label now
        assert page.get_by_test_id("step-label").inner_text().startswith("第 1 步，共 ")
        measured = page.evaluate(OVERFLOW)
        assert measured["scroll"] <= measured["width"], measured
        assert measured["wide"] == [], measured
        page.get_by_test_id("share").click()  # a dialog in Chinese fits too
        page.get_by_test_id("share-dialog").wait_for()
        assert "运行过的代码" in page.get_by_test_id("share-state").inner_text()
        measured = page.evaluate(OVERFLOW)
        assert measured["scroll"] <= measured["width"], measured
        assert errors == []
    finally:
        context.close()


def test_the_switch_is_remembered(page) -> None:
    """An English browser switches to Chinese: the code and step on screen stay, the choice outlives a
    reload and a new visit, and permalinks carry it."""
    open_page(page, "/?example=retain-grad")
    assert page.evaluate("document.documentElement.lang") == "en"
    page.get_by_test_id("step-first").click()
    page.wait_for_function("() => location.search.includes('step=1')")  # the permalink holds the step
    code = page.evaluate("AX.editor.text()")
    with page.expect_navigation():
        page.get_by_test_id("lang-switch").get_by_text("简体中文").click()
    wait_for_run(page, 0)
    assert page.evaluate("document.documentElement.lang") == "zh-CN"
    assert page.get_by_test_id("step-slider").input_value() == "0"  # back at the step it was on
    assert "示例" in page.locator(".gallery-label").inner_text()
    assert page.evaluate("AX.editor.text()") == code  # the code on screen, as it was
    assert page.get_by_test_id("step-label").inner_text() != ""
    page.wait_for_function("() => location.search.includes('lang=zh-CN')")  # the permalink carries it
    page.goto("/?example=retain-grad")  # a new visit, no lang= in the address: the cookie answers
    wait_for_run(page, 0)
    assert page.evaluate("document.documentElement.lang") == "zh-CN"
    assert "# 在非叶子节点上保留 .grad" in page.evaluate("AX.editor.text()")  # the example, in Chinese
    page.reload()
    wait_for_run(page, 0)
    assert page.evaluate("document.documentElement.lang") == "zh-CN"
    with page.expect_navigation():
        page.get_by_test_id("lang-switch").get_by_text("English").click()
    wait_for_run(page, 0)
    assert page.evaluate("document.documentElement.lang") == "en"
    assert page.get_by_test_id("share").inner_text() == "Share"

"""The playground's "Download (.html)": the run on screen as the standalone page, saved by the
browser, then opened from the file with every network request blocked."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.browser_support import open_page, run_code, step_label

pytestmark = pytest.mark.slow


def test_download_saves_the_run_as_a_page_that_works_offline(page, browser, tmp_path: Path) -> None:  # noqa: ANN001
    open_page(page)
    run_code(page, "a = torch.ones(3, requires_grad=True)\nb = a * 2\nb.sum().backward()\n")
    link = page.get_by_test_id("download")
    assert link.inner_text() == "Download (.html)"
    with page.expect_download() as waiting:
        link.click()
    download = waiting.value
    assert download.suggested_filename == "autograd-explorer-run.html"
    saved = tmp_path / "run.html"
    download.save_as(saved)
    text = saved.read_text()
    assert text.startswith("<!doctype html>") and "b = a * 2" in text

    offline = browser.new_page()
    problems: list[str] = []
    asked: list[str] = []
    offline.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
    offline.on("pageerror", lambda e: problems.append(str(e)))
    offline.route("**/*", lambda route: route.continue_() if route.request.url.startswith("file:")
                  else (asked.append(route.request.url), route.abort()))
    try:
        offline.goto(saved.as_uri())
        offline.wait_for_function("() => window.AX && window.AX.runs === 1", timeout=60_000)
        last = step_label(offline)
        assert last.startswith("Step ") and last == step_label(page)
        offline.get_by_test_id("step-first").click()
        assert step_label(offline).startswith("Step 1 of ")
    finally:
        offline.close()
    assert problems == [] and asked == []

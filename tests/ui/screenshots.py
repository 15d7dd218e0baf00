"""Screenshots of every gallery example, and of a folded leak, to look at:
``python -m tests.ui.screenshots URL OUT_DIR [WIDTH]``.

Not a test: a person (or a session) views the PNGs to judge the look. Uses Debian's chromium.
"""

from __future__ import annotations

import sys
from pathlib import Path

from app.bench.scale import LEAK
from app.gallery import EXAMPLES
from tests.browser_support import CHROMIUM, CHROMIUM_ARGS

LEAK_ITERATIONS = 30  # enough to fold, quick on today's engine


def main(base_url: str, out_dir: str, width: int = 1440) -> None:
    from playwright.sync_api import sync_playwright

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        page = browser.new_page(viewport={"width": width, "height": 900})
        for example in EXAMPLES:
            page.goto(f"{base_url}/?example={example.slug}")
            page.wait_for_function("() => window.AX && AX.runs > 0", timeout=60_000)
            page.screenshot(path=str(out / f"{example.slug}.png"), full_page=True)
            print(out / f"{example.slug}.png")
        # a loop that keeps its losses: one chip and a few strips per family, then both expanded
        runs = page.evaluate("AX.runs")
        page.get_by_test_id("code").fill(LEAK.format(n=LEAK_ITERATIONS))
        page.get_by_test_id("run").click()
        page.wait_for_function("n => AX.runs > n", arg=runs, timeout=300_000)
        page.screenshot(path=str(out / "leak.png"), full_page=True)
        page.locator(".vars .var[data-state~=fold]:not([hidden])").first.click()
        page.get_by_test_id("memory-fold").first.click()
        page.screenshot(path=str(out / "leak-expanded.png"), full_page=True)
        print(out / "leak.png", out / "leak-expanded.png")
        browser.close()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]) if len(sys.argv) > 3 else 1440)

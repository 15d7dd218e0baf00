"""Step switching in a real browser: a 1000-step trace on the playground, stepped with ``AX.go``.

The time is the explorer's own work plus the style and layout it causes (forced with
``offsetHeight``), per switch, with performance.now() in the page. Needs the test extras (playwright)
and Debian's chromium; without them the benchmark says so and reports nothing.
"""

from __future__ import annotations

import os

from app.bench import Row
from app.bench.http import BenchServer

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--headless", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--no-first-run"]


def playwright_here(bench: str):  # noqa: ANN201 - Playwright's sync_playwright, imported lazily
    """Playwright's ``sync_playwright`` when a benchmark's browser rows can run here, else None, and
    says why (the browser benchmarks share this check: Playwright's driver from the test extras,
    Debian's chromium, never Playwright's own browser)."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        print(f"[{bench}] playwright is not installed (pip install -e '.[test]'): no browser rows")
        return None
    if not os.path.exists(CHROMIUM):
        print(f"[{bench}] no chromium at {CHROMIUM} (apt-get install chromium): no browser rows")
        return None
    return sync_playwright


def launch_chromium(playwright):  # noqa: ANN001, ANN201 - Playwright's types, imported lazily
    """Debian's chromium, headless, as every browser benchmark drives it."""
    return playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)

LOOP = (
    "w = torch.randn(4, 3, requires_grad=True)\n"
    "x = torch.randn(3)\n"
    "total = 0.0\n"
    "for i in range(249):\n"  # 3 + 249 × 4 + 1 = 1000 steps
    "    y = (w @ x).tanh()\n"
    "    loss = y.sum()\n"
    "    total += loss.item()\n"
)

MEASURE = """async () => {
  // the swap's own first style and layout pass is not a step switch: let it finish first
  document.body.offsetHeight;
  await new Promise((done) => requestAnimationFrame(() => requestAnimationFrame(done)));
  const times = [];
  const time = (step) => {
    const t0 = performance.now();
    AX.go(step);
    document.body.offsetHeight;  // include the style and layout the switch causes
    times.push(performance.now() - t0);
  };
  const n = AX.explorer.count;
  for (let s = n - 2; s >= n - 301; s--) time(s);        // 300 steps back, one at a time
  for (let s = n - 300; s < n; s++) time(s);             // and forward again
  let seed = 7;
  for (let i = 0; i < 100; i++) {                         // slider jumps anywhere
    seed = (seed * 1103515245 + 12345) % 2147483648;
    time(seed % n);
  }
  times.sort((a, b) => a - b);
  const pick = (q) => times[Math.min(times.length - 1, Math.floor(q * times.length))];
  return {count: times.length, median: pick(0.5), p95: pick(0.95), max: times[times.length - 1],
          mean: times.reduce((a, b) => a + b, 0) / times.length};
}"""



def run() -> list[Row]:
    sync_playwright = playwright_here("stepping")
    if sync_playwright is None:
        return []

    server = BenchServer()
    try:
        with sync_playwright() as playwright:
            browser = launch_chromium(playwright)
            page = browser.new_page(viewport={"width": 1440, "height": 900})
            page.goto(server.url + "/")
            page.wait_for_function("() => window.AX && AX.runs > 0", timeout=120_000)
            page.get_by_test_id("code").fill(LOOP)
            page.get_by_test_id("run").click()
            page.wait_for_function("() => AX.runs > 1 && AX.explorer.count >= 1000", timeout=120_000)
            stats = page.evaluate(MEASURE)
            browser.close()
    finally:
        server.stop()
    case = f"step switch, 1000-step trace ({stats['count']} switches)"
    return [
        Row("stepping", case, "median", stats["median"], "ms", 16.0),
        Row("stepping", case, "p95", stats["p95"], "ms", 50.0),
        Row("stepping", case, "max", stats["max"], "ms"),
    ]

"""Scrolling a docs page past a tall auto-height embed, in a real browser: the frame's work per scroll.

A docs page on another site (a second local HTTP server) frames ``/embed`` of a 100-iteration leak
with README's auto-height listener, which posts the frame where the window's view begins on every
scroll; the frame moves its stepper there (static/embed.js). The page is scrolled through the frame
in 40 px steps, a frame apart. Timed inside the frame, per message: from its arrival (a capturing
listener, first) to the end of the style and layout it causes (forced after embed.js's handler).
Needs the test extras (playwright) and Debian's chromium; without them it says so and reports nothing.
"""

from __future__ import annotations

import re
from pathlib import Path

from app.bench import Row
from app.bench.docs_site import DocsSite
from app.bench.http import BenchServer
from app.bench.stepping import launch_chromium, playwright_here
from app.web.permalink import encode_code

ROOT = Path(__file__).resolve().parents[2]
LOOP = (
    "w = torch.randn(4, 3, requires_grad=True)\n"
    "x = torch.randn(3)\n"
    "losses = []\n"
    "for i in range(100):\n"
    "    loss = (w @ x).tanh().sum()\n"
    "    losses.append(loss)  # keeps every graph\n"
)

WATCH = """() => {
  window.benchTimes = [];
  let start = 0;
  addEventListener('message', (e) => { if (e.data && e.data.type === 'autograd-explorer:viewport')
    start = performance.now(); }, {capture: true});
  addEventListener('message', (e) => {
    if (!(e.data && e.data.type === 'autograd-explorer:viewport')) return;
    document.querySelector('.run > .stepper').getBoundingClientRect();  // style and layout, now
    benchTimes.push(performance.now() - start);
  });
}"""

SCROLL = """async (end) => {
  const frame = () => new Promise((done) => requestAnimationFrame(done));
  for (let y = 0; y <= end; y += 40) { scrollTo(0, y); await frame(); await frame(); }
}"""


def _listener(origin: str) -> str:
    """README's auto-height listener, for this server's origin: the script docs pages use."""
    readme = (ROOT / "README.md").read_text()
    (block,) = [b for b in re.findall(r"```html\n(.*?)```", readme, re.S) if "autograd-explorer:height" in b]
    return block.replace("https://explorer.example.org", origin)


def run() -> list[Row]:
    sync_playwright = playwright_here("embed_scroll")
    if sync_playwright is None:
        return []

    server = BenchServer()
    src = f"{server.url}/embed?code={encode_code(LOOP)}&autorun=1&readonly=1"
    page_html = (
        "<!doctype html><html><head><meta charset=utf-8><title>Docs</title></head><body><h1>A guide</h1>"
        f'<iframe src="{src}" title="Autograd Explorer" width="100%" height="560" style="border:0"></iframe>'
        + _listener(server.url) + '<p style="height: 1200px">After the frame.</p></body></html>')
    docs = DocsSite()
    docs.pages["/"] = page_html
    try:
        with sync_playwright() as playwright:
            browser = launch_chromium(playwright)
            page = browser.new_page(viewport={"width": 1200, "height": 800})
            page.goto(docs.url + "/")
            page.frame_locator("iframe").get_by_test_id("step-label").wait_for(timeout=120_000)
            inner = page.frames[1]
            elements = inner.evaluate("() => document.querySelectorAll('*').length")
            inner.evaluate(WATCH)
            height = page.evaluate("() => document.querySelector('iframe').getBoundingClientRect().height")
            page.evaluate(SCROLL, height)
            times = sorted(inner.evaluate("() => benchTimes"))
            browser.close()
    finally:
        docs.close()
        server.stop()
    if not times:
        return []
    pick = lambda q: times[min(len(times) - 1, int(q * len(times)))]  # noqa: E731
    case = f"embed of a 100-iteration leak ({elements:,} elements, {len(times)} scroll messages)"
    return [
        Row("embed_scroll", case, "median", pick(0.5), "ms", 4.0),
        Row("embed_scroll", case, "p95", pick(0.95), "ms", 16.0),
    ]

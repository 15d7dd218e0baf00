"""The page at model size (issue 27), through the real server and Debian's chromium.

Scenarios, as a new user would paste them (``app.bench.snippets``): a small CNN trained 3 epochs × 5
batches through a DataLoader, an LSTM that carries its hidden state, a TransformerEncoderLayer, and
a loop that never ends (cut by the 5 s wall limit). Rows:

* per scenario at 1440×900: steps (and whether a limit cut the run), click → drawn, the longest
  main-thread task from the click to two seconds after the draw, the page's height in its default
  view (``scrollHeight``: what the reader scrolls through), elements in ``#run``;
* the endless loop: click → drawn, and **Stop** pressed a second and a half into the run → drawn
  (``inf`` when the page has no Stop control);
* the CNN run at 390×844: whether the stepper is on screen (and not covered) at every scroll position
  where some of the graph is (0: always);
* the CNN run on ``/?lang=zh-CN`` in an English browser (``Accept-Language: en-US``): English words
  the page shows or says (text, ``aria-label``, ``title``, ``placeholder``), leaving out the user's
  code (the editor, every word of the snippet) and torch's own words (its node and saved-tensor
  names, dtypes, attribute names: ``TORCH_WORDS``);
* the height of an auto-height embed of a gallery bug beside its fix;
* axe-core (from npm) on the CNN run: serious and critical violations.

``EXPLORER_BENCH_PAGE`` picks scenarios (``cnn,lstm,transformer,forever``; default: all) and
``EXPLORER_BENCH_PAGE_CHECKS`` the checks (``phone,lang,compare,axe``; default: all). Needs the test extras
(playwright) and Debian's chromium; without them it says so and reports nothing.
"""

from __future__ import annotations

import math
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path

from app.bench import Row
from app.bench.http import BenchServer
from app.bench.scale import WATCH  # the click, the answer, the new run on screen, every long task
from app.bench.snippets import CNN, FOREVER, LSTM, TRANSFORMER
from app.bench.stepping import launch_chromium, playwright_here

ROOT = Path(__file__).resolve().parents[2]
AXE = ROOT / "node_modules" / "axe-core" / "axe.min.js"
TIMEOUT_MS = 120_000
SETTLE_SECONDS = 2.0  # after the draw, how long long tasks are watched for
STOP_AFTER_SECONDS = 1.5  # into the endless run, when Stop is pressed
HEIGHT_TARGET = 1800


@dataclass(frozen=True)
class Scenario:
    key: str
    name: str
    code: str
    drawn_ms: float | None = None  # targets (issue 27's table); None: informative
    height_px: float | None = HEIGHT_TARGET
    stop: bool = False


SCENARIOS = [
    Scenario("cnn", "CNN 3 epochs × 5 batches", CNN, drawn_ms=1000),
    Scenario("lstm", "LSTM carrying its state", LSTM),
    Scenario("transformer", "TransformerEncoderLayer", TRANSFORMER),
    Scenario("forever", "endless loop (cut at 5 s)", FOREVER, drawn_ms=6000, height_px=None, stop=True),
]

# Where the stepper is while the graph is on screen: the page scrolled so that the graph's viewport
# sits at the top, the middle and the bottom of the window, and at every 100 px in between.
STEPPER_IN_SIGHT = """() => {
  const graph = document.querySelector('[data-role="graph-viewport"]');
  const stepper = document.querySelector('#run .stepper');
  if (!graph || !stepper) return {checked: 0, hidden: 1};
  const top = graph.getBoundingClientRect().top + scrollY, h = graph.offsetHeight, vh = innerHeight;
  let checked = 0, hidden = 0;
  for (let y = Math.max(0, top - vh + 40); y <= top + h - 40; y += 100) {
    scrollTo(0, y);
    const g = graph.getBoundingClientRect();
    if (g.bottom <= 0 || g.top >= vh) continue;
    checked++;
    const r = stepper.getBoundingClientRect();
    const x = r.left + Math.min(24, r.width / 2), yy = r.top + r.height / 2;
    const hit = document.elementFromPoint(x, yy);
    if (r.top < 0 || r.bottom > vh || !hit || !stepper.contains(hit)) hidden++;
  }
  scrollTo(0, 0);
  return {checked, hidden};
}"""

# Every string the page shows or says, but the editor's code: text (rendered: innerText), and the
# aria-label, title and placeholder of every element. SVG <text> is the graph's drawing: node and
# saved-tensor names (torch's) and the user's names; its <title> tips are the page's words.
PAGE_WORDS = """() => {
  const out = [];
  const skip = (el) => el.closest('.cm-editor, [data-testid=code], textarea, pre, code');
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  for (let n = walker.nextNode(); n; n = walker.nextNode()) {
    const el = n.parentElement;
    if (!el || skip(el) || el.closest('script, style')) continue;
    if (el.closest('svg') && !el.closest('title')) continue;
    if (!el.closest('svg') && !el.checkVisibility()) continue;
    if (el.closest('title') && !el.closest('svg')) continue;
    out.push(n.textContent);
  }
  for (const el of document.body.querySelectorAll('[aria-label], [title], [placeholder]')) {
    if (skip(el)) continue;
    for (const a of ['aria-label', 'title', 'placeholder']) {
      if (el.hasAttribute(a)) out.push(el.getAttribute(a));
    }
  }
  return out;
}"""

# torch's and Python's own words (attribute, node and saved-tensor names, dtypes, devices, None, its
# source files), the names of the product, of PyTorch, GPUs, iframes and of the language switch's
# "English", keys and byte units: they are written so in every language.
TORCH_WORDS = frozenset("""
torch nn grad grad_fn next_functions requires_grad is_leaf retains_grad _version _base stride storage
storage_offset shape dtype device cpu cuda numpy backward zero_grad step self other result mat mat1 mat2
weight bias input indices output exponent running_mean running_var AccumulateGrad Tensor Parameter
float16 bfloat16 float32 float64 int8 int16 int32 int64 uint8 bool complex64 complex128
Autograd Explorer nan inf None True False PyTorch English Ctrl Tab Esc Enter Home End Shift KiB MiB GiB
autograd state target GPU CPU CUDA CUDACachingAllocator c10 cuda cpp iframe html
""".split())  # noqa: SIM905 - a list of words reads best as words
_WORD = re.compile(r"(?<![A-Za-z0-9_])_*[A-Za-z][A-Za-z0-9_]{2,}")  # _version is one word
# node names (MulBackward0), attribute names (running_mean), saved tensors' numbered names (result1, mat2)
_TORCH_NAME = re.compile(r"^[A-Z]\w*(Backward\d*|Grad|Function)$|^_?[a-z]+_[a-z0-9_]+$|^[a-z]+\d+$")


def english_words(strings: list[str], code: str) -> list[str]:
    """The words of ``strings`` that are neither the user's (every word of ``code``) nor torch's."""
    own = set(_WORD.findall(code))
    found: dict[str, None] = {}
    for text in strings:
        for word in _WORD.findall(text):
            if word in own or word in TORCH_WORDS or _TORCH_NAME.match(word):
                continue
            found[word] = None
    return list(found)


def _run(page, code: str) -> dict:  # noqa: ANN001 - Playwright's Page, imported lazily
    page.get_by_test_id("code").fill(code)
    page.evaluate(WATCH)
    page.get_by_test_id("run").click()
    page.wait_for_function("() => window.__bench.drawn !== undefined", polling=100, timeout=TIMEOUT_MS)
    time.sleep(SETTLE_SECONDS)
    bench = page.evaluate("window.__bench")
    return {
        "drawn": bench["drawn"] - bench["clicked"],
        "longest": max((d for start, d in bench["tasks"] if start >= bench["clicked"]), default=0.0),
        "count": page.evaluate("AX.explorer.count"),
        "height": page.evaluate("document.documentElement.scrollHeight"),
        "dom": page.evaluate("document.querySelectorAll('#run *').length"),
        "cut": page.evaluate("!!document.querySelector('#run [data-testid=notice], #run [data-testid=error]')"
                             ),
    }


def _stop(page, code: str) -> float:  # noqa: ANN001
    """Stop pressed into an endless run → the steps so far on screen (ms); inf without a Stop."""
    page.get_by_test_id("code").fill(code)
    page.evaluate(WATCH)
    page.get_by_test_id("run").click()
    time.sleep(STOP_AFTER_SECONDS)
    stop = page.locator("[data-testid=stop]")
    if not stop.count() or not stop.first.is_visible():
        page.wait_for_function("() => window.__bench.drawn !== undefined", polling=100, timeout=TIMEOUT_MS)
        return math.inf
    pressed = page.evaluate("performance.now()")
    stop.first.click()
    page.wait_for_function("() => window.__bench.drawn !== undefined", polling=100, timeout=TIMEOUT_MS)
    return page.evaluate("window.__bench.drawn") - pressed


def _open(browser, url: str, width: int, height: int, path: str = "/"):  # noqa: ANN001, ANN202
    page = browser.new_page(viewport={"width": width, "height": height}, locale="en-US",
                            extra_http_headers={"Accept-Language": "en-US,en;q=0.9"})
    page.set_default_timeout(TIMEOUT_MS)
    page.goto(url + path)
    page.wait_for_function("() => window.AX && AX.runs > 0")
    return page


def _chosen(variable: str, known: list[str]) -> set[str]:
    names = os.environ.get(variable, "")
    return set(known) if not names.strip() else {n.strip() for n in names.split(",")}


def run() -> list[Row]:
    sync_playwright = playwright_here("page")
    if sync_playwright is None:
        return []
    scenarios = [s for s in SCENARIOS if s.key in _chosen("EXPLORER_BENCH_PAGE", [s.key for s in SCENARIOS])]
    checks = _chosen("EXPLORER_BENCH_PAGE_CHECKS", ["phone", "lang", "compare", "axe"])
    server = BenchServer()
    rows: list[Row] = []
    try:
        with sync_playwright() as playwright:
            browser = launch_chromium(playwright)
            page = _open(browser, server.url, 1440, 900)
            for s in scenarios:
                b = _run(page, s.code)
                cut = " (cut by a limit)" if b["cut"] else ""
                rows += [
                    Row("page", s.name, "steps" + cut, b["count"], "steps"),
                    Row("page", s.name, "click → drawn", b["drawn"], "ms", s.drawn_ms),
                    Row("page", s.name, "longest main-thread task, click → 2 s after the draw", b["longest"],
                        "ms", 200),
                    Row("page", s.name, "page height, default view (1440×900)", b["height"], "px",
                        s.height_px),
                    Row("page", s.name, "elements in #run", b["dom"], ""),
                ]
                if s.stop:
                    stopped = _stop(page, s.code)
                    rows.append(Row("page", s.name, "Stop (1.5 s in) → drawn", stopped, "ms", 1000))
            page.close()
            if "phone" in checks:
                phone = _open(browser, server.url, 390, 844)
                _run(phone, CNN)
                seen = phone.evaluate(STEPPER_IN_SIGHT)
                rows += [Row("page", "CNN at 390×844", "scroll positions with the graph on screen",
                             seen["checked"], ""),
                         Row("page", "CNN at 390×844", "of them, the stepper out of sight or covered",
                             seen["hidden"], "", 0)]
                phone.close()
            if "lang" in checks:
                zh = _open(browser, server.url, 1440, 900, "/?lang=zh-CN")
                _run(zh, CNN)
                words = english_words(zh.evaluate(PAGE_WORDS), CNN)
                print(f"[page] English words in the zh-CN run: {', '.join(words[:40]) or 'none'}")
                rows.append(Row("page", "CNN, lang=zh-CN, English browser", "English words (distinct)",
                                len(words), "", 0))
                zh.close()
            if "compare" in checks:  # bug beside fix in an auto-height embed (issue 27: 4,812 px)
                embed = _open(browser, server.url, 1440, 900, "/embed?compare=losses-keep-graphs")
                height = embed.evaluate("document.documentElement.scrollHeight")
                case = "embed, bug vs fix (losses-keep-graphs)"
                rows.append(Row("page", case, "height at 1440 wide", height, "px"))
                embed.close()
            if "axe" in checks and AXE.is_file():
                en = _open(browser, server.url, 1440, 900)
                _run(en, CNN)
                found = _axe(en)
                bad = [v for v in found if v["impact"] in ("serious", "critical")]
                print(f"[page] axe on the CNN run: {', '.join(v['id'] for v in found) or 'nothing'}")
                rows.append(Row("page", "CNN run, axe-core", "serious/critical violations", len(bad), "", 0))
                en.close()
            browser.close()
    finally:
        server.stop()
    return rows


def _axe(page) -> list[dict]:  # noqa: ANN001
    page.evaluate(AXE.read_text() + "\n;true")
    return page.evaluate("""() => axe.run(document, {runOnly: {type: "tag", values:
        ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa", "best-practice"]}, resultTypes: ["violations"]})
        .then(r => r.violations.map(v => ({id: v.id, impact: v.impact})))""")

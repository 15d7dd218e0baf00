"""``python -m app.bench library``: the library entry's targets (issue 28).

- ``show()`` of the leak x100 in a warm Jupyter kernel (a real ipykernel, driven by jupyter_client from
  the test extras): the cell's own time, from the call to the display message sent, ≤ 0.5 s; with
  ``sin`` and with ``relu`` (a variant is a target met too), median of rounds after one warm-up.
- The standalone page of the leak x1000 (``Run.save``): its size, ≤ 2 MB, and the time Chromium takes
  to draw it from the file with every network request blocked, ≤ 2 s: from the navigation's start to
  the first frame painted after the explorer set the run up (``AX.runs``), median of rounds.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path

from app.bench import Row
from app.bench.snippets import LEAK
from app.bench.stepping import launch_chromium, playwright_here

ROUNDS = 5
SHOW_TARGET_S = 0.5
PAGE_TARGET_MB = 2.0
DRAW_TARGET_S = 2.0
VARIANTS = {"sin": LEAK, "relu": LEAK.replace(".sin()", ".relu()")}

# The timed cell: the library's show() in the kernel, measured in the kernel itself.
CELL = """\
import time as _time
_started, _cpu = _time.perf_counter(), _time.process_time()
ax.show({code!r})
print("elapsed", _time.perf_counter() - _started, _time.process_time() - _cpu)
"""

# The first frame painted once the run is set up, in ms since the navigation started.
DRAWN = """() => new Promise(resolve => {
  const ready = () => window.AX && window.AX.runs === 1;
  const wait = () => ready() ? requestAnimationFrame(() => resolve(performance.now())) : setTimeout(wait, 5);
  wait();
})"""


def _kernel_rows() -> list[Row]:
    try:
        from jupyter_client.manager import start_new_kernel
    except ImportError:
        print("[library] jupyter_client is not installed (pip install -e '.[test]'): no kernel rows")
        return []
    manager, client = start_new_kernel(kernel_name="python3")
    rows: list[Row] = []
    try:
        _execute(client, "import autograd_explorer as ax")
        for name, leak in VARIANTS.items():
            code = leak.format(n=100)
            _execute(client, CELL.format(code=code))  # warm: the layout engine, the templates, torch's ops
            rounds = [_execute(client, CELL.format(code=code)) for _ in range(ROUNDS)]
            times, cpu = [r[0] for r in rounds], [r[1] for r in rounds]
            case = f"show() leak x100 ({name}), warm kernel, {ROUNDS} rounds"
            rows += [Row("library", case, "median", statistics.median(times), "s", SHOW_TARGET_S),
                     Row("library", case, "max", max(times), "s"),
                     # the kernel's own CPU time: what the call costs on a core of its own, however busy
                     # the machine is
                     Row("library", case, "CPU (median)", statistics.median(cpu), "s")]
    finally:
        client.stop_channels()
        manager.shutdown_kernel(now=True)
    return rows


def _execute(client, code: str) -> tuple[float, float]:  # noqa: ANN001 - a BlockingKernelClient
    """Run a cell; the wall and CPU seconds it printed (0 when none). A cell that fails raises."""
    reply = client.execute_interactive(code, timeout=600, output_hook=_collect)
    if reply["content"]["status"] != "ok":
        raise RuntimeError(f"the cell failed: {reply['content'].get('evalue')}")
    printed = _collect.printed
    _collect.printed = ""
    for line in printed.splitlines():
        if line.startswith("elapsed "):
            wall, cpu = line.split()[1:3]
            return float(wall), float(cpu)
    return 0.0, 0.0


def _collect(message: dict) -> None:
    if message["msg_type"] == "stream":
        _collect.printed += message["content"]["text"]


_collect.printed = ""  # type: ignore[attr-defined]


def _page_rows() -> list[Row]:
    import autograd_explorer as ax

    rows: list[Row] = []
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "leak1000.html"
        started = time.perf_counter()
        ax.trace(LEAK.format(n=1000), title="leak x1000").save(path)
        made = time.perf_counter() - started
        size = path.stat().st_size
        rows += [Row("library", "standalone page, leak x1000", "size", size / 1e6, "MB", PAGE_TARGET_MB),
                 Row("library", "standalone page, leak x1000", "trace + write (python)", made, "s")]
        sync_playwright = playwright_here("library")
        if sync_playwright is None:
            return rows
        drawn: list[float] = []
        with sync_playwright() as playwright:
            browser = launch_chromium(playwright)
            for _ in range(ROUNDS):
                page = browser.new_page(viewport={"width": 1440, "height": 900})
                page.route("**/*", lambda route: route.continue_() if route.request.url.startswith("file:")
                           else route.abort())
                page.goto(path.as_uri())
                drawn.append(page.evaluate(DRAWN) / 1000)
                page.close()
            browser.close()
        case = f"standalone page, leak x1000, Chromium from the file, offline, {ROUNDS} rounds"
        rows += [Row("library", case, "drawn (median)", statistics.median(drawn), "s", DRAW_TARGET_S),
                 Row("library", case, "drawn (max)", max(drawn), "s")]
    return rows


def run() -> list[Row]:
    return _page_rows() + _kernel_rows()

"""Stepping is instant: every step of a 1000-step trace is on the page; switching asks no server.

The time measured is the explorer's own work plus the style and layout it causes (forced with
``offsetHeight``), per switch, with performance.now() in the page.
"""

from __future__ import annotations

import json

from tests.browser_support import open_page, run_code, step_label

LOOP = (
    "w = torch.randn(4, 3, requires_grad=True)\n"
    "x = torch.randn(3)\n"
    "total = 0.0\n"
    "for i in range(400):\n"
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


def test_step_switch_is_fast_on_a_1000_step_trace(page) -> None:
    open_page(page)
    requests: list[str] = []
    run_code(page, LOOP)
    assert step_label(page).startswith("Step 1000 of 1000")
    page.on("request", lambda request: requests.append(request.url))
    stats = page.evaluate(MEASURE)
    print("step switch on 1000 steps (ms):", json.dumps({k: round(v, 2) for k, v in stats.items()}))
    assert stats["p95"] <= 50 and stats["median"] <= 20
    assert requests == []  # stepping never asks the server
    page.get_by_test_id("step-first").click()
    assert step_label(page) == "Step 1 of 1000 · line 1"

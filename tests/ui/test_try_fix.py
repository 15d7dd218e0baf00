""""Try this fix" in a real browser (Debian's chromium, a real server and sandbox): code typed into the
editor, run, and a finding's fix opened beside it — the user's code on one side, the fixed code on the
other, editable; one line says what the fix changed; the figure the finding quotes is the one the
chart's readout shows at the same step; the cut of a never-trained parameter is marked on the graph."""

from __future__ import annotations

import re

from tests.browser_support import axe_violations, open_page, run_code, serious, step_label

LEAK = """\
w = torch.randn(64, requires_grad=True)
losses = []
for step in range(4):
    loss = (w * torch.randn(64)).sigmoid().sum()
    losses.append(loss)
"""

CUT = """\
encoder = nn.Linear(6, 12)
decoder = nn.Linear(12, 1)
opt = torch.optim.SGD([*encoder.parameters(), *decoder.parameters()], lr=0.1)
x = torch.randn(16, 6)
code = encoder(x).relu().detach()
loss = decoder(code).pow(2).mean()
loss.backward()
opt.step()
"""

SIDE_A, SIDE_B = '[data-testid="compare-bug"]', '[data-testid="compare-fix"]'


def _compare_ready(page) -> None:
    page.wait_for_function("() => window.AX && AX.runs >= 2")


def test_typed_code_opens_its_fix_beside_it_and_the_fix_can_be_edited(page) -> None:
    open_page(page)
    run_code(page, LEAK)
    finding = page.get_by_test_id("diagnostic")
    assert finding.count() == 1 and finding.get_by_test_id("diagnostic-label").inner_text() == \
        "Graphs kept in a container"
    # the figure the finding quotes at its step is the chart's readout at that step
    # (the finding is one line that opens into its message: the text is read whether open or not)
    quoted = re.findall(r"([\d,]+ bytes) at step (\d+)", finding.text_content())
    finding.locator(".diag-line").click()
    size, step = quoted[-1]
    assert step_label(page).startswith(f"Step {step} of")
    readout = page.get_by_test_id("memory-timeline").locator("[data-role=timeline-readout]").inner_text()
    assert readout.startswith(f"step {step}: {size} in all")

    finding.get_by_test_id("try-fix").click()
    _compare_ready(page)
    assert page.locator(f"{SIDE_A} .compare-badge").text_content() == "Your code"
    assert page.locator(f"{SIDE_B} .compare-badge").text_content() == "With the fix"
    assert "losses.append(loss)" in page.locator(f"{SIDE_A} [data-testid=compare-code]").inner_text()
    source = page.locator(f"{SIDE_B} [data-testid=compare-source]")
    assert "losses.append(loss.item())" in source.input_value()
    change = page.get_by_test_id("compare-change").inner_text()
    assert change.startswith("With the fix:") and "no growth per iteration (was +" in change
    assert page.locator(f"{SIDE_B} [data-testid=diagnostic]").count() == 0  # the fix is quiet
    assert serious(axe_violations(page)) == []

    # the fixed side is editable: a different fix, run again
    source.fill(source.input_value().replace("loss.item()", "loss.detach()"))
    page.get_by_test_id("compare-rerun").click()
    page.wait_for_url(re.compile(r"/compare\?code=.*compare_code=.*fix=1"))
    _compare_ready(page)
    edited = page.locator(f"{SIDE_B} [data-testid=compare-source]").input_value()
    assert "losses.append(loss.detach())" in edited
    assert page.locator(f"{SIDE_B} [data-testid=diagnostic]").count() == 0


def test_a_never_trained_parameter_is_marked_on_the_graph_and_fixed_beside_it(page) -> None:
    open_page(page)
    run_code(page, CUT)
    finding = page.get_by_test_id("diagnostic")
    assert finding.get_attribute("data-rule") == "grad-stays-none"
    assert finding.get_attribute("data-line") == "5"
    assert finding.get_attribute("data-severity") == "warning"
    cut = finding.get_attribute("data-cut").split()
    finding.locator(".diag-line").click()
    assert step_label(page).endswith("after line 5 ran")
    marked = page.locator("[data-role=graph] .diag-cut")
    assert marked.count() >= 1 and all(m.get_attribute("data-t") in cut for m in marked.all())
    page.get_by_test_id("step-first").click()  # before the cut: nothing marked
    assert page.locator("[data-role=graph] .diag-cut").count() == 0

    finding.get_by_test_id("try-fix").click()
    _compare_ready(page)
    change = page.get_by_test_id("compare-change").inner_text()
    assert "encoder.bias, encoder.weight now get a gradient" in change
    fixed = page.locator(f"{SIDE_B} [data-testid=compare-source]").input_value()
    assert "code = encoder(x).relu()\n" in fixed
    assert page.locator(f"{SIDE_B} [data-testid=diagnostic]").count() == 0

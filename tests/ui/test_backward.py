"""Stepping through a backward pass in a real browser (issue 13): over it by default, into it and out
of it by button and by key, and what the graph shows in a backward step."""

from __future__ import annotations

from tests.browser_support import axe_violations, open_page, run_code, serious, step_label

TWO_PATHS = (
    "a = torch.tensor([1., 2., 3.], requires_grad=True)\n"  # step 1
    "b = a * 2\n"  # 2
    "c = a.sin()\n"  # 3
    "(b + c).sum().backward()\n"  # nodes: steps 4-8 (Sum, Add, Sin, Mul, AccumulateGrad), the line: 9
    "d = a.grad\n"  # 10
)


def _phase(page) -> str:
    phase = page.get_by_test_id("step-phase")
    return "" if phase.is_hidden() else phase.inner_text()


def test_step_over_into_and_out_of_a_backward_pass_by_button_and_key(page) -> None:
    open_page(page)
    run_code(page, TWO_PATHS)
    page.get_by_test_id("step-first").click()
    into, out = page.get_by_test_id("step-into"), page.get_by_test_id("step-out")
    page.get_by_test_id("step-next").click()
    page.get_by_test_id("step-next").click()
    assert step_label(page) == "Step 3 of 10 · after line 3 ran"
    assert into.is_visible() and out.is_hidden()  # the next line runs backward
    page.get_by_test_id("step-next").click()  # over the five node steps, to the line's own step
    assert step_label(page) == "Step 9 of 10 · after line 4 ran"
    assert _phase(page) == "" and into.is_visible()
    page.get_by_test_id("step-prev").click()  # back over them too
    assert step_label(page) == "Step 3 of 10 · after line 3 ran"
    into.click()
    assert step_label(page) == "Step 4 of 10 · line 4, inside its backward pass"
    assert _phase(page) == "backward · node 1 of 5 · SumBackward0"
    assert out.is_visible() and into.is_hidden()
    page.get_by_test_id("step-next").click()  # inside the pass, next walks node by node
    assert _phase(page) == "backward · node 2 of 5 · AddBackward0"
    out.click()
    assert step_label(page) == "Step 9 of 10 · after line 4 ran" and _phase(page) == ""
    page.get_by_test_id("step-next").click()
    assert step_label(page) == "Step 10 of 10 · after line 5 ran" and into.is_hidden()

    page.locator("body").press("Home")
    page.locator("body").press("ArrowRight")
    page.locator("body").press("ArrowRight")
    page.locator("body").press("ArrowRight")
    assert step_label(page) == "Step 9 of 10 · after line 4 ran"
    page.locator("body").press("i")  # from the line's own step: into its pass
    assert _phase(page) == "backward · node 1 of 5 · SumBackward0"
    for _ in range(3):
        page.locator("body").press("ArrowRight")
    assert _phase(page) == "backward · node 4 of 5 · MulBackward0"
    page.locator("body").press("ArrowLeft")
    assert _phase(page) == "backward · node 3 of 5 · SinBackward0"
    page.locator("body").press("o")
    assert step_label(page) == "Step 9 of 10 · after line 4 ran"
    page.locator("body").press("o")  # outside a pass "o" does nothing
    assert step_label(page) == "Step 9 of 10 · after line 4 ran"


def _graph(page):
    return page.locator("#graph-view .drawing:not([hidden])")


def _dimmed(page) -> list[str]:
    """The labels of the boxes the browser draws dimmed (graph.css: what the pass did not reach)."""
    return _graph(page).locator(".node:not([hidden])").evaluate_all(
        "els => els.filter((e) => +getComputedStyle(e).opacity < 1)"
        ".map((e) => e.querySelector('.label').textContent)")


def test_a_backward_step_marks_the_node_that_ran_and_the_gradients_on_the_edges(page) -> None:
    open_page(page)
    run_code(page, TWO_PATHS)
    page.evaluate("s => AX.go(s)", 5)  # node 3: SinBackward0 ran
    drawing = _graph(page)
    ran = drawing.locator('.node[data-state~="ran"]:not([hidden])')
    assert ran.count() == 1 and ran.locator(".label").text_content() == "SinBackward0"
    grads = drawing.locator('.edge[data-state~="grad"]:not([hidden]) .edge-grad')
    texts = grads.evaluate_all("els => els.map((e) => e.textContent)")
    # cos(a) went from SinBackward0 to the leaf's AccumulateGrad (cells as the memory view writes them)
    assert "[0.5403 -0.416 -0.99]" in texts
    page.evaluate("s => AX.go(s)", 7)  # AccumulateGrad ran: both paths summed into a.grad
    texts = grads.evaluate_all("els => els.map((e) => e.textContent)")
    assert "[2.54 1.584 1.01]" in texts
    assert drawing.locator('.node-leaf[data-state~="reached"]:not([hidden])').count() == 1
    page.evaluate("s => AX.go(s)", 9)  # the next line: the marks are gone
    marked = '[data-state~="ran"]:not([hidden]), [data-state~="grad"]:not([hidden])'
    assert drawing.locator(marked).count() == 0


def test_the_graph_dims_what_no_gradient_reached(page) -> None:
    open_page(page)
    run_code(page, (
        "w = torch.tensor([1., 2.], requires_grad=True)\n"
        "u = torch.tensor([3., 4.], requires_grad=True)\n"
        "h = (u * 2).detach()\n"
        "loss = (w * h).sum()\n"
        "loss.backward()\n"
    ))
    assert step_label(page).startswith("Step ") and step_label(page).endswith("after line 5 ran")
    dimmed = _dimmed(page)
    assert "u" in dimmed and "w" not in dimmed and "loss" not in dimmed
    assert page.locator(".legend-unreached").is_visible()
    page.locator("body").press("Home")  # before the pass: nothing dimmed
    assert _dimmed(page) == []


def test_grad_stays_none_opens_the_cut_and_the_pass_leaves_the_parameter_alone(page) -> None:
    """The finding opens the line that cut the path (issue 26), with the parameter marked there; the
    backward pass's last node step then dims it as a leaf no gradient reached."""
    open_page(page)
    run_code(page, (
        "w = torch.tensor([1., 2.], requires_grad=True)\n"
        "b = torch.tensor([0.5, -0.5], requires_grad=True)\n"
        "opt = torch.optim.SGD([w, b], lr=0.1)\n"
        "h = (w * 3).detach()\n"
        "loss = (h * b).sum()\n"
        "loss.backward()\n"
    ))
    page.locator("body").press("Home")
    item = page.locator('[data-testid="diagnostic"][data-rule="grad-stays-none"]')
    item.locator(".diag-line").click()
    assert step_label(page).endswith("after line 4 ran")
    assert page.locator("[data-role=graph] .diag-cut").count() >= 1
    page.get_by_test_id("step-next").click()  # line 5; the next line runs backward
    page.get_by_test_id("step-into").click()
    for _ in range(20):  # walk to the pass's last node
        n, count = _phase(page).split("node ")[1].split(" ·")[0].split(" of ")
        if n == count:
            break
        page.get_by_test_id("step-next").click()
    phase = _phase(page)
    assert phase.startswith("backward · node ") and phase.endswith("AccumulateGrad") and n == count
    assert "w" in _dimmed(page) and "b" not in _dimmed(page)


def test_a_backward_step_has_no_serious_accessibility_violation(page) -> None:
    open_page(page)
    run_code(page, TWO_PATHS)
    page.evaluate("s => AX.go(s)", 5)  # inside the pass: its label, Step out, the graph's marks
    assert page.get_by_test_id("step-out").is_visible()
    assert serious(axe_violations(page, include=("#run",))) == []

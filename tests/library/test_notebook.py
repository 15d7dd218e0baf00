"""The library in a real Jupyter kernel (nbclient): ``show``, ``%%explore`` with its variables left for
the next cell, two runs in one notebook, every output with the three mimetypes; then the notebook as
nbconvert exports it to HTML, opened by Debian's chromium with every network request blocked: each
run draws and steps in its own frame, without a console error, and none of them asks for anything."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
nbconvert = pytest.importorskip("nbconvert")

pytestmark = pytest.mark.slow

CELLS = [
    "import autograd_explorer as ax\n"
    "ax.show('x = torch.ones(3, requires_grad=True)\\ny = (x * 2).sum()\\ny.backward()', title='show')",
    "%load_ext autograd_explorer",
    "%%explore --title cell\n"
    "w = torch.randn(4, requires_grad=True)\n"
    "kept = []\n"
    "for i in range(3):\n"
    "    loss = (w * i).sin()\n"
    "    kept.append(loss)\n"
    "total = (w * 2).sin().sum()\n"
    "total.backward()\n"
    "print('grad', w.grad.shape)",
    # the cell's variables live on in the notebook, with their graph and their gradient
    "print(type(w).__name__, len(kept), kept[0].grad_fn is not None, w.grad is not None,\n"
    "      torch.equal(w.grad, 2 * torch.cos(2 * w)))",
    "run = ax.trace('a = torch.zeros(2, 3)\\nb = a.t()\\na.add_(1)', title='second')\nrun",
]
MIMETYPES = {"text/html", "image/svg+xml", "text/plain"}


@pytest.fixture(scope="module")
def executed(tmp_path_factory: pytest.TempPathFactory):  # noqa: ANN201 - a notebook node
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [nbformat.v4.new_code_cell(source) for source in CELLS]
    client = nbclient.NotebookClient(notebook, timeout=300, kernel_name="python3",
                                     resources={"metadata": {"path": str(tmp_path_factory.mktemp("nb"))}})
    client.execute()
    return notebook


def _rich(cell) -> list[dict]:  # noqa: ANN001
    return [out for out in cell.outputs if out.output_type in ("display_data", "execute_result")]


def test_every_run_shows_the_three_mimetypes(executed) -> None:  # noqa: ANN001
    for index in (0, 2, 4):
        (output,) = _rich(executed.cells[index])
        assert set(output.data) >= MIMETYPES, index
        assert output.data["text/html"].startswith("<iframe ")
        assert output.data["image/svg+xml"].lstrip().startswith(("<svg", "<?xml"))
        assert "<script" not in output.data["image/svg+xml"]
        assert output.data["text/plain"].startswith("Autograd Explorer")
    assert "· show ·" in _rich(executed.cells[0])[0].data["text/plain"]


def test_explore_leaves_the_cells_variables_and_prints_its_output(executed) -> None:  # noqa: ANN001
    printed = "".join(o.get("text", "") for o in executed.cells[2].outputs if o.output_type == "stream")
    assert printed == "grad torch.Size([4])\n"
    summary = _rich(executed.cells[2])[0].data["text/plain"]
    assert "graph-kept-by-container" in summary  # the diagnostics ran on the cell
    after = "".join(o.get("text", "") for o in executed.cells[3].outputs if o.output_type == "stream")
    assert after == "Tensor 3 True True True\n"


def test_the_exported_notebook_works_offline(executed, browser, tmp_path: Path) -> None:  # noqa: ANN001
    body, _ = nbconvert.HTMLExporter().from_notebook_node(executed)
    exported = tmp_path / "notebook.html"
    exported.write_text(body, encoding="utf-8")
    page = browser.new_page()
    errors: list[tuple[str, str]] = []
    asked: list[tuple[str, str]] = []
    page.on("console", lambda m: errors.append((m.text, m.location.get("url", "")))
            if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append((str(e), "pageerror")))

    def block(route) -> None:  # noqa: ANN001
        request = route.request
        if request.url.startswith("file:"):
            route.continue_()
            return
        asked.append((request.url, request.frame.url))
        route.abort()

    page.route("**/*", block)
    try:
        page.goto(exported.as_uri())
        frames = [f for f in page.frames if f.url == "about:srcdoc"]
        assert len(frames) == 3
        for frame in frames:
            frame.wait_for_function("() => window.AX && window.AX.runs === 1", timeout=60_000)
            assert frame.locator("[data-role=memory] .strip, .memory [data-k]").count() > 0
            assert frame.locator("[data-role=graph-svg] .node").count() > 0
            assert frame.get_by_test_id("memory-timeline").locator(".tl-gpu-reserved").count() == 1
        first, second, third = frames
        label = third.get_by_test_id("step-label").inner_text()
        third.get_by_test_id("step-first").click()
        assert third.get_by_test_id("step-label").inner_text().startswith("Step 1 of ")
        third.locator("body").press("ArrowRight")  # the keyboard steps the run it is in, only
        assert third.get_by_test_id("step-label").inner_text().startswith("Step 2 of ")
        assert third.locator(".sa-lines li.is-step").get_attribute("data-line") == "2"
        assert first.get_by_test_id("step-label").inner_text() != "" and label != ""
        assert second.get_by_test_id("step-label").inner_text().startswith("Step ")
        assert first.evaluate("() => window.AX.explorer.step === window.AX.explorer.count - 1")
        # the frames fit their runs: each as tall as its page
        for frame in frames:
            height = frame.evaluate("() => document.documentElement.getBoundingClientRect().height")
            assert abs(frame.frame_element().bounding_box()["height"] - height) <= 2
    finally:
        page.close()
    # Nothing of ours asked the network; what was asked is nbconvert's own page (its CDN scripts),
    # and every console error is that page failing to load them.
    assert all(frame_url != "about:srcdoc" for _, frame_url in asked)
    nbconvert_urls = {url for url, _ in asked}
    assert all(re.match(r"https://cdnjs\.cloudflare\.com/", url) for url in nbconvert_urls), nbconvert_urls
    ours = [e for e in errors if e[1] in ("about:srcdoc", "pageerror") or "srcdoc" in e[1]]
    assert not ours, ours
    assert all(e[0].startswith("Failed to load resource") for e in errors), errors

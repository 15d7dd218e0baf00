"""The diagnostics panel and memory timeline partials: what a learner reads, escaped, and the hooks
the page's JavaScript uses. Rendered with the page's own Jinja environment."""

from __future__ import annotations

import re

import pytest
from diagnostics_support import run

from app.diagnostics import report
from app.gallery import get_example
from app.render.findings import MAX_BARS, findings_context, segments, timeline_view
from app.web.pages import render


def panel_text(html: str) -> str:
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", "", html)).replace("&#34;", '"').replace("&#39;", "'")


def diagnostics_context(trace, code: str, try_link=None) -> dict:  # noqa: ANN001
    return findings_context(report(trace, code), code, try_link=try_link)


def test_list_of_losses_panel_explains_growth_and_the_change() -> None:
    example = get_example("losses-keep-graphs")
    r = run(example.code)
    html = render("_diagnostics.html", **diagnostics_context(r.trace, r.code, lambda fixed: "/compare?x"))
    text = panel_text(html)
    d = r.only("graph-kept-by-container")
    # Why memory grows: the tensor keeps its graph; how many graphs; how many bytes, per iteration.
    for needed in ("still has its autograd graph", "holds 3 graphs", f"{d.bytes:,} bytes per iteration",
                   "the memory chart shows",
                   # What to change, as code to copy, and as a compare to open.
                   "losses.append(loss.item())", "plain Python float", "Try this fix"):
        assert needed in text, needed
    assert 'data-testid="diagnostics"' in html and 'data-rule="graph-kept-by-container"' in html
    assert "Graphs kept in a container" in text  # a label for a person ...
    assert "graph-kept-by-container" not in text  # ... not the rule's id
    step = r.result.steps[d.step]
    ids = {step.variables[f"losses[{i}]"] for i in range(2)}  # the graphs of earlier iterations
    assert f'data-goto="{d.step}"' in html
    assert set(re.search(r'data-tensors="([^"]*)"', html)[1].split()) == ids
    assert "<code>losses.append(loss.item())</code>" in html


def test_user_text_in_messages_is_escaped() -> None:
    r = run("""
        w = torch.randn(3, requires_grad=True)
        losses = []
        for i in range(2):
            losses.append((w * len("<script>alert(1)</script>")).exp().sum())
    """)
    d = r.only("graph-kept-by-container")
    assert "<script>" in d.message  # the statement is quoted in the message ...
    html = render("_diagnostics.html", **diagnostics_context(r.trace, r.code))
    assert "<script>" not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html  # ... as text


def test_empty_panel_still_has_its_hook() -> None:
    r = run("x = torch.ones(3)\n")
    html = render("_diagnostics.html", **diagnostics_context(r.trace, r.code))
    assert 'data-testid="diagnostics" data-count="0"' in html and "No pitfalls found" in html


@pytest.mark.parametrize("code", ["x = (\n", "x = torch.randn(3).cuda()\n"])
def test_a_run_that_never_started_says_nothing_about_pitfalls(code: str) -> None:
    """A syntax error, a CUDA call without a GPU: no step ran, nothing was looked at."""
    r = run(code)
    assert r.result.steps == []
    html = render("_diagnostics.html", **diagnostics_context(r.trace, r.code))
    assert 'data-count="0"' in html and 'data-ran="false"' in html and "No pitfalls" not in html


def test_a_refused_run_says_nothing_about_pitfalls() -> None:
    """The gate's refusal (an import it does not allow), or the sandbox running out of memory: no steps."""
    from app.schema import DeltaTrace, RunError

    for kind in ("rejected", "memory"):
        trace = DeltaTrace(ok=False, steps=[], error=RunError(kind=kind, type="X", message="refused"))
        html = render("_diagnostics.html", **diagnostics_context(trace, "import os\n"))
        assert 'data-ran="false"' in html and "No pitfalls" not in html


def test_a_finding_without_a_patch_offers_no_try() -> None:
    r = run("""
        import numpy as np
        encoder = nn.Linear(4, 4)
        head = nn.Linear(4, 1)
        opt = torch.optim.SGD([*encoder.parameters(), *head.parameters()], lr=0.1)
        f = encoder(torch.randn(9, 4)).detach().numpy()
        loss = head(torch.from_numpy(np.clip(f, 0.0, None))).pow(2).mean()
        loss.backward()
        opt.step()
    """)
    html = render("_diagnostics.html", **diagnostics_context(r.trace, r.code, lambda fixed: "/compare?x"))
    assert 'data-rule="grad-stays-none"' in html and 'data-testid="try-fix"' not in html


def test_the_four_way_table_is_filled_from_the_run() -> None:
    r = run(get_example("four-combinations").code)
    html = render("_diagnostics.html", **diagnostics_context(r.trace, r.code))
    rows = [panel_text(row) for row in re.findall(r'<tr class="fourway-row".*?</tr>', html, re.S)]
    assert rows == [" a .clone() nothing: memory of its own yes, through CloneBackward0 ",
                    " b .detach() x no ", " c .clone().detach() nothing: memory of its own no ",
                    " d .detach().clone() nothing: memory of its own no "]


def test_timeline_bars_and_click_targets() -> None:
    r = run(get_example("losses-keep-graphs").code)
    context = diagnostics_context(r.trace, r.code)
    html = render("_memory_timeline.html", **context)
    assert html.count('class="tl-bar"') == len(r.result.steps)
    targets = [int(s) for s in re.findall(r'class="tl-bar" data-goto="(\d+)"', html)]
    assert targets == list(range(len(r.result.steps)))
    view = context["timeline"]
    tallest = max(view.bars, key=lambda b: b.variable_h + b.graph_h)
    assert abs(tallest.variable_h + tallest.graph_h - (view.height - 2)) < 1e-6
    # The graph band of the last step is taller than the first step's: the growth is visible.
    assert view.bars[-1].graph_h > view.bars[0].graph_h == 0


def test_long_runs_are_bucketed() -> None:
    from app.schema import MemoryAccount

    memory = [MemoryAccount(step=i, total_bytes=i, variable_bytes=i, graph_bytes=0, shared_bytes=0)
              for i in range(1000)]
    view = timeline_view(memory, current=999)
    assert len(view.bars) <= MAX_BARS and view.bars[-1].last == 999
    assert view.bars[1].first == view.bars[0].last + 1 and view.cursor_x == view.bars[-1].x


def test_the_chart_has_an_axis_and_each_bar_says_its_bytes() -> None:
    from app.schema import MemoryAccount
    from app.units import fmt_bytes

    memory = [MemoryAccount(step=i, total_bytes=100 * i + 5000, variable_bytes=5000, graph_bytes=100 * i,
                            shared_bytes=0) for i in range(1000)]
    view = timeline_view(memory)
    assert view.top == fmt_bytes(99_900 + 5000)  # the chart's top is its peak
    per_bar = view.bars[0].last + 1
    last = view.bars[-2]  # a bar stands for several steps: it says their largest
    assert last.tip.startswith(f"steps {last.first + 1}–{last.last + 1} (their largest)")
    assert fmt_bytes(100 * last.last) in last.tip and fmt_bytes(5000) in last.tip
    assert per_bar > 1
    html = render("_memory_timeline.html", timeline=timeline_view(memory[:3]))
    tip = f"step 3: {fmt_bytes(5000)} through variables, {fmt_bytes(200)} held only by the graph"
    assert f"<title>{tip}</title>" in html
    assert ">step 1<" in html and ">step 3<" in html and f">{fmt_bytes(5200)}<" in html


def test_segments_mark_code() -> None:
    assert segments("use `x.item()` now") == [("use ", False), ("x.item()", True), (" now", False)]
    assert segments("odd ` tick") == [("odd ` tick", False)]

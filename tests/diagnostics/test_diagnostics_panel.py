"""The diagnostics panel and memory timeline partials: what a learner reads, escaped, and the hooks
the page's JavaScript uses. Rendered with the page's own Jinja environment."""

from __future__ import annotations

import re

from diagnostics_support import run

from app.diagnostics.view import MAX_BARS, diagnostics_context, segments, timeline_view
from app.gallery import get_example
from app.web.pages import render


def panel_text(html: str) -> str:
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", "", html)).replace("&#34;", '"').replace("&#39;", "'")


def test_list_of_losses_panel_explains_growth_and_the_change() -> None:
    example = get_example("losses-keep-graphs")
    r = run(example.code)
    html = render("_diagnostics.html", **diagnostics_context(r.trace, r.code))
    text = panel_text(html)
    d = r.only("graph-kept-by-container")
    # Why memory grows: the tensor keeps its graph; how many graphs; how many bytes, per iteration.
    for needed in ("keeps its whole autograd graph alive", "holds 3 graphs", f"{d.bytes} bytes",
                   "Each iteration adds about", "never freed while losses exists",
                   # What to change, as code to copy.
                   "losses.append(loss.item())", "plain Python float"):
        assert needed in text, needed
    assert 'data-testid="diagnostics"' in html and 'data-rule="graph-kept-by-container"' in html
    step = r.result.steps[d.step]
    ids = {step.variables[f"losses[{i}]"] for i in range(3)}
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
    from app.diagnostics.trace import fmt_bytes
    from app.schema import MemoryAccount

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

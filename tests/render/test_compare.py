"""Bug vs fix (app/render/compare.py) on the engine's real traces of every gallery pair: steps
matched by line, both memory charts on one scale, the picture of both; and a compare counts as two
runs at the gates."""

from __future__ import annotations

from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from app import gallery
from app.config import Settings
from app.diagnostics import report
from app.gallery import EXAMPLES, get_example
from app.render.compare import code_pair, compare_svg, compare_view, heading, line_map, partner, twin_pair
from app.web.main import create_app
from tests.render.conftest import trace

PAIRS = [e.slug for e in EXAMPLES if e.fixed_twin]


def _compare(slug: str, step: int | None = None):  # noqa: ANN202
    """As the web layer draws a pair: it asks for both analyses and hands them to the view."""
    bug, fix = twin_pair(slug)
    traces = trace(bug.code), trace(fix.code)
    found = report(traces[0], bug.code), report(traces[1], fix.code)
    return compare_view(bug, fix, traces, step, found=found)


def test_the_compare_says_what_the_fix_changed() -> None:
    view = _compare("losses-keep-graphs")
    assert view.change.startswith("With the fix: ") and "held at the end (was " in view.change
    view = _compare("detach-stops-training")
    assert "`encoder.bias`, `encoder.weight` now get a gradient" in view.change
    assert [d.rule for d in view.bug.diagnostics] == ["grad-stays-none"] and view.fix.diagnostics == []
    assert view.bug.diagnostics[0].try_href == ""  # no link maker given: no "Try this fix"


def test_a_pair_is_found_from_either_side_and_from_its_code() -> None:
    for slug in PAIRS:
        bug, fix = twin_pair(slug)
        assert twin_pair(fix.slug) == (bug, fix) and bug.fixed_twin == fix.slug
        assert partner(bug.code) == (slug, "bug") and partner(fix.code) == (slug, "fix")
    assert twin_pair("clone-vs-detach") is None and twin_pair("nope") is None
    assert partner("x = 1\n") is None


def test_lines_pair_up_by_what_runs_not_by_their_comments() -> None:
    bug, fix = get_example("losses-keep-graphs"), get_example("losses-item")
    assert line_map(bug.code, fix.code) == {1: 1, 2: 2, 3: 3, 4: 4, 5: 5}
    view = _compare("losses-keep-graphs")
    assert view.bug.changed == {5} and view.fix.changed == {5}  # append(loss) vs append(loss.item())
    detach, copy = get_example("inplace-through-detach"), get_example("inplace-on-a-copy")
    # the comments of lines 2 and 5 differ, the code does not; lines 3-4 are the fix
    assert line_map(detach.code, copy.code) == {1: 1, 2: 2, 3: 3, 4: 4, 5: 5}
    assert _compare("inplace-through-detach").bug.changed == {3, 4}


@pytest.mark.parametrize("slug", PAIRS)
def test_each_step_goes_to_the_same_line_on_the_other_side(slug: str) -> None:
    view = _compare(slug)
    bug, fix = view.bug.view, view.fix.view
    assert len(view.to_fix) == bug.step_count and len(view.to_bug) == fix.step_count
    assert all(0 <= s < fix.step_count for s in view.to_fix)
    assert all(0 <= s < bug.step_count for s in view.to_bug)
    lines = line_map(view.bug.example.code, view.fix.example.code)
    fix_lines = set(fix.lines)
    for step, target in enumerate(view.to_fix):
        line = bug.lines[step]
        if lines.get(line) in fix_lines and bug.lines[: step + 1].count(line) <= fix.lines.count(lines[line]):
            assert fix.lines[target] == lines[line], (step, line, target)
    # the matches never run backwards: stepping forward on one side steps forward on the other
    assert list(view.to_fix) == sorted(view.to_fix) and list(view.to_bug) == sorted(view.to_bug)


def test_a_loop_pass_matches_the_same_pass() -> None:
    view = _compare("losses-keep-graphs")
    lines = view.bug.view.lines
    appends = [s for s, line in enumerate(lines) if line == 5]  # losses.append(...), once per pass
    assert len(appends) == 3
    fix_appends = [s for s, line in enumerate(view.fix.view.lines) if line == 5]
    assert [view.to_fix[s] for s in appends] == fix_appends


def test_a_line_that_runs_backward_matches_its_own_step_and_a_failing_run_holds_its_last() -> None:
    view = _compare("inplace-through-detach")
    bug, fix = view.bug.view, view.fix.view
    # the fix runs backward at line 5: one step per autograd node, then the line's own step
    backward = [s for s, line in enumerate(fix.lines) if line == 5]
    assert len(backward) > 1
    # the bug's backward() fails; its step of line 5 matches the fix's own step of that line
    assert view.to_fix[bug.lines.index(5)] == backward[-1]
    # the fix's steps past where the bug stopped stay on the bug's last step that matched
    assert view.to_bug[-1] == bug.step_count - 1


def test_an_opening_step_opens_the_fix_on_its_match() -> None:
    view = _compare("losses-keep-graphs", step=4)
    assert view.bug.frame.step == 4 and view.fix.frame.step == view.to_fix[4]


def test_two_codes_compare_as_code_a_and_code_b_titled_by_what_differs() -> None:
    a = "x = torch.ones(3, requires_grad=True)  # a comment no language translates\ny = (x * 2).sum()\n"
    b = a.replace("x * 2", "x * 3") + "y.backward()\n"
    cached = gallery._localized.cache_info().currsize
    view = compare_view(*code_pair(a, b), (trace(a), trace(b)))
    assert gallery._localized.cache_info().currsize == cached  # a user's code never enters the cache
    assert [side.badge for side in view.sides] == ["Code A", "Code B"]
    assert [side.example.title for side in view.sides] == ["y = (x * 2).sum()", "y = (x * 3).sum()"]
    assert [side.example.code for side in view.sides] == [a, b]  # as written, comments and all
    assert heading(view.bug.example, view.fix.example) == "Code A vs code B"
    assert view.fix.frame.step == view.to_fix[view.bug.frame.step]
    assert "Code A: y = (x * 2).sum()" in compare_svg(view)
    prefix = compare_view(*code_pair(a, a + "z = 1\n"), (trace(a), trace(a + "z = 1\n")))
    assert [side.example.title for side in prefix.sides] == ["no line the other side lacks", "z = 1"]


@pytest.mark.parametrize("slug", PAIRS)
def test_without_a_step_both_sides_open_synchronised(slug: str) -> None:
    view = _compare(slug)
    bug = view.bug.frame.step
    assert bug == view.bug.view.step_count - 1  # the bug opens on its last step
    assert view.fix.frame.step == view.to_fix[bug]  # and the fix on that step's match, not on its own last


@pytest.mark.parametrize("slug", PAIRS)
def test_both_charts_are_drawn_on_one_scale(slug: str) -> None:
    view = _compare(slug)
    per_byte = set()
    for side in view.sides:
        tl = side.timeline
        assert tl.bars and len(tl.points) == side.view.step_count
        for bar in tl.bars:  # one step per bar here: a bar is its step's bytes
            variable, graph = tl.points[bar.first][:2]
            if variable:
                per_byte.add(round(bar.variable_h / variable, 9))
            if graph:
                per_byte.add(round(bar.graph_h / graph, 9))
    assert len(per_byte) == 1  # pixels per byte: the same on both sides
    tallest = max(bar.variable_h + bar.graph_h for side in view.sides for bar in side.timeline.bars)
    assert tallest == pytest.approx(view.bug.timeline.height - 2)  # the larger peak of the two at the top
    peaks = [max(p[3] for p in side.timeline.points) for side in view.sides]
    assert view.peak == max(peaks)


def test_the_picture_has_both_sides_at_their_steps_and_both_charts() -> None:
    view = _compare("losses-keep-graphs", step=9)
    svg = compare_svg(view)
    assert svg.startswith("<svg ") and svg.count("<svg ") == 3  # the picture and one per side
    assert "The bug: A list of losses keeps every graph alive" in svg
    assert "The fix: … and .item() lets them go" in svg
    assert f"Step 10 of {view.bug.view.step_count}" in svg and f"Step {view.to_fix[9] + 1} of" in svg
    assert "Both memory charts share one scale" in svg


class EngineRuns:
    """The engine in this process, counting the runs the gates let through."""

    def __init__(self) -> None:
        self.codes: list[str] = []

    async def run(self, code: str):  # noqa: ANN201
        self.codes.append(code)
        return trace(code)


def test_a_compare_costs_two_runs_of_the_clients_rate(tmp_path: Path) -> None:
    runner = EngineRuns()
    settings = Settings(data_dir=tmp_path, rate_burst=3, rate_per_minute=0.5)
    with TestClient(create_app(settings, runner=runner)) as client:
        page = client.get("/compare?example=losses-keep-graphs")
        assert page.status_code == 200 and page.text.count('data-role="compare-side"') == 2
        assert runner.codes == [get_example("losses-keep-graphs").code, get_example("losses-item").code]
        assert client.get("/render.svg?example=clone-vs-detach").status_code == 200  # the third token
        refused = client.get("/embed?compare=losses-item")
        assert refused.status_code == 429 and int(refused.headers["retry-after"]) > 0
        assert "Slow down" in refused.text and "data-role=\"compare-side\"" not in refused.text
        assert len(runner.codes) == 3


def test_compare_links_that_name_no_pair_are_refused(tmp_path: Path) -> None:
    with TestClient(create_app(Settings(data_dir=tmp_path), runner=EngineRuns())) as client:
        assert client.get("/compare?example=clone-vs-detach").status_code == 404
        assert client.get("/embed?compare=nope").status_code == 400
        both = client.get("/render.svg?compare=losses-item&example=clone-vs-detach")
        assert both.status_code == 400 and "compare names its own code" in both.text

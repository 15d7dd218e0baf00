"""Bug vs fix, side by side: the two runs of a gallery example and its ``fixed_twin``, or of any two
codes (``code_pair``: a docs author's "before" and "after", neither from the gallery).

Pure: two validated traces in, one ``CompareView`` out. Each side is the playground's own view model
(``build_explorer``), its diagnostics and its memory-over-time chart, the two charts drawn on one
scale (the larger peak of the two) so that bar heights compare across sides. Steps are matched by
line so that stepping one side steps the other to the same point of the program:

* the two codes' lines are aligned (``difflib``): equal lines map to each other, and a changed
  block of the same length maps line by line (``losses.append(loss)`` ↔ ``losses.append(loss.item())``);
* each side's steps are cut into *visits*: consecutive steps of one line (a loop's third pass over
  line 4 is its third visit; a ``backward()`` line's node steps and its own step are one visit);
* the k-th visit of a line matches the k-th visit of its aligned line, counted from the visit's end
  (the line's own step, "after line N ran", matches the other's own step); a step with no match
  (a line only one side has, a run that ended early) goes where the last matched step before it went.

Linear in the steps of both runs.
"""

from __future__ import annotations

import tokenize
from dataclasses import dataclass, replace
from difflib import SequenceMatcher
from typing import Any

from app.diagnosis import Report
from app.gallery import EXAMPLES, Example, code_comments, get_example, localized
from app.i18n import gettext as _
from app.render.explorer import ExplorerView, build_explorer, client_payload, frame_at
from app.render.findings import (
    DiagnosticView,
    MadeRow,
    TimelineView,
    TryLink,
    change_line,
    diagnostic_view,
    fourway_rows,
    timeline_view,
)
from app.render.notices import RunLimits
from app.render.svg import render_svg
from app.render.svg_canvas import GAP, PAD, SANS, THEMES, Canvas, clean
from app.render.tracks import Frame
from app.schema import DeltaTrace
from app.units import fmt_bytes

ROLES = ("bug", "fix")


@dataclass(frozen=True)
class Side:
    role: str  # "bug" | "fix": the first side and the second
    badge: str  # "The bug" / "The fix" for a gallery pair, "Code A" / "Code B" for two codes
    example: Example  # in the request's language
    view: ExplorerView
    frame: Frame
    payload: dict[str, Any]  # what static/explorer.js steps this side with
    diagnostics: list[DiagnosticView]
    timeline: TimelineView  # on the scale both sides share
    changed: frozenset[int]  # its lines the other side does not have as they are
    fourway: list[MadeRow]
    ran: bool


@dataclass(frozen=True)
class CompareView:
    bug: Side
    fix: Side
    to_fix: tuple[int, ...]  # bug step -> the fix's matching step
    to_bug: tuple[int, ...]
    peak: int  # bytes at the top of both charts
    change: str = ""  # what the second side changes, in one line (memory at the end, growth, gradients)
    is_fix: bool = False  # the second side is a finding's fix of the first ("Try this fix")

    @property
    def sides(self) -> tuple[Side, Side]:
        return self.bug, self.fix

    def sync_payload(self) -> dict[str, list[int]]:
        """What static/compare.js steps the other side with."""
        return {"bug": list(self.to_fix), "fix": list(self.to_bug)}


def twin_pair(slug: str) -> tuple[Example, Example] | None:
    """(bug, fix) for the slug of either: an example with a ``fixed_twin``, or some example's twin."""
    example = get_example(slug)
    if example is None:
        return None
    if example.fixed_twin:
        fix = get_example(example.fixed_twin)
        return (example, fix) if fix is not None else None
    for bug in EXAMPLES:
        if bug.fixed_twin == slug:
            return bug, example
    return None


def code_pair(a: str, b: str) -> tuple[Example, Example]:
    """Two codes of the user's as the sides of a compare. No slug: they are not gallery examples, so
    nothing translates their comments (``shown``) and nothing names one of them the bug."""
    return Example("", "", "", a), Example("", "", "", b)


def shown(example: Example, other: Example) -> Example:
    """The example as the request's language shows it: a gallery example localized; a user's code as
    it was written (``localized`` caches per example: user codes must never enter it), titled by its
    first line the other side does not have."""
    if example.slug:
        return localized(example)
    title = _first_difference(example.code, other.code) or _("no line the other side lacks")
    return replace(example, title=title if len(title) <= MAX_TITLE else title[:MAX_TITLE - 1] + "…")


def _first_difference(code: str, other: str) -> str:
    """The first line of ``code`` (stripped) that is not the same line of ``other``, "" if none. One
    pass, not a diff: the routes title a user's pair with it outside any budget (the aligned diff the
    step matching uses runs in the compare's work, under the runs' budget)."""
    lines, others = code.splitlines(), other.splitlines()
    for i, line in enumerate(lines):
        if line.strip() and (i >= len(others) or line.strip() != others[i].strip()):
            return line.strip()
    return ""


MAX_TITLE = 60


def heading(bug: Example, fix: Example, is_fix: bool = False) -> str:
    """The compare's heading (page, embed, picture), from the sides as ``shown``."""
    if bug.slug:
        return _("Bug vs fix: {bug} / {fix}").format(bug=bug.title, fix=fix.title)
    return _("Your code vs the fix") if is_fix else _("Code A vs code B")


def _badge(role: str, gallery: bool, fix: bool = False) -> str:
    if gallery:
        return _("The bug") if role == "bug" else _("The fix")
    if fix:
        return _("Your code") if role == "bug" else _("With the fix")
    return _("Code A") if role == "bug" else _("Code B")


def partner(code: str) -> tuple[str, str] | None:
    """(slug to compare, "bug" | "fix") when ``code`` is exactly one side of a gallery pair in the
    request's language: the run of it can offer the comparison."""
    for example in EXAMPLES:
        pair = twin_pair(example.slug)
        if pair is not None and localized(example).code == code:
            return pair[0].slug, "bug" if example is pair[0] else "fix"
    return None


def _statements(code: str) -> list[str]:
    """Each line without its comment (the pair's comments explain, they do not differ in what runs)."""
    lines = code.splitlines()
    try:
        for line, column, _text in code_comments(code):
            lines[line - 1] = lines[line - 1][:column]
    except (SyntaxError, tokenize.TokenError):  # not Python: compare the lines as written
        pass
    return [line.strip() for line in lines]


Ops = list[tuple[str, int, int, int, int]]
_FLIP = {"insert": "delete", "delete": "insert"}


def _opcodes(a: str, b: str) -> Ops:
    return SequenceMatcher(None, _statements(a), _statements(b), autojunk=False).get_opcodes()


def _mirror(ops: Ops) -> Ops:
    """The same alignment read from the other side (b against a)."""
    return [(_FLIP.get(tag, tag), j1, j2, i1, i2) for tag, i1, i2, j1, j2 in ops]


def changed_lines(a: str, b: str) -> frozenset[int]:
    """1-based lines of ``a`` that ``b`` does not have as they are."""
    return _changed(_opcodes(a, b))


def _changed(ops: Ops) -> frozenset[int]:
    return frozenset(i + 1 for tag, i1, i2, _j1, _j2 in ops if tag != "equal" for i in range(i1, i2))


def line_map(a: str, b: str) -> dict[int, int]:
    """1-based line of ``a`` -> the line of ``b`` it corresponds to (lines compared stripped)."""
    return _mapping(_opcodes(a, b))


def _mapping(ops: Ops) -> dict[int, int]:
    mapping: dict[int, int] = {}
    for tag, i1, i2, j1, j2 in ops:
        if tag in ("equal", "replace"):
            # a replaced block pairs its lines in order: the changed line and its fix
            for offset in range(min(i2 - i1, j2 - j1)):
                mapping[i1 + offset + 1] = j1 + offset + 1
    return mapping


def _visits(lines: tuple[int, ...] | list[int]) -> list[tuple[int, int, int]]:
    """Per step: (line, which visit of that line it belongs to, its distance from the visit's end)."""
    out: list[tuple[int, int, int]] = []
    seen: dict[int, int] = {}
    start = 0
    for i in range(len(lines) + 1):
        if i == len(lines) or (i > start and lines[i] != lines[start]):
            if i > start:
                line = lines[start]
                visit = seen[line] = seen.get(line, -1) + 1
                out.extend((line, visit, i - 1 - s) for s in range(start, i))
            start = i
    return out


def step_map(a_lines: tuple[int, ...] | list[int], b_lines: tuple[int, ...] | list[int],
             lines: dict[int, int]) -> list[int]:
    """For each step of run a, the step of run b at the same point of the program (see the module
    docstring); [] when b has no steps."""
    if not b_lines:
        return []
    ends: dict[tuple[int, int], int] = {}  # (line, visit) of b -> its last step
    lengths: dict[tuple[int, int], int] = {}  # -> its number of steps
    for step, (line, visit, _from_end) in enumerate(_visits(b_lines)):
        ends[(line, visit)] = step
        lengths[(line, visit)] = lengths.get((line, visit), 0) + 1
    out: list[int] = []
    last = 0
    for line, visit, from_end in _visits(a_lines):
        key = (lines.get(line, -1), visit)
        if key in ends:
            last = ends[key] - min(from_end, lengths[key] - 1)
        out.append(last)
    return out


def compare_view(bug: Example, fix: Example, traces: tuple[DeltaTrace, DeltaTrace],
                 step: int | None = None, limits: RunLimits | None = None,
                 found: tuple[Report, Report] | None = None, try_link: TryLink | None = None,
                 is_fix: bool = False) -> CompareView:
    """Both sides of a pair; ``step`` (0-based, default: its last) is the bug's step shown first, the fix
    shows its match. ``found``: each side's ``Report``, asked for by the web layer (rendering runs no
    rule; without it the sides show no findings). ``try_link``: how the first side's findings link to
    their fix. ``is_fix``: the second side is a finding's fix of the first."""
    gallery = bool(bug.slug)
    bug, fix = shown(bug, fix), shown(fix, bug)
    # matched on the traces' own lines (what the views' lines are), so each side is built once
    lines = [step.line for step in traces[0].steps], [step.line for step in traces[1].steps]
    # one alignment of the two codes, read both ways: one diff (of a user's code, up to its size
    # limit, it is the costliest part of a small compare), not four
    ops = _opcodes(bug.code, fix.code)
    aligned = {"bug": ops, "fix": _mirror(ops)}
    to_fix = step_map(lines[0], lines[1], _mapping(aligned["bug"]))
    to_bug = step_map(lines[1], lines[0], _mapping(aligned["fix"]))
    bug_view = build_explorer(traces[0], bug.code, step, limits)
    # The fix opens on the match of the bug's opening step (its last by default), not on its own last:
    # both sides open at the same point of the program.
    fix_step = to_fix[bug_view.initial] if to_fix else None
    views = [bug_view, build_explorer(traces[1], fix.code, fix_step, limits)]
    reports = found or (Report([], []), Report([], []))
    peak = max((m.total_bytes for r in reports for m in r.memory), default=0)
    sides = []
    for role, example, view, found_here in zip(ROLES, (bug, fix), views, reports, strict=True):
        frame = frame_at(view)
        link = try_link if role == "bug" else None
        sides.append(Side(
            role=role, badge=_badge(role, gallery, is_fix), example=example, view=view, frame=frame,
            payload=client_payload(view),
            diagnostics=[diagnostic_view(d, example.code, link) for d in found_here.diagnostics],
            timeline=timeline_view(found_here.memory, frame.step, peak=peak, gpu=view.gpu),
            changed=_changed(aligned[role]), fourway=fourway_rows(found_here.made), ran=found_here.ran,
        ))
    change = change_line(reports[0].outcome, reports[1].outcome, gallery or is_fix)
    return CompareView(bug=sides[0], fix=sides[1], to_fix=tuple(to_fix), to_bug=tuple(to_bug), peak=peak,
                       change=change, is_fix=is_fix)


CHART_H = 60.0  # the memory chart's drawing height in the SVG (the timeline view's bars are 0..60)
HEAD_H = 24.0


def compare_svg(view: CompareView, which: str = "both", theme: str = "light") -> str:
    """Both sides' pictures (``app.render.svg``) side by side at their shown steps, each under its
    title and its memory-over-time chart, the two charts on one scale."""
    c = THEMES[theme]
    pictures = [render_svg(side.view, side.frame.step, which, theme) for side in view.sides]
    sizes = [_svg_size(picture) for picture in pictures]
    top = PAD + HEAD_H + 8 + CHART_H + 20
    width = PAD * 2 + sum(w for w, _ in sizes) + GAP
    height = top + max(h for _, h in sizes) + PAD
    cv = Canvas(c)
    x = PAD
    for side, picture, (w, _h) in zip(view.sides, pictures, sizes, strict=True):
        badge = side.badge
        colour = c["error"] if side.role == "bug" else c["nonleaf"]
        cv.rect(x, PAD, w, 4, colour, rx=2)
        cv.text(x, PAD + HEAD_H, f"{badge}: {side.example.title}", 14, c["head"], family=SANS, weight=700)
        _chart(cv, side.timeline, x, PAD + HEAD_H + 8, w, c)
        cv.raw(picture.replace("<svg ", f'<svg x="{x:.0f}" y="{top:.0f}" ', 1).rstrip("\n"))
        x += w + GAP
    peak = _("Both memory charts share one scale: 0 to {peak}.").format(peak=fmt_bytes(view.peak))
    cv.text(PAD, top - 6, peak, 11, c["muted"], family=SANS)
    title = clean(heading(view.bug.example, view.fix.example))
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0f}" height="{height:.0f}" '
        f'viewBox="0 0 {width:.0f} {height:.0f}" role="img" aria-label="{title}"><title>{title}</title>'
        f'<rect width="100%" height="100%" fill="{c["bg"]}" rx="12"/>' + "".join(cv.parts) + "</svg>\n"
    )


def _svg_size(picture: str) -> tuple[float, float]:
    head = picture[: picture.index(">")]
    return tuple(float(head.split(f' {name}="', 1)[1].split('"', 1)[0]) for name in ("width", "height"))  # type: ignore[return-value]


def _chart(cv: Canvas, timeline: TimelineView, x: float, y: float, w: float, c: dict[str, str]) -> None:
    """The bars of a timeline view (already on the shared scale), stretched to ``w``; the shown step's
    bar outlined."""
    cv.rect(x, y, w, CHART_H, c["panel"], c["line"], 4)
    if not timeline.bars:
        return
    k = w / timeline.width
    for bar in timeline.bars:
        bx, bw = x + bar.x * k + 1, max(timeline.bar_width * k - 2, 1)
        if bar.variable_h > 0:
            cv.rect(bx, y + bar.variable_y, bw, bar.variable_h, c["leaf_bg2"], c["leaf"], width=0.8)
        if bar.graph_h > 0:
            cv.rect(bx, y + bar.graph_y, bw, bar.graph_h, c["saved_bg2"], c["saved"], width=0.8)
    cv.rect(x + timeline.cursor_x * k, y, timeline.bar_width * k, CHART_H, "none", c["accent"], width=1.5)

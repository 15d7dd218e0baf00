"""Drawing never changes process-wide state: grandalf raises the recursion limit; the layout puts it back."""

from __future__ import annotations

import contextlib
import sys

from app.render.layout import Box, layout_components


def test_a_deep_layout_leaves_the_recursion_limit_alone() -> None:
    before = sys.getrecursionlimit()
    # A chain longer than the limit: grandalf raises the limit for its recursive passes (and may
    # still run out of it); either way the limit is the same afterwards.
    count = before + 100
    boxes = [Box(f"n{i}", 40.0, 20.0, 0, 0) for i in range(count)]
    edges = [(f"n{i}", f"n{i + 1}") for i in range(count - 1)]
    with contextlib.suppress(RecursionError):
        layout_components(boxes, edges)
    assert sys.getrecursionlimit() == before

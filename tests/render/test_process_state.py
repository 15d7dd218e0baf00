"""Drawing never changes process-wide state (issue 10, 8): a layout of a chain deeper than the
recursion limit leaves the limit and the garbage collector as they were."""

from __future__ import annotations

import gc
import sys

from app.render.layout import Box, lay_out


def test_a_deep_layout_leaves_the_recursion_limit_and_the_collector_alone() -> None:
    before = (sys.getrecursionlimit(), gc.isenabled())
    count = sys.getrecursionlimit() + 100
    boxes = [Box(f"n{i}", 40.0, 20.0, 0, 0) for i in range(count)]
    edges = [(f"n{i}", f"n{i + 1}") for i in range(count - 1)]
    layout = lay_out(boxes, edges)
    assert len(layout.centres) == count
    assert (sys.getrecursionlimit(), gc.isenabled()) == before

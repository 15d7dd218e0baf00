"""Graphs kept in a set (``kept.add(loss)``, ``kept = kept | {loss}``) are a container's, as in a
list: a set's members are named ``kept{i}`` (labelled in the order they entered it,
app.engine.labels), and a name ``kept{i}`` is a member of ``kept`` (``index.container_of``), not a
variable rebuilt from its own previous value at each iteration (which it was read as: 49 false
``graph-chained-across-iterations`` findings on a 50-iteration loop, and no container finding)."""

from __future__ import annotations

import pytest
from diagnostics_support import run

from app.diagnostics.index import container_of, head_of

KEPT = {
    "set": ("kept = set()", "kept.add(loss)", "    kept.add(loss.item())"),
    "set |=": ("kept = set()", "kept |= {loss}", "    kept |= {loss.item()}"),
    "frozenset rebuilt": ("kept = frozenset()", "kept = kept | {loss}", "    kept = kept | {loss.item()}"),
}


@pytest.mark.parametrize("keep", list(KEPT))
@pytest.mark.parametrize("op", ["sigmoid", "tanh"])
def test_a_set_that_keeps_graphs_is_a_container_that_keeps_them(keep: str, op: str) -> None:
    before, keeping, fixed = KEPT[keep]
    r = run(f"""
w = torch.randn(64, requires_grad=True)
{before}
for i in range(4):
    x = torch.randn(64)
    loss = (w * x).{op}().sum()
    {keeping}
""")
    assert r.rules == ["graph-kept-by-container"], r.rules
    d = r.only("graph-kept-by-container")
    assert d.line == 6
    assert "`kept`" in d.message and "kept{" not in d.message
    assert [p.text for p in d.patch] == [fixed]


def test_a_set_members_name_is_filed_under_its_set() -> None:
    assert container_of("kept{3}") == "kept"
    assert container_of("h['sets']{0}") == "h['sets']"
    assert container_of("kept{3}[0]") == "kept{3}"  # what a member tuple holds
    assert container_of("kept") is None
    assert head_of("f:kept{3}") == ("f", "kept")
    assert head_of("kept{3}.weight") == (None, "kept")

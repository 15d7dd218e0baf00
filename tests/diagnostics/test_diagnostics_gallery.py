"""The gallery declares its lesson: each example produces exactly the diagnostics it lists (so
correct examples produce none), at the right lines, and every buggy example has a fixed twin that
produces none. Examples really run through the engine."""

from __future__ import annotations

import pytest
from diagnostics_support import run

from app.diagnostics import RULE_IDS
from app.gallery import EXAMPLES, get_example

# Where each declared diagnostic must point (rule → line).
EXPECTED_LINES = {
    "losses-keep-graphs": {"graph-kept-by-container": 5},
    "inplace-through-detach": {"saved-tensor-modified": 4},
    "inplace-on-leaf": {"inplace-on-leaf": 2},
    "custom-loss-detach": {"backward-without-graph": 10},
    "detach-stops-training": {"grad-stays-none": 5},
    "backward-twice": {"backward-twice": 4},
}


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda e: e.slug)
def test_example_produces_exactly_its_declared_diagnostics(example) -> None:  # noqa: ANN001
    r = run(example.code)
    assert set(example.diagnostics) <= RULE_IDS
    assert sorted(r.rules) == sorted(example.diagnostics), [d.message for d in r.diagnostics]
    lines = {d.rule: d.line for d in r.diagnostics}
    assert lines == EXPECTED_LINES.get(example.slug, {})
    for d in r.diagnostics:  # each points at a step that ran that line, and names live tensors
        assert d.step is not None and 0 <= d.step < len(r.result.steps)
        assert all(t in r.result.steps[d.step].tensors for t in d.tensors)


@pytest.mark.parametrize("example", [e for e in EXAMPLES if e.fixed_twin], ids=lambda e: e.slug)
def test_fixed_twin_produces_none(example) -> None:  # noqa: ANN001
    twin = get_example(example.fixed_twin)
    assert twin is not None and twin.diagnostics == ()
    r = run(twin.code)
    assert r.result.ok and r.diagnostics == []


def test_every_example_with_a_warning_or_error_has_a_twin() -> None:
    for example in EXAMPLES:
        severities = {d.severity for d in run(example.code).diagnostics}
        if severities & {"warning", "error"}:
            assert example.fixed_twin, example.slug

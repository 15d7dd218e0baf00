"""The rules say today what they said when ``golden_diagnostics.jsonl.gz`` was recorded, on every
golden trace (every engine, render and diagnostics test snippet and the gallery): same findings, in
the same order, in the same words. No engine run: the traces are the recorded ones."""

from __future__ import annotations

import pytest
from diagnostics_golden import key, load

from app.diagnostics import Analysis, account, analysis, diagnose
from app.schema import DeltaTrace
from app.trace.delta import compress
from tests.golden import load as load_traces

GOLDEN = list(load_traces())
EXPECTED = load()


def test_every_golden_trace_has_recorded_diagnostics() -> None:
    assert {key(g.source, g.max_steps, g.max_stdout) for g in GOLDEN} == set(EXPECTED)
    # the golden snippets give dozens of findings (the detector corpus, tests/diagnostics/corpus, the rest)
    assert sum(map(len, EXPECTED.values())) >= 35


@pytest.mark.parametrize("golden", GOLDEN, ids=[g.name for g in GOLDEN])
def test_diagnostics_equal_the_recorded_ones(golden) -> None:  # noqa: ANN001
    trace = DeltaTrace.model_validate(compress(golden.result))
    found = [d.model_dump() for d in diagnose(trace, golden.source)]
    assert found == EXPECTED[key(golden.source, golden.max_steps, golden.max_stdout)]


@pytest.mark.parametrize("golden", GOLDEN, ids=[g.name for g in GOLDEN])
def test_one_pass_analysis_equals_diagnose_and_account(golden) -> None:  # noqa: ANN001
    """``analysis`` shares one replay between the rules and the accounting: same answers as apart."""
    trace = DeltaTrace.model_validate(compress(golden.result))
    diagnostics, memory = analysis(trace, golden.source)
    assert diagnostics == diagnose(trace, golden.source)
    assert memory == account(trace)


@pytest.mark.parametrize("golden", GOLDEN, ids=[g.name for g in GOLDEN])
def test_the_page_feeds_the_same_analysis_from_its_own_replay(golden) -> None:  # noqa: ANN001
    """The page hands ``Analysis`` to ``build_explorer``'s replay (one replay for views and rules):
    the findings are the recorded ones and the accounting is ``account``'s."""
    from app.render import build_explorer

    trace = DeltaTrace.model_validate(compress(golden.result))
    fed = Analysis(trace, golden.source)
    build_explorer(trace, golden.source, also=[fed])
    diagnostics, memory = fed.result()
    assert [d.model_dump() for d in diagnostics] == EXPECTED[key(golden.source, golden.max_steps,
                                                                 golden.max_stdout)]
    assert memory == account(trace)


@pytest.mark.parametrize("golden", GOLDEN[::4], ids=[g.name for g in GOLDEN[::4]])
def test_feeding_the_analysis_leaves_the_views_as_they_are(golden) -> None:  # noqa: ANN001
    from app.render import build_explorer, client_payload

    trace = DeltaTrace.model_validate(compress(golden.result))
    view = build_explorer(trace, golden.source, also=[Analysis(trace, golden.source)])
    assert client_payload(view) == client_payload(build_explorer(trace, golden.source))

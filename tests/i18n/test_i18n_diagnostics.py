"""Every diagnostic reads in Chinese: on every golden trace (the test snippets and the gallery, which
between them fire every rule many times), the Chinese run finds the same findings as the English
one, at the same steps and lines, and their titles, explanations and fixes hold no English sentence
(code, names and torch's own quoted words stay as they are). The English is pinned byte for byte by
tests/diagnostics/test_diagnostics_golden.py."""

from __future__ import annotations

from functools import cache

import pytest

from app import i18n
from app.diagnostics import analysis
from app.render.findings import diagnostic_view, timeline_view
from app.schema import DeltaTrace
from app.trace.delta import compress
from tests.diagnostics.corpus.cases import CASES
from tests.golden import load
from tests.i18n.english import english_phrases

GOLDEN = list(load())
# The detector's corpus too (tests/diagnostics/corpus): every pitfall story, run through the engine.
PITFALLS = [case for case in CASES if case.expect]


@cache
def _traced(code: str) -> DeltaTrace:
    from app.engine import trace_delta

    return DeltaTrace.model_validate(trace_delta(code))


def _both_of(trace: DeltaTrace, source: str) -> tuple[list, list]:
    english = analysis(trace, source)[0]
    with i18n.use_locale("zh_CN"):
        chinese = analysis(trace, source)[0]
    return english, chinese


def _both(golden) -> tuple[list, list]:  # noqa: ANN001
    return _both_of(DeltaTrace.model_validate(compress(golden.result)), golden.source)


def test_the_corpus_fires_every_rule() -> None:
    from app.diagnostics import RULE_IDS

    fired = {d.rule for g in GOLDEN for d in _both(g)[1]}
    fired |= {d.rule for case in PITFALLS for d in _both_of(_traced(case.code), case.code)[1]}
    assert fired == set(RULE_IDS)


@pytest.mark.parametrize("case", PITFALLS, ids=[c.name for c in PITFALLS])
def test_every_finding_of_the_detector_corpus_reads_in_chinese(case) -> None:  # noqa: ANN001
    _check(*_both_of(_traced(case.code), case.code))


@pytest.mark.parametrize("golden", GOLDEN, ids=[g.name for g in GOLDEN])
def test_every_diagnostic_reads_in_chinese(golden) -> None:  # noqa: ANN001
    _check(*_both(golden))


def _check(english: list, chinese: list) -> None:
    same = ("rule", "severity", "step", "line", "tensors", "lines", "bytes")
    where = [d.model_dump(include=set(same)) for d in english]
    assert [d.model_dump(include=set(same)) for d in chinese] == where
    for finding in chinese:
        for text in (finding.title, finding.message, finding.fix):
            assert english_phrases(text) == [], (finding.rule, text)
            assert text.count("`") % 2 == 0, (finding.rule, text)  # code segments still pair up
    with i18n.use_locale("zh_CN"):
        for finding in chinese:
            assert diagnostic_view(finding).severity_label in ("错误", "警告", "提示")


def test_numbers_and_sizes_follow_the_locale() -> None:
    from app.units import fmt_bytes

    assert fmt_bytes(1234) == "1,234 bytes" and fmt_bytes(123456) == "120.6 KiB"
    with i18n.use_locale("zh_CN"):
        assert fmt_bytes(1234) == "1,234 字节" and fmt_bytes(5 * 1024 * 1024 * 3) == "15.0 MiB"
        view = timeline_view([])
        assert view.peak == "0 字节"

"""No internal id (``t10``, ``n3``, ``s2``) in any text meant for a person: a tensor no variable names
is described by what Holding says keeps it (``y._base``, the tensor a node saved, an unnamed leaf)."""

from __future__ import annotations

import re

import pytest
from diagnostics_support import run

from app.diagnostics import diagnose
from app.diagnostics.trace import held_by
from app.schema import DeltaTrace, Diagnostic
from app.trace.delta import compress
from tests.golden import load

ID = re.compile(r"\b[tsn]\d+\b")

# Snippets whose findings are about tensors no variable names.
UNNAMED = {
    "saved output behind a view": """
        x = torch.randn(3, requires_grad=True)
        y = x.exp()[0:2]
        y.mul_(2)
    """,
    "saved input written through a detach alias": """
        x = torch.randn(3, requires_grad=True)
        a = x * 2
        d = a.detach()
        y = a.sin()
        del a
        d.zero_()
    """,
    "a detach hidden in a function, behind an unnamed leaf": """
        def my_loss(pred):
            return (pred.detach() ** 2).mean()
        p = torch.ones(3, requires_grad=True) * 2
        loss = my_loss(p)
        loss.backward()
    """,
}


def ids_in(d: Diagnostic, code: str) -> list[str]:
    """Ids a person would read: outside `code` quotes any match; inside, one the snippet does not
    itself spell (a variable may well be called ``t1``)."""
    words = set(re.findall(r"\w+", code))
    found = []
    for text in (d.title, d.message, d.fix):
        for index, part in enumerate(text.split("`")):
            found += [m for m in ID.findall(part) if index % 2 == 0 or m not in words]
    return found


def test_roles_read_as_words() -> None:
    assert held_by("SinBackward0.self") == "the tensor `SinBackward0` saved as `self`"
    assert held_by("AccumulateGrad") == "an unnamed leaf"
    assert held_by("MulBackward0.other._base") == "the base of the tensor `MulBackward0` saved as `other`"
    assert held_by(None) == "an unnamed tensor"


def test_a_saved_output_behind_a_view_is_named_through_the_view() -> None:
    r = run(UNNAMED["saved output behind a view"])
    d = r.only("saved-tensor-modified")
    assert d.title == "backward() will fail: `y._base` was modified after `ExpBackward0` saved it"


def test_a_saved_tensor_without_a_name_is_described_by_its_node() -> None:
    r = run(UNNAMED["saved input written through a detach alias"])
    assert r.rules == ["saved-tensor-modified"]  # the alias write is explained in it: one cause
    saved = r.only("saved-tensor-modified")
    assert "the tensor `SinBackward0` saved as `self`" in saved.title
    assert "`SinBackward0`, created at line 4, saved it (as `self`)" in saved.message
    assert "`d` is a detach() alias of the tensor `SinBackward0` saved as `self`" in saved.message


def test_an_unnamed_leaf_is_called_one() -> None:
    r = run(UNNAMED["a detach hidden in a function, behind an unnamed leaf"])
    d = r.only("backward-without-graph")
    assert "It was computed from an unnamed leaf, which requires grad" in d.message


@pytest.mark.parametrize("code", list(UNNAMED.values()), ids=list(UNNAMED))
def test_no_id_in_findings_about_unnamed_tensors(code: str) -> None:
    r = run(code)
    assert r.diagnostics
    for d in r.diagnostics:
        assert ids_in(d, r.code) == [], d


def test_no_id_in_any_finding_of_the_gallery_and_the_test_snippets() -> None:
    """Every golden trace: the gallery and every engine, render and diagnostics test snippet (the
    detector corpus's findings are checked by ``test_no_id_in_the_corpus_findings``)."""
    count = 0
    for golden in load():
        trace = DeltaTrace.model_validate(compress(golden.result))
        for d in diagnose(trace, golden.source):
            assert ids_in(d, golden.source) == [], d
            count += 1
    assert count >= 35


def test_the_id_check_sees_an_id() -> None:
    d = Diagnostic(rule="r", severity="info", title="a tensor only the graph holds (t10)", message="`t1` ok",
                   fix="see n3")
    assert ids_in(d, "t1 = torch.ones(1)") == ["t10", "n3"]


def test_no_id_in_the_corpus_findings() -> None:
    from tests.diagnostics.corpus.cases import CASES

    count = 0
    for case in CASES:
        if case.expect:
            r = run(case.code)
            for d in r.diagnostics:
                assert ids_in(d, r.code) == [], d
                count += 1
    assert count >= 50

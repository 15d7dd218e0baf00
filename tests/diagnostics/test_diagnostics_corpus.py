"""The labelled corpus (``tests/diagnostics/corpus``): every pitfall of the clone/detach article and its
readers, each with its fix and its innocent look-alikes, in many spellings.

Per case: the label holds in plain torch (no explorer: ``corpus/oracle.py``); the detector says exactly
what the label says — rule, severity, line, and a fix that names the right remedy — and nothing on a
fixed twin or a look-alike; every fix it can write as code, applied to the snippet, gives a program
the detector finds nothing wrong with and that plain torch confirms fixed (no growth, the gradient
arrives, no shared memory); and every byte count a leak's message quotes is the memory chart's at the
step it names. ``python -m app.bench detector`` reports the same judgement as precision and recall.
"""

from __future__ import annotations

import dataclasses
import re
from functools import cache

import pytest
from diagnostics_support import Run, run

from app.diagnosis import apply
from app.units import fmt_bytes
from tests.diagnostics.corpus.cases import CASES, Case, Cleared, Grows, Shares, Untrained
from tests.diagnostics.corpus.oracle import check, run_plain
from tests.diagnostics.corpus.score import judge

PITFALLS = [case for case in CASES if case.expect]


@cache
def detected(code: str) -> Run:
    return run(code)


def ids(cases: list[Case]) -> list[str]:
    return [case.name for case in cases]


@pytest.mark.parametrize("case", CASES, ids=ids(CASES))
def test_the_label_holds_in_plain_torch(case: Case) -> None:
    assert check(case) is None, check(case)


@pytest.mark.parametrize("case", CASES, ids=ids(CASES))
def test_the_detector_says_what_the_label_says(case: Case) -> None:
    r = detected(case.code)
    verdict = judge(case, r.diagnostics)
    assert verdict.right, verdict.why()
    for _label, found in verdict.matched:  # it points at a step that ran its line, at live tensors
        assert found.step is not None and 0 <= found.step < len(r.result.steps)
        assert all(t in r.result.steps[found.step].tensors for t in found.tensors)


def fixed_oracle(case: Case) -> Grows | Untrained | Shares | Cleared | None:
    """What plain torch must see once the pitfall is fixed."""
    oracle = case.oracle
    if isinstance(oracle, Grows):
        return dataclasses.replace(oracle, grows=False)
    if isinstance(oracle, Untrained):
        return dataclasses.replace(oracle, trained=True)
    if isinstance(oracle, Shares):
        return dataclasses.replace(oracle, shares=False)
    if isinstance(oracle, Cleared):
        return dataclasses.replace(oracle, cleared=False)
    return None  # Raises: the fixed run must simply not fail


@pytest.mark.parametrize("case", PITFALLS, ids=ids(PITFALLS))
def test_each_fix_as_code_fixes_it(case: Case) -> None:
    r = detected(case.code)
    patched = [d for d in r.diagnostics if d.patch]
    if case.kind in ("leak", "cut", "cleared"):
        assert patched or case.name in NO_CODE_FIX, "a leak, a cut or a clear gets a fix the page can try"
    for d in patched:
        fixed = apply(case.code, d.patch)
        assert fixed != case.code
        after = detected(fixed)
        assert after.result.ok, (d.rule, after.result.error)
        assert [x.rule for x in after.diagnostics if x.severity != "info"] == [], fixed
        oracle = fixed_oracle(case)
        if oracle is not None:
            assert check(dataclasses.replace(case, code=fixed, oracle=oracle)) is None, fixed
        else:  # it raised: fixed, plain torch runs it to the end
            assert run_plain(dataclasses.replace(case, code=fixed))[2] is None, fixed


# A numpy round trip has no mechanical fix: the numpy step has to be written in torch.
NO_CODE_FIX = {"numpy-round-trip", "cpu-numpy-tensor", "tolist-round-trip", "tolist-as-tensor",
               "detach-numpy-from-numpy"}

FIGURE = re.compile(r"(\S+ (?:bytes|KiB|MiB|GiB)) at step (\d+)")


LEAKS = [c for c in CASES if c.kind == "leak"]


@pytest.mark.parametrize("case", LEAKS, ids=ids(LEAKS))
def test_a_leak_quotes_the_chart(case: Case) -> None:
    """Each byte count is the memory chart's total at the step it names (steps counted from 1), and
    the growth per iteration is the difference of the two, per iteration between them."""
    r = detected(case.code)
    for d in r.diagnostics:
        figures = FIGURE.findall(d.message)
        assert figures, d.message
        for size, step in figures:
            assert size == fmt_bytes(r.memory[int(step) - 1].total_bytes), (size, step)
        assert int(figures[-1][1]) == d.step + 1  # the finding opens on the step it quotes last


def test_the_corpus_covers_every_story_of_the_issue() -> None:
    stories = {case.name for case in CASES}
    kinds = {case.kind for case in CASES}
    assert kinds == {"leak", "cut", "alias", "twin", "lookalike", "error", "accumulate", "stale",
                     "cleared"}
    assert len(LEAKS) >= 20 and len([c for c in CASES if c.kind == "cut"]) >= 15
    for needed in ("total-loss-augassign", "meter-object", "validation-outputs-appended",
                   "forward-hook-lambda", "clone-carried-across-loop", "lstm-tuple-state",
                   "ema-weights-without-no-grad",
                   "requires-grad-false-on-trained-head", "torch-tensor-rewrap", "numpy-round-trip",
                   "item-round-trip", "teacher-out-of-optimizer", "frozen-backbone", "target-clone-detach",
                   "fresh-batch-cloned", "detach-alias-zeroed"):
        assert needed in stories

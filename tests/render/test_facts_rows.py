"""The facts builder keeps the rows a tensor's fact alone decides and reads the rest again: each
entry it records is ``tensor_facts`` of the tensor at that step, on every golden trace."""

from __future__ import annotations

import pytest

from app.render import build_explorer, details
from app.schema import DeltaTrace
from app.trace.delta import compress
from tests.golden import load

GOLDEN = list(load())


@pytest.mark.parametrize("golden", GOLDEN[::4], ids=[g.name for g in GOLDEN[::4]])
def test_every_entry_is_the_tensors_rows_made_whole(golden, monkeypatch) -> None:  # noqa: ANN001
    checked = []
    rows = details.FactsBuilder._rows

    def both(self, tid, fact, step):  # noqa: ANN001, ANN202
        entry = rows(self, tid, fact, step)
        whole = details.tensor_facts(step.state, step.holding, tid, self.born.get(tid), None,
                                     self._held(tid, step.holding), self.born_version.get(tid),
                                     self.gpu.block_size(fact.storage) if fact.storage else None)
        pairs = list(self.pairs)
        assert [pairs[i] for i in entry] == whole
        checked.append(tid)
        return entry

    monkeypatch.setattr(details.FactsBuilder, "_rows", both)
    build_explorer(DeltaTrace.model_validate(compress(golden.result)), golden.source)
    assert checked or not any(s["tensors"] for s in golden.result["steps"])


def test_a_values_row_is_reused_only_for_values_written_alike() -> None:
    """A tensor's new fact with the values of its last one reuses their row's text; zeros are told
    apart by their sign (``0.0 == -0.0``, but they are written "0.0" and "-0.0")."""
    from tests.render.conftest import trace

    code = "x = torch.zeros(2)\nx.neg_()\nx.add_(0.0)\nx.requires_grad_()"
    view = build_explorer(trace(code), code)
    facts = view.facts
    (runs,) = facts.details.values()
    rows = [dict(facts.pairs[i] for i in facts.entries[entry]) for _, _, entry in runs]
    assert [(row["values"], row["requires_grad"]) for row in rows] == [
        ("[0.0, 0.0]", "False"), ("[-0.0, -0.0]", "False"), ("[0.0, 0.0]", "False"), ("[0.0, 0.0]", "True")]


def test_a_new_fact_in_the_same_place_with_another_dtype_reads_it() -> None:
    """``x.data = …`` gives the tensor another dtype in the same shape and strides: its layout rows are
    not the last fact's."""
    from tests.render.conftest import trace

    code = "x = torch.ones(2)\nx.data = x.data.double()\nx.requires_grad_()"
    facts = build_explorer(trace(code), code).facts
    (runs,) = facts.details.values()
    rows = [dict(facts.pairs[i] for i in facts.entries[entry]) for _, _, entry in runs]
    assert [(row["dtype"], row["requires_grad"]) for row in rows] == [
        ("float32", "False"), ("float64", "False"), ("float64", "True")]

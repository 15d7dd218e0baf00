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
                                     self._held(tid, step.holding), self.born_version.get(tid))
        pairs = list(self.pairs)
        assert [pairs[i] for i in entry] == whole
        checked.append(tid)
        return entry

    monkeypatch.setattr(details.FactsBuilder, "_rows", both)
    build_explorer(DeltaTrace.model_validate(compress(golden.result)), golden.source)
    assert checked or not any(s["tensors"] for s in golden.result["steps"])

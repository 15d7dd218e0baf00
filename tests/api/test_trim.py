"""After a large answer the server hands memory back (``app.web.gates._trim``: a collection and
``malloc_trim``), inside the request's admission slot: by then the traces are gone, so the collection
does not walk them and their memory is handed back too."""

from __future__ import annotations

import weakref
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from app.config import Settings
from app.schema import DeltaStep, DeltaTrace, StorageFact, TensorFact
from app.web import gates
from app.web.main import create_app

FACT = TensorFact(shape=[1], dtype="float32", stride=[1], storage_offset=0, storage="s1", requires_grad=False,
                  is_leaf=True, grad_fn=None, grad=None, base=None, version=0, values=[1.0])


class LargeRunner:
    """A trace past ``TRIM_AFTER_FACTS`` (one named tensor, kept over many steps), made per run and
    not kept here: only the server holds it."""

    def __init__(self) -> None:
        self.made: list[weakref.ref[DeltaTrace]] = []

    async def run(self, code: str) -> DeltaTrace:
        first = DeltaStep(line=1, variables={"x": "t1"}, tensors={"t1": FACT},
                          storages={"s1": StorageFact(nbytes=4, element_size=4, dtype="float32")})
        steps = [first] + [DeltaStep(line=1)] * gates.TRIM_AFTER_FACTS
        trace = DeltaTrace(ok=True, steps=steps)
        self.made.append(weakref.ref(trace))
        return trace


def test_the_traces_are_gone_before_the_memory_is_handed_back(tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    runner = LargeRunner()
    seen: list[bool] = []
    monkeypatch.setattr(gates, "_trim", lambda: seen.append(all(ref() is None for ref in runner.made)))
    with TestClient(create_app(Settings(data_dir=tmp_path), runner=runner)) as client:
        answer = client.post("/api/run", json={"code": "x = torch.ones(1)\n", "format": "delta"})
    assert answer.status_code == 200 and len(answer.json()["steps"]) == gates.TRIM_AFTER_FACTS + 1
    assert runner.made and seen == [True]

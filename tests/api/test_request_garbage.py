"""What a request read and made is freed by reference counting when it ends, not left in reference
cycles for the cyclic collector, which a busy server runs rarely (``python -m app.bench soak``: ~115
MiB of traces and views of the last partial answers, held after the flood). The cycles were the
error a work that ran out of budget ended with (the futures that carried it hold it, the frames
that awaited them hold the futures, and the work's frames hold the trace: ``work.forget_frames``),
the streamed work's task, and the jobs left for after the answer (``app.web.after``). The collector
is off for the whole test: a trace still alive after the request is one only it would free."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from app.budget import BudgetExceeded
from app.config import Settings
from app.schema import DeltaStep, DeltaTrace, StorageFact, TensorFact
from app.web import api
from app.web.main import create_app
from tests.api.test_trim import _jobs_done

FACT = TensorFact(shape=[1], dtype="float32", stride=[1], storage_offset=0, storage="s1", requires_grad=False,
                  is_leaf=True, grad_fn=None, grad=None, base=None, version=0, values=[1.0])


class Runner:
    """A small trace made per run and kept only by the server (``made``: weak references)."""

    def __init__(self, streams: bool, deterministic: bool) -> None:
        self.streams, self.deterministic = streams, deterministic
        self.made: list[weakref.ref[DeltaTrace]] = []

    async def run(self, code: str, on_steps: Callable[[list[DeltaStep]], None] | None = None,
                  **options: object) -> DeltaTrace:
        steps = [DeltaStep(line=1, variables={"x": "t1"}, tensors={"t1": FACT},
                           storages={"s1": StorageFact(nbytes=4, element_size=4, dtype="float32")}),
                 DeltaStep(line=2)]
        trace = DeltaTrace(ok=True, steps=steps)
        self.made.append(weakref.ref(trace))
        return trace


@pytest.fixture
def collector_off() -> Iterator[None]:
    was = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def _out_of_budget(*args: object, **kwargs: object) -> object:
    raise BudgetExceeded(0.5)


@pytest.mark.parametrize("streams", [False, True], ids=["whole", "streamed"])
@pytest.mark.parametrize("deterministic", [False, True], ids=["uncached", "cached"])
@pytest.mark.parametrize("outcome", ["answered", "out of budget"])
def test_a_requests_trace_is_freed_without_the_collector(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                        collector_off: None, streams: bool,
                                                        deterministic: bool, outcome: str) -> None:
    if outcome == "out of budget":  # the work runs out of its budget: a partial answer
        monkeypatch.setattr(api, "_answer", _out_of_budget)
    runner = Runner(streams, deterministic)
    with TestClient(create_app(Settings(data_dir=tmp_path), runner=runner)) as client:
        for number in range(3):
            code = f"x = torch.ones({number + 1})\n"
            answer = client.post("/api/run", json={"code": code, "format": "delta"})
            assert answer.status_code == 200
            _jobs_done()
            rules = [diagnostic["rule"] for diagnostic in answer.json()["diagnostics"]]
            assert ("server-budget" in rules) is (outcome == "out of budget")
        assert len(runner.made) == 3
        alive = [ref for ref in runner.made if ref() is not None]
        assert not alive, f"{len(alive)} of 3 traces held in reference cycles"

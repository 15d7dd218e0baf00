"""After a large answer the server hands memory back (``app.web.gates._trim``: a collection and
``malloc_trim``) once the answer is sent (``app.web.after``): by then the traces are gone, so their
memory is handed back too, and the collector stays paused until then, so no collection of the
request's garbage runs on the client's wait."""

from __future__ import annotations

import asyncio
import gc
import weakref
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from app.config import Settings
from app.schema import DeltaStep, DeltaTrace, StorageFact, TensorFact
from app.web import gates
from app.web.after import AfterResponse, after_response
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


def test_the_collector_stays_paused_until_the_answer_is_sent(tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    runner = LargeRunner()
    paused_at_trim: list[bool] = []
    monkeypatch.setattr(gates, "_trim", lambda: paused_at_trim.append(not gc.isenabled()))
    assert gc.isenabled()
    with TestClient(create_app(Settings(data_dir=tmp_path), runner=runner)) as client:
        answer = client.post("/api/run", json={"code": "x = torch.ones(1)\n", "format": "delta"})
        assert answer.status_code == 200
    assert paused_at_trim == [True] and gc.isenabled()


def test_a_job_runs_once_after_the_last_body_message() -> None:
    events: list[str] = []

    async def app(scope, receive, send) -> None:  # noqa: ANN001
        after_response(scope, lambda: events.append("job"))
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"x", "more_body": True})
        events.append("more")
        await send({"type": "http.response.body", "body": b"y"})

    async def send(message) -> None:  # noqa: ANN001
        events.append(message["type"])

    async def receive() -> dict:
        return {"type": "http.disconnect"}

    scope: dict = {"type": "http"}
    asyncio.run(AfterResponse(app)(scope, receive, send))
    assert events == ["http.response.start", "http.response.body", "more", "http.response.body", "job"]
    after_response(scope, lambda: events.append("outside"))  # no middleware around: at once
    assert events[-1] == "outside"


def test_the_jobs_run_when_the_app_fails_too() -> None:
    ran: list[int] = []

    async def app(scope, receive, send) -> None:  # noqa: ANN001
        after_response(scope, lambda: ran.append(1))
        after_response(scope, lambda: ran.append(2))
        raise RuntimeError("a bug")

    with pytest.raises(RuntimeError):
        asyncio.run(AfterResponse(app)({"type": "http"}, None, None))
    assert ran == [1, 2]

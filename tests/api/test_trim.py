"""After a large answer the server hands memory back (``app.web.gates._trim``: a collection and
``malloc_trim``) once the answer is made, beside its sending (``app.web.after``): by then the traces
are gone, so their memory is handed back too, and the collector stays paused until then, so no
collection of the request's garbage runs on the client's wait."""

from __future__ import annotations

import asyncio
import gc
import threading
import time
import weakref
from collections.abc import Callable
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from app.config import Settings
from app.heap import collect_due
from app.schema import DeltaStep, DeltaTrace, StorageFact, TensorFact
from app.web import after, gates
from app.web.after import AfterAnswer, after_answer
from app.web.main import create_app
from tests.loop_support import run_in_own_loop

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
        _jobs_done()
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
        _jobs_done()
        assert client.app.state.admission.running == 0  # the slot came back after the sweep
    assert paused_at_trim == [True] and gc.isenabled()


def _jobs_done(timeout: float = 60.0) -> None:
    """Wait for the jobs started beside the sending (``app.web.after``) to end."""
    deadline = time.monotonic() + timeout
    while after._running and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not after._running


def test_the_jobs_start_with_the_last_body_message_and_do_not_wait_for_the_client() -> None:
    events: list[str] = []
    done = threading.Event()

    def job(name: str) -> Callable[[], None]:
        def run() -> None:
            events.append(name)
            if name == "second":
                done.set()
        return run

    async def app(scope, receive, send) -> None:  # noqa: ANN001
        after_answer(scope, job("first"))
        after_answer(scope, job("second"))
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"x", "more_body": True})
        await asyncio.sleep(0.05)
        events.append("last body")
        await send({"type": "http.response.body", "body": b"y"})

    async def send(message) -> None:  # noqa: ANN001
        if message["type"] == "http.response.body" and not message.get("more_body"):
            # a client that reads slowly: its last bytes are not taken until the jobs are done
            assert await asyncio.get_running_loop().run_in_executor(None, done.wait, 60)
            events.append("sent")

    async def receive() -> dict:
        return {"type": "http.disconnect"}

    scope: dict = {"type": "http"}
    run_in_own_loop(AfterAnswer(app)(scope, receive, send))
    assert events == ["last body", "first", "second", "sent"]
    after_answer(scope, lambda: events.append("outside"))  # no middleware around it: at once
    assert events[-1] == "outside"


def test_the_jobs_run_in_order_when_the_app_fails_and_a_job_fails() -> None:
    ran: list[int] = []

    def fails() -> None:
        raise RuntimeError("a job's bug")

    async def app(scope, receive, send) -> None:  # noqa: ANN001
        after_answer(scope, lambda: ran.append(1))
        after_answer(scope, fails)
        after_answer(scope, lambda: ran.append(2))
        raise RuntimeError("a bug")

    async def run() -> None:
        with pytest.raises(RuntimeError, match="a bug"):
            await AfterAnswer(app)({"type": "http"}, None, None)
        await asyncio.gather(*after._running)

    run_in_own_loop(run())
    assert ran == [1, 2]


def test_an_older_generation_is_collected_when_its_turn_comes() -> None:
    """The pause can outlast many requests: the sweep runs the collections the collector would have."""
    was = gc.isenabled()
    gc.disable()
    try:
        gc.collect()  # every generation's count starts at 0
        turns = gc.get_threshold()[1]
        assert [collect_due() for _ in range(turns + 1)] == [0] * turns + [1]
    finally:
        if was:
            gc.enable()

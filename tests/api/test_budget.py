"""The per-request server budget: ``app.budget`` (pure) and ``app.web.work.budgeted`` in a real uvicorn,
where a client that leaves ends the work, and work that never checks its budget is stopped anyway."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Iterator
from types import SimpleNamespace

import pytest
import uvicorn
from fastapi import FastAPI, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import PlainTextResponse

from app.budget import UNLIMITED, Budget, BudgetExceeded, current_budget, use_budget
from app.serving import loopback_socket
from app.web import work
from app.web.limits import BodyTooLarge, BodyTooSlow
from app.web.work import budgeted, work_budget
from tests.loop_support import run_in_own_loop


def test_a_budget_expires_and_says_why() -> None:
    # (one budget long enough that no pause of a busy machine spends it between two lines)
    running = Budget(60)
    running.check()
    assert not running.expired and 0 < running.left() <= 60
    budget = Budget(0.05)
    assert budget.deadline - time.monotonic() <= 0.05
    while time.monotonic() < budget.deadline:  # past its deadline, however late the sleep wakes
        time.sleep(0.01)
    assert budget.expired and budget.left() == 0
    with pytest.raises(BudgetExceeded, match="0.05 s budget"):
        budget.check()


def test_a_cancelled_budget_ends_at_once() -> None:
    gone = threading.Event()
    budget = Budget(60, gone.is_set)
    budget.check()
    gone.set()
    assert budget.expired and budget.left() == 0
    with pytest.raises(BudgetExceeded, match="client closed"):
        budget.check()


def test_the_current_budget_follows_the_block_and_its_threads() -> None:
    assert current_budget() is UNLIMITED and not UNLIMITED.expired
    outer, inner = Budget(10), Budget(5)
    with use_budget(outer):
        assert current_budget() is outer
        with use_budget(inner):
            assert current_budget() is inner
        assert current_budget() is outer

        async def in_thread() -> Budget:
            return await run_in_threadpool(current_budget)

        # run_in_threadpool copies the context into its worker thread
        assert run_in_own_loop(in_thread()) is outer
    assert current_budget() is UNLIMITED


# -- budgeted() in a real server ---------------------------------------------------------------------

STOPPED: dict[str, float] = {}
STARTED: set[str] = set()


def _spin(name: str, checks: bool) -> str:
    STARTED.add(name)
    try:
        while True:
            if checks:
                current_budget().check()
            sum(range(1000))
    finally:
        STOPPED[name] = time.monotonic()


def _app(seconds: float) -> FastAPI:
    app = FastAPI()
    app.state.settings = SimpleNamespace(server_seconds=seconds)

    @app.get("/shortened/{name}")
    async def shortened(name: str, request: Request, checks: int = 1) -> PlainTextResponse:
        """The streamed routes' case: work begun under a long budget, shortened while it runs."""
        budget = work_budget(request)
        work = asyncio.ensure_future(budgeted(request, _spin, name, bool(checks), budget=budget))
        await asyncio.sleep(0.2)
        budget.shorten(SHORT)
        try:
            return PlainTextResponse(await work)
        except BudgetExceeded as error:
            return PlainTextResponse(f"partial: {error}")

    @app.get("/spin/{name}")
    async def spin(name: str, request: Request, checks: int = 1) -> PlainTextResponse:
        try:
            return PlainTextResponse(await budgeted(request, _spin, name, bool(checks)))
        except BudgetExceeded as error:
            return PlainTextResponse(f"partial: {error}")

    return app


def _serve(seconds: float) -> Iterator[int]:
    listener = loopback_socket()  # held from the start: no other process can take the port meanwhile
    server = uvicorn.Server(uvicorn.Config(_app(seconds), log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [listener]}, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.05)
    yield listener.getsockname()[1]
    server.should_exit = True
    thread.join(10)
    listener.close()


SHORT = 0.5


@pytest.fixture(scope="module")
def short_budget() -> Iterator[int]:
    yield from _serve(SHORT)


@pytest.fixture(scope="module")
def long_budget() -> Iterator[int]:
    yield from _serve(60.0)


def _get(port: int, path: str) -> str:
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
        data = b""
        while chunk := sock.recv(4096):
            data += chunk
        return data.decode()


# The work below spins forever unless stopped, so "stopped" is told from "not stopped" by a bound far
# from the budget it is given (the long one is 60 s): a loaded machine may be seconds late.
STOPPED_WITHIN = 20.0


@pytest.mark.parametrize("checks", [1, 0], ids=["checks", "never-checks"])
def test_work_past_its_budget_answers_partially(short_budget: int, checks: int) -> None:
    start = time.monotonic()
    answer = _get(short_budget, f"/spin/over{checks}?checks={checks}")
    assert "partial: the server's 0.5 s budget" in answer
    assert time.monotonic() - start < STOPPED_WITHIN


@pytest.mark.parametrize("checks", [1, 0], ids=["checks", "never-checks"])
def test_a_budget_shortened_while_the_work_runs_stops_it_then(long_budget: int, checks: int) -> None:
    start = time.monotonic()
    answer = _get(long_budget, f"/shortened/short{checks}?checks={checks}")
    assert "partial: the server's 0.5 s budget" in answer  # not the 60 s it began with
    assert time.monotonic() - start < STOPPED_WITHIN


@pytest.mark.parametrize("checks", [1, 0], ids=["checks", "never-checks"])
def test_a_client_that_leaves_ends_the_work(long_budget: int, checks: int) -> None:
    name = f"left{checks}"
    sock = socket.create_connection(("127.0.0.1", long_budget))
    sock.sendall(f"GET /spin/{name}?checks={checks} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    deadline = time.monotonic() + STOPPED_WITHIN
    while name not in STARTED and time.monotonic() < deadline:  # the work runs: now the client leaves
        time.sleep(0.05)
    sock.close()
    left = time.monotonic()
    deadline = left + STOPPED_WITHIN
    while name not in STOPPED and time.monotonic() < deadline:
        time.sleep(0.05)
    assert name in STOPPED, "the work went on after the client left"


@pytest.mark.parametrize("limit", [BodyTooLarge(10), BodyTooSlow(1.0)], ids=["too large", "too slow"])
def test_more_body_past_the_cap_is_not_a_client_that_left(limit: Exception) -> None:
    """A route that stopped reading a body past its own bound (a form over the code's size) and polls
    for the client meanwhile reads more body: the body limits then raise, yet the client is there,
    and the work on the route's answer goes on (it was answered 'unusable' when the poll came
    before the work ended, on a loaded machine)."""
    async def receive() -> dict:
        raise limit

    request = Request({"type": "http", "method": "POST", "path": "/run", "headers": []}, receive)
    assert run_in_own_loop(work._client_left(request)) is False

    async def gone() -> dict:
        return {"type": "http.disconnect"}

    assert run_in_own_loop(work._client_left(Request(request.scope, gone))) is True

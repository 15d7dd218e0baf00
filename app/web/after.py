"""Work a request leaves for once its answer is made: it runs beside the sending, and the client does
not wait for it.

Freeing a large trace is such work: a page's views are half a million objects (~0.1–0.3 s to free),
and with the collector paused for the request (``app.heap``) every object it made is still young, so
the collection that follows walks them all. ``app.web.gates`` hands the trace, the spent work, the
collection and the admission slot's return to ``after_answer``. The jobs start in a worker thread
when the response's last body message is handed on (the route and its locals are gone by then, so
the jobs hold the last references), not when the client has read it: a client that reads slowly
holds no slot and no trace. A request that ends without a response starts them as it ends.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from starlette.types import ASGIApp, Message, Receive, Scope, Send

AFTER_KEY = "explorer.after_answer"  # scope key: the jobs to start once the answer is made
log = logging.getLogger(__name__)
_running: set[asyncio.Future[None]] = set()  # started jobs, kept referenced until they end

Job = Callable[[], None]


def after_answer(scope: Scope, job: Job) -> None:
    """Run ``job`` in a worker thread once the request's answer is made, after the jobs added before
    it: it always runs, exactly once (at once, outside ``AfterAnswer``)."""
    jobs = scope.get(AFTER_KEY)
    if jobs is None:
        job()
    else:
        jobs.append(job)


def _run_all(jobs: list[Job]) -> None:
    """Each job in turn, each dropped from ``jobs`` as it starts: a job holds what it frees or keeps
    (a trace, to cache it), and the list stays referenced from the request's objects, which are in
    reference cycles (uvicorn's cycle, the middlewares' closures) that only the cyclic collector frees."""
    while jobs:
        job = jobs.pop(0)
        try:
            job()
        except Exception:  # noqa: BLE001 - one failing job must not keep the next (a slot's return) from running
            log.exception("a job left for after the answer failed")
        del job


class AfterAnswer:
    """The ASGI middleware that starts the request's ``after_answer`` jobs."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        jobs: list[Job] = []
        scope[AFTER_KEY] = jobs

        def start() -> None:
            if scope.pop(AFTER_KEY, None) is None:
                return  # started already
            if not jobs:
                return
            try:
                future = asyncio.get_running_loop().run_in_executor(None, _run_all, jobs)
            except RuntimeError:  # no loop or no executor left (the server is shutting down)
                _run_all(jobs)
                return
            _running.add(future)
            future.add_done_callback(_running.discard)

        async def send_then(message: Message) -> None:
            if message["type"] == "http.response.body" and not message.get("more_body", False):
                start()  # the answer is made: its body is in hand
            await send(message)

        try:
            await self.app(scope, receive, send_then)
        finally:
            start()

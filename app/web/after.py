"""Work a request leaves for after its response is sent: the client does not wait for it.

Freeing a large trace is such work. Its models and the views built from it hold reference cycles,
so only the cyclic collector frees them, and with the collector paused for the work (``app.heap``)
every object the request made is still in its youngest generation: collecting it walks them all,
about 0.1 s for the leak x1000 trace, and the first allocation after the pause ends would do that
anyway, on the way to the client. So ``app.web.gates`` keeps the collector paused until the answer
is out and collects then, here.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from fastapi.concurrency import run_in_threadpool
from starlette.types import ASGIApp, Receive, Scope, Send

AFTER_KEY = "explorer.after_response"  # scope key: what to run once the response is sent


def after_response(scope: Scope, job: Callable[[], None]) -> None:
    """Run ``job`` (in a worker thread) once the request's response is sent, or the request ended
    without one: it always runs, exactly once (at once, outside ``AfterResponse``)."""
    jobs = scope.get(AFTER_KEY)
    if jobs is None:
        job()
    else:
        jobs.append(job)


class AfterResponse:
    """The ASGI middleware that runs the request's ``after_response`` jobs."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        jobs: list[Callable[[], None]] = []
        scope[AFTER_KEY] = jobs
        try:
            await self.app(scope, receive, send)  # returns once the last body message is sent
        finally:
            del scope[AFTER_KEY]  # a job added from here on runs at once
            try:
                while jobs:
                    await run_in_threadpool(jobs.pop(0))  # (a thread once started is waited for)
            except asyncio.CancelledError:  # the connection went: the jobs left must still run
                for job in jobs:
                    job()
                raise

"""Stop: the reader ends a run the page is waiting for (issue 27), and keeps the steps so far.

The page posts each run with a ``run_id`` it made (a random token); while that run's request is in
the server, its ``RunStop`` (``app.sandbox.stop``) is found here by that id. ``POST /run/stop`` with
the id asks for the stop: the sandbox's child is ended, the steps the server had read and checked
are the run's answer, and the waiting ``POST /run`` answers them at once, drawn, with a notice that
says the reader stopped it (``app.render.notices``).

The registry is this process's: behind a load balancer the stop must reach the replica that runs the
snippet (it answers 404 elsewhere, and the run then ends at its limits as before). An id is known
only to the page that made it; at most one run holds an id at a time.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from fastapi import APIRouter, Request, Response

from app.sandbox.stop import RunStop
from app.web.forms import TOO_LONG, read_form

RUN_ID = re.compile(r"[A-Za-z0-9_-]{16,64}")
MAX_STOP_BODY = 256

router = APIRouter()


class Stops:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._runs: dict[str, RunStop] = {}

    @contextmanager
    def open(self, run_id: str | None) -> Iterator[RunStop | None]:
        """The stop of the run under ``run_id`` while it runs; None for no id, a malformed one or one
        a run already holds."""
        stop = RunStop()
        with self._lock:
            if not run_id or not RUN_ID.fullmatch(run_id) or run_id in self._runs:
                stop = None
            else:
                self._runs[run_id] = stop
        try:
            yield stop
        finally:
            if stop is not None:
                with self._lock:
                    self._runs.pop(run_id, None)  # type: ignore[arg-type]

    def request(self, run_id: str) -> bool:
        with self._lock:
            stop = self._runs.get(run_id)
        if stop is None:
            return False
        stop.request()
        return True


@router.post("/run/stop", include_in_schema=False)
async def stop_run(request: Request) -> Response:
    """Stop the run under the posted ``run_id``: 204, or 404 when no run here holds it (it ended, or
    another replica runs it)."""
    form = await read_form(request, MAX_STOP_BODY)
    if TOO_LONG in form:
        return Response(status_code=413)
    run_id = form.get("run_id", "")
    found = RUN_ID.fullmatch(run_id) is not None and request.app.state.stops.request(run_id)
    return Response(status_code=204 if found else 404)

"""Stop: the reader ends a run the page is waiting for (issue 27), and keeps the steps so far.

The page posts each run with a ``run_id`` it made (a random token); while that run's request is in
the server, its ``RunStop`` (``app.sandbox.stop``) is found here by that id. ``POST /run/stop`` with
the id asks for the stop: the sandbox's child is ended, the steps the server had read and checked
are the run's answer, and the waiting ``POST /run`` answers them at once, drawn, with a notice that
says the reader stopped it (``app.render.notices``).

A stop may reach the server before the run it names: the page shows Stop as soon as it posts the run,
and on a busy server (or network) the run's request can still be on its way to ``open`` when the
reader clicks. Such a stop is remembered for a while (``EARLY_SECONDS``, at most ``MAX_EARLY`` ids)
and the run that then opens under its id is ended as soon as it starts; before, it was answered 404
and lost, and the run went on to its limits.

The registry is this process's: behind a load balancer the stop must reach the replica that runs the
snippet (elsewhere it is remembered in vain, and the run ends at its limits as before). An id is known
only to the page that made it; at most one run holds an id at a time.
"""

from __future__ import annotations

import re
import threading
import time
from collections import OrderedDict
from collections.abc import Iterator
from contextlib import contextmanager

from fastapi import APIRouter, Request, Response

from app.sandbox.stop import RunStop
from app.web.forms import TOO_LONG, read_form

RUN_ID = re.compile(r"[A-Za-z0-9_-]{16,64}")
MAX_STOP_BODY = 256
EARLY_SECONDS = 60.0  # a stop before its run: past the run's longest way to the registry (body, gates)
MAX_EARLY = 1024  # ids remembered so, the oldest forgotten first: a few dozen KiB at most

router = APIRouter()


class Stops:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._runs: dict[str, RunStop] = {}
        self._early: OrderedDict[str, float] = OrderedDict()  # ids stopped before a run held them: when

    @contextmanager
    def open(self, run_id: str | None) -> Iterator[RunStop | None]:
        """The stop of the run under ``run_id`` while it runs; None for no id, a malformed one or one
        a run already holds. Already requested when a stop for the id came first."""
        stop = RunStop()
        with self._lock:
            if not run_id or not RUN_ID.fullmatch(run_id) or run_id in self._runs:
                stop = None
            else:
                self._runs[run_id] = stop
                asked = self._early.pop(run_id, None)
                if asked is not None and time.monotonic() - asked <= EARLY_SECONDS:
                    stop.request()  # nothing bound yet: the run ends as soon as it starts
        try:
            yield stop
        finally:
            if stop is not None:
                with self._lock:
                    self._runs.pop(run_id, None)  # type: ignore[arg-type]

    def request(self, run_id: str) -> bool:
        """Stop the run under ``run_id``: True when one holds it now; else the stop is kept for the run
        that may yet come under it (``EARLY_SECONDS``)."""
        now = time.monotonic()
        with self._lock:
            stop = self._runs.get(run_id)
            if stop is None:
                self._early.pop(run_id, None)
                self._early[run_id] = now
                while self._early and (len(self._early) > MAX_EARLY
                                       or now - next(iter(self._early.values())) > EARLY_SECONDS):
                    self._early.popitem(last=False)
                return False
        stop.request()
        return True


@router.post("/run/stop", include_in_schema=False)
async def stop_run(request: Request) -> Response:
    """Stop the run under the posted ``run_id``: 204 when a run here holds it, 202 when none does (yet:
    the stop is kept for a run that comes under it; or it ended, or another replica runs it), 404 for
    no id or a malformed one."""
    form = await read_form(request, MAX_STOP_BODY)
    if TOO_LONG in form:
        return Response(status_code=413)
    run_id = form.get("run_id", "")
    if RUN_ID.fullmatch(run_id) is None:
        return Response(status_code=404)
    return Response(status_code=204 if request.app.state.stops.request(run_id) else 202)

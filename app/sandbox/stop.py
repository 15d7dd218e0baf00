"""A reader's request to stop a run before its end (the page's Stop button, issue 27).

The web layer makes one ``RunStop`` per run it may be asked to stop and hands it to the runner; the
runner ``bind``s what ends its child for as long as the child runs. ``request`` may come before,
during or after that (from another request's thread): before, the run is ended as soon as it starts;
after, it is a no-op. What the reader keeps is the steps the server had already read and checked.
"""

from __future__ import annotations

import threading
from collections.abc import Callable


class RunStop:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.requested = False
        self._end: Callable[[], None] | None = None

    def request(self) -> None:
        with self._lock:
            self.requested = True
            end = self._end
        if end is not None:
            end()

    def bind(self, end: Callable[[], None]) -> None:
        """``end`` stops the run (called at once if a stop was asked for already)."""
        with self._lock:
            self._end = end
            requested = self.requested
        if requested:
            end()

    def unbind(self) -> None:
        with self._lock:
            self._end = None

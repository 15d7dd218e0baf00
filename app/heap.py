"""The server's heap: the cyclic garbage collector paused while it works on one trace, and the
allocator it runs on (``serve_environment``, ``tune_malloc``, ``trim_heap``).

Reading a trace (validating the worker's JSON, replaying it for diagnostics, building the views)
allocates hundreds of thousands of small objects that all live until the answer is written. Python's
cyclic collector, triggered by allocation counts, rescans that growing heap again and again meanwhile:
measured on the leak x1000 trace, validation 0.32 s -> 0.12 s and diagnostics 0.89 s -> 0.33 s with it
paused. The work makes no reference cycles of its own worth collecting mid-way; the collector is back
as it was when the last such work ends, and ``app.web.gates`` collects after a large trace anyway.
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager

_lock = threading.Lock()
_users = [0, False]  # works running now; whether the collector was on before the first of them


@contextmanager
def collector_paused() -> Iterator[None]:
    """Pause the collector for the block; nested and concurrent blocks share one pause."""
    release = pause_collector()
    try:
        yield
    finally:
        release()


def pause_collector() -> Callable[[], None]:
    """``collector_paused`` for a pause that does not end in the block that starts it (a request's
    ends once its answer is made, ``app.web.gates``): returns its end, which does nothing when called
    again."""
    with _lock:
        if _users[0] == 0:
            _users[1] = gc.isenabled()
            gc.disable()
        _users[0] += 1
    ended = [False]

    def release() -> None:
        with _lock:
            if ended[0]:
                return
            ended[0] = True
            _users[0] -= 1
            if _users[0] == 0 and _users[1]:
                gc.enable()

    return release


def collect_due() -> int:
    """A collection of the youngest generation, or of the oldest one whose turn has come by the
    collector's own counts and thresholds (each collection of a generation counts one for the next):
    what the collector would have run had it not been paused. Returns the generation collected."""
    counts, thresholds = gc.get_count(), gc.get_threshold()
    generation = 0
    while generation < 2 and counts[generation + 1] >= thresholds[generation + 1]:
        generation += 1
    gc.collect(generation)
    return generation


# glibc's mallopt parameters
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
M_ARENA_MAX = -8
MALLOC_ARENAS = 2
MALLOC_MMAP_BYTES = 128 * 1024
SERVE_ALLOCATOR = {"PYTHONMALLOC": "malloc"}


def serve_environment(environ: Mapping[str, str]) -> dict[str, str] | None:
    """The environment ``python -m app serve`` starts itself again in (``app.__main__``), or None when
    ``environ`` is already it: Python's objects allocated by glibc's malloc, not by pymalloc.

    pymalloc carves small objects out of 1 MiB arenas and gives an arena back to the system only
    when every object in it is gone. A flood of large answers (hundreds of thousands of short-lived
    objects each) spreads over many arenas, and the few objects made meanwhile that live on (cache
    entries, the rate window's hits, orjson's key cache, a module's first lazy table) keep each of
    them: ``python -m app.bench soak`` left RSS +150 MiB after its flood (after half of it, 36 -> 138
    arenas held 37 MB of objects, and a full collection gave 3 back). glibc's malloc keeps such a
    survivor's 4 KiB page only and ``trim_heap`` hands the free pages around it back: +38 to +59 MiB
    (+28 to +34 with ``QuietSweep``), for about a quarter more server CPU on a large answer
    (docs/self-host.md). A ``PYTHONMALLOC`` the user set is theirs and kept. The fork server and the
    runs never see this (``app.sandbox.launch.fork_server_env``)."""
    if all(name in environ for name in SERVE_ALLOCATOR):
        return None
    return {**SERVE_ALLOCATOR, **environ}


def tune_malloc() -> None:
    """glibc's malloc for a server that reads large answers from worker threads (a no-op off glibc):

    * at most ``MALLOC_ARENAS`` malloc arenas: each worker thread would get an arena of its own (up
      to 8 per core) and glibc keeps every arena's high-water mark; the threads that share two spend
      their time in Python, not in malloc;
    * blocks from ``MALLOC_MMAP_BYTES`` up (a frame's JSON, a large list's items, an answer's body)
      mapped on their own and unmapped when freed, and the heap's free top handed back past as many
      bytes: glibc would otherwise raise both thresholds as large blocks come and go (up to 32 MiB),
      and keep those blocks in its heaps.

    Call it before the worker threads exist."""
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None)
        libc.mallopt(M_ARENA_MAX, MALLOC_ARENAS)
        libc.mallopt(M_MMAP_THRESHOLD, MALLOC_MMAP_BYTES)
        libc.mallopt(M_TRIM_THRESHOLD, MALLOC_MMAP_BYTES)


def trim_heap() -> None:
    """Hand glibc's free memory at the top of its heaps back to the system (it keeps it otherwise):
    after a large answer is gone. It walks the heap: call it from a worker thread. A no-op off glibc."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None).malloc_trim(0)


QUIET_SECONDS = 0.25


class QuietSweep:
    """A full collection and a heap trim once the server has gone quiet after reading large traces.

    A large answer's own sweep (``app.web.gates``) collects only the generation that is due: under
    load the old generation's garbage (uvicorn's requests are small reference cycles, a few thousand
    objects a flood) waits for a full collection that may not come for a long time, and each of its
    objects keeps a page of the heap from going back. Once no run is in flight for ``seconds`` after
    one that read a large trace, it is all collected and trimmed, in a thread of its own: measured
    after half of ``python -m app.bench soak``'s flood, 4,266 objects freed and RSS 122 -> 102 MiB;
    the whole soak's growth +38 to +59 -> +28 MiB. ~0.1-0.2 s of the interpreter's time, once per
    busy spell, never on a request's wait (a request that arrives meanwhile waits that long for it)."""

    def __init__(self, seconds: float = QUIET_SECONDS) -> None:
        self.seconds = seconds
        self.sweeps = 0
        self._lock = threading.Lock()
        self._busy = 0  # runs in flight
        self._due = False  # a large trace was read since the last sweep
        self._timer: threading.Timer | None = None

    def started(self) -> None:
        """A run took its slot."""
        with self._lock:
            self._busy += 1
            self._cancel()

    def ended(self, large: bool) -> None:
        """A run gave its slot back (``large``: it read a large trace)."""
        with self._lock:
            self._busy -= 1
            self._due |= large
            if self._busy == 0 and self._due:
                self._cancel()
                self._timer = threading.Timer(self.seconds, self._sweep)
                self._timer.daemon = True
                self._timer.start()

    def _cancel(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _sweep(self) -> None:
        with self._lock:
            if self._busy or not self._due or self._timer is None:
                return  # a run started meanwhile: its own end arms the next
            self._due, self._timer = False, None
        gc.collect()
        trim_heap()
        with self._lock:
            self.sweeps += 1


quiet_sweep = QuietSweep()

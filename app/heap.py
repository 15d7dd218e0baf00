"""The cyclic garbage collector, paused while the server works on one trace.

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
from collections.abc import Callable, Iterator
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


M_ARENA_MAX = -8  # glibc's mallopt parameter


def limit_malloc_arenas(count: int = 2) -> None:
    """Let glibc keep at most ``count`` malloc arenas in the server process.

    Each worker thread that builds a large answer gets an arena of its own by default (up to 8 per
    core) and glibc keeps every arena's high-water mark: after a flood of concurrent large answers
    the server stays that much larger (``python -m app.bench soak``). Two arenas bound that growth;
    the threads that share them spend their time in Python, not in malloc. A no-op off glibc."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None).mallopt(M_ARENA_MAX, count)


def trim_heap() -> None:
    """Hand glibc's free memory at the top of its heaps back to the system (it keeps it otherwise):
    after a large answer is gone. It walks the heap: call it from a worker thread. A no-op off glibc."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None).malloc_trim(0)

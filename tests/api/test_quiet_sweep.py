"""Once the server has gone quiet after reading a large trace, its old garbage is collected and the heap
trimmed (``app.heap.QuietSweep``): a reference cycle the paused or rarely-run collector left behind is
freed then, not never; a run that starts meanwhile puts the sweep off, and small runs alone never ask
for one."""

from __future__ import annotations

import gc
import time
import weakref

from app.heap import QuietSweep


class _Cycle:
    def __init__(self) -> None:
        self.me = self


def _wait_for(condition, seconds: float = 30.0) -> bool:  # noqa: ANN001 - a callable
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.01)
    return condition()


def _old_garbage() -> weakref.ref:
    cycle = _Cycle()
    gc.collect()
    gc.collect()  # now in the oldest generation
    ref = weakref.ref(cycle)
    del cycle
    return ref


def test_a_quiet_server_collects_what_a_large_trace_left() -> None:
    was_enabled = gc.isenabled()
    gc.disable()  # a collector paused by the requests, as under load
    try:
        sweep = QuietSweep(seconds=0.05)
        garbage = _old_garbage()
        sweep.started()
        sweep.ended(large=True)
        assert _wait_for(lambda: sweep.sweeps == 1)
        assert garbage() is None
    finally:
        if was_enabled:
            gc.enable()


def test_a_run_that_starts_puts_the_sweep_off_until_it_ends() -> None:
    sweep = QuietSweep(seconds=0.05)
    sweep.started()
    sweep.started()
    sweep.ended(large=True)  # another run is still in flight: not quiet
    time.sleep(0.3)
    assert sweep.sweeps == 0
    sweep.ended(large=False)  # the large trace read before is still owed its sweep
    assert _wait_for(lambda: sweep.sweeps == 1)


def test_a_run_that_starts_before_the_quiet_time_is_over_cancels_it() -> None:
    sweep = QuietSweep(seconds=60.0)
    sweep.started()
    sweep.ended(large=True)
    timer = sweep._timer
    assert timer is not None
    sweep.started()  # before the minute is over
    assert timer.finished.is_set()  # cancelled
    sweep.ended(large=False)
    assert sweep._timer is not None and sweep._timer is not timer  # armed again, for the owed sweep
    sweep._timer.cancel()


def test_small_runs_alone_never_sweep() -> None:
    sweep = QuietSweep(seconds=0.01)
    for _ in range(5):
        sweep.started()
        sweep.ended(large=False)
    assert sweep._timer is None
    time.sleep(0.1)
    assert sweep.sweeps == 0
    sweep.started()
    sweep.ended(large=True)
    assert sweep._timer is not None
    sweep._timer.join(30)
    assert sweep.sweeps == 1

"""Server work that starts on a run's steps while the run goes on.

The sandbox streams a run's steps as it makes them (``app.sandbox.child.ResultStream``) and the pool
validates and checks each frame as it arrives (``app.sandbox.runner.AnswerReader``). Drawn after the
run, the page's work (the views, the diagnostics) adds its whole time to the run's; fed the steps as
they pass, it runs beside the run, on the other core, and only its finish (layout, templates) comes
after.

What is fed early is speculative: the whole answer the runner returns is used with the fed work only
when its steps are exactly the ones fed (the reader hands on no step after a bad one, so an answer cut
at a bad step still is); otherwise (the run failed, or its answer did not validate) the fed work is
dropped and the work is done again from the answer, as it is without streaming.
"""

from __future__ import annotations

import logging
import queue
from collections.abc import Callable, Iterator
from typing import Any, Generic, Protocol, TypeVar

from app.budget import BudgetExceeded, current_budget
from app.schema import DeltaStep, DeltaTrace

T = TypeVar("T")
log = logging.getLogger(__name__)


class Speculation(Protocol):
    def add(self, delta: DeltaStep) -> None:
        """The next step (raise to refuse it: the speculation is then dropped)."""

    def finish(self, result: DeltaTrace) -> Any:
        """The work's answer, for the whole ``result`` whose steps are the ones added."""


class StepFeed:
    """Steps from the runner's thread (``put``, the runner's ``on_steps``) to the work's thread, then
    the whole answer (``settle``). Unbounded: the run's result cap bounds it."""

    def __init__(self) -> None:
        self._queue: queue.SimpleQueue[list[DeltaStep] | _Settled] = queue.SimpleQueue()
        self.result: DeltaTrace | None = None

    def put(self, steps: list[DeltaStep]) -> None:
        self._queue.put(steps)

    def settle(self, result: DeltaTrace) -> None:
        """The run is over: ``result`` is its whole answer."""
        self._queue.put(_Settled(result))

    def frames(self) -> Iterator[list[DeltaStep]]:
        """Each frame's steps as they come, until the answer is settled (then in ``result``)."""
        while True:
            item = self._queue.get()
            if isinstance(item, _Settled):
                self.result = item.result
                return
            yield item


class _Settled:
    __slots__ = ("result",)

    def __init__(self, result: DeltaTrace) -> None:
        self.result = result


class Streamed(Generic[T]):
    """``work(result)``, computed as ``speculation`` fed the steps while the run goes on when the
    answer allows it. ``consume`` runs in the work's thread, under the request's budget."""

    def __init__(self, start: Callable[[], Speculation], work: Callable[[DeltaTrace], T]) -> None:
        self.feed = StepFeed()
        self._start = start
        self._work = work
        self.fed = 0  # steps the speculation took (for tests and the log)
        self.used = False  # whether the answer came from the speculation
        # The speculation once its answer is made: kept, so that it is freed where the caller says
        # (a page's views are half a million objects, ~0.1–0.3 s to free: beside the answer's sending).
        self.spent: Speculation | None = None
        # Told the whole answer and what was made of it, in the work's thread (app.web.gates.Drawing)
        self.made: Callable[[DeltaTrace, T], T] | None = None

    def consume(self) -> T:
        speculation: Speculation | None = self._start()
        budget = current_budget()
        first = last = None
        for steps in self.feed.frames():
            if speculation is None:
                continue  # dropped: the frames still have to be taken until the answer comes
            try:
                for delta in steps:
                    speculation.add(delta)
                    self.fed += 1
                    if first is None:
                        first = delta
                    last = delta
                budget.check()
            except BudgetExceeded:
                raise
            except Exception:  # a bug in a builder: the answer alone may still draw (or say why not)
                log.exception("streamed steps dropped after %d", self.fed)
                speculation = None
        result = self.feed.result
        if result is None:  # frames() returns only once the answer is settled
            raise RuntimeError("the run's answer never came")
        if speculation is not None and self.fed and len(result.steps) == self.fed \
                and result.steps[0] is first and result.steps[-1] is last:  # the very steps fed
            self.used = True
            self.spent = speculation
            answer = speculation.finish(result)
        else:
            answer = self._work(result)
        return answer if self.made is None else self.made(result, answer)

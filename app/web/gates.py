"""The gates every run passes, whoever asks (API, page, embed, SVG): the per-client rate (429),
bounded concurrency with a bounded queue (503), and a sandbox that proved its layers (503).

The admission slot covers the whole request, not just the sandboxed run: the server's own reading of
the answer (validation, diagnostics, layout, templates) runs inside it too, under the request's
``Budget`` (``app.web.work``), so a cheap snippet cannot buy unbounded server CPU after its run.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import time
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from math import ceil
from typing import Any, TypeVar

from fastapi import Request

from app.budget import BudgetExceeded, current_budget
from app.heap import collect_due, pause_collector, quiet_sweep, trim_heap
from app.i18n import N_, current_locale, gettext, say
from app.run_errors import Message, Param
from app.sandbox.stop import RunStop
from app.schema import DeltaStep, DeltaTrace, RunError
from app.web.after import after_answer
from app.web.clients import client_key
from app.web.limits import CACHE_DESC_KEY, CACHE_KEY, SANDBOX_KEY, SAVED_KEY, WORK_KEY
from app.web.runcache import ended_by_itself
from app.web.streamed import Streamed
from app.web.work import budgeted, in_thread, work_budget

T = TypeVar("T")
R = TypeVar("R")  # what the work reads: one run's answer, or a tuple of them
log = logging.getLogger(__name__)
UNUSABLE = Message("output.unusable_view")
RATE_KEY = "explorer.rate_wait"  # scope key: the token this request already took (see take_token)


@dataclass(frozen=True)
class Refusal:
    """A run that did not happen: the HTTP status, Retry-After seconds, a title (``N_``-marked,
    English) and a plain sentence (a message code, ``app.run_errors``)."""

    status: int
    retry_after: int
    title: str
    code: str
    params: dict[str, Param] = field(default_factory=dict)
    error_type: str = "Busy"

    @property
    def message(self) -> str:
        """The sentence in the request's language."""
        return say(Message(self.code, self.params))

    @property
    def heading(self) -> str:
        return gettext(self.title)

    def as_result(self) -> DeltaTrace:
        english = str(Message(self.code, self.params))
        error = RunError(kind="internal", type=self.error_type, message=english, code=self.code,
                         params=self.params)
        return DeltaTrace(ok=False, steps=[], error=error)


async def take_token(request: Request, cost: int = 1) -> Refusal | None:
    """The client's rate-limit tokens (``cost``: one per run the request makes), taken once per
    request: routes that read a body take them first, so a client over its rate never makes the
    server read (or parse) what it sends. The client is ``app.web.clients.client_key``'s."""
    if RATE_KEY not in request.scope:
        request.scope[RATE_KEY] = await request.app.state.rate_limiter.atake(client_key(request), cost)
    wait = request.scope[RATE_KEY]
    if wait > 0:
        return Refusal(429, ceil(wait), N_("Slow down"), "internal.rate", {"seconds": ceil(wait)})
    return None


async def finish(request: Request, work: Callable[[R], T], partial: Callable[[R, Message], T],
                 result: R, runs: int = 1) -> T:
    """``work(result)`` under the request's budget (``runs`` runs' worth); ``partial(result, note)``
    when the budget runs out (or the client leaves), or when the work fails on the answer, so the
    client gets a clear partial view, never a 500."""
    try:
        return await budgeted(request, work, result, runs=runs)
    except BudgetExceeded as error:
        note = budget_note(error)
    except Exception:  # noqa: BLE001 - a schema-valid answer whose parts disagree (a forged trace)
        log.exception("server work failed on a validated sandbox answer")  # forged, or a bug: the log
        note = UNUSABLE
    return await in_thread(partial, result, note)


async def run_gated(request: Request, code: str, work: Callable[[DeltaTrace], T],
                    partial: Callable[[DeltaTrace, Message], T], *, cuda_on_cpu: bool = False) -> T | Refusal:
    """Run ``code`` in the sandbox and ``work`` on its answer, all inside one admission slot."""
    return await run_gated_all(request, (code,), lambda results: work(results[0]),
                               lambda results, note: partial(results[0], note), cuda_on_cpu=cuda_on_cpu)


def run_options(cuda_on_cpu: bool) -> dict[str, bool]:
    """What a run asks of the runner beyond its code: given only when asked (app.sandbox.runner.Runner)."""
    return {"cuda_on_cpu": True} if cuda_on_cpu else {}


async def run_gated_all(request: Request, codes: tuple[str, ...],
                        work: Callable[[tuple[DeltaTrace, ...]], T],
                        partial: Callable[[tuple[DeltaTrace, ...], Message], T], *,
                        cuda_on_cpu: bool = False) -> T | Refusal:
    """Several runs counted as that many (a compare is two): one rate token per run, one admission
    slot held while they run in turn (two slots taken one after the other could deadlock against
    another compare), and the server work on all the answers under that many runs' budget."""
    async with _slot(request, len(codes)) as (refusal, sweep):
        if refusal is not None:
            return refusal
        results = tuple([await run_code(request, code, options=run_options(cuda_on_cpu)) for code in codes])
        sweep.large = _large(results)
        sweep.held.append(results)
        return await finish(request, work, partial, results, runs=len(codes))


async def run_gated_streamed(request: Request, code: str, streamed: Streamed[T],
                             partial: Callable[[DeltaTrace, Message], T], *,
                             cuda_on_cpu: bool = False, stop: RunStop | None = None) -> T | Refusal:
    """``run_gated``, with the work started before the run: it takes the steps as the sandbox streams
    them (``app.web.streamed``), so most of it is done when the run ends. Its budget runs from its
    start, so it holds the run's wall time (and grace) more than a run's budget; once the run has
    ended it has a run's budget left at most, as if it started then (on a loaded machine the steps
    may be fed well after the run made them). ``Server-Timing``'s work is what it took after the run.
    ``stop``: the reader may end the run (``app.web.stops``)."""
    async with _slot(request, 1) as (refusal, sweep):
        if refusal is not None:
            return refusal
        state = request.app.state
        budget = work_budget(request, waiting=float(state.settings.wall_seconds) + RUN_GRACE_SECONDS)
        work = asyncio.ensure_future(budgeted(request, streamed.consume, budget=budget, timed=False))
        try:
            result = await run_code(request, code, streamed.feed.put, run_options(cuda_on_cpu), stop=stop)
        except BaseException:  # a cancelled request: the work is stopped, and the slot held until it is
            streamed.feed.settle(_NO_ANSWER)
            work.cancel()
            with contextlib.suppress(BaseException):
                await work
            raise
        streamed.feed.settle(result)
        budget.shorten(float(state.settings.server_seconds))
        ran = time.monotonic()
        try:
            answer = await work
        except BudgetExceeded as error:
            answer = await in_thread(partial, result, budget_note(error))
        except Exception:  # noqa: BLE001 - as in ``finish``
            log.exception("server work failed on a validated sandbox answer")
            answer = await in_thread(partial, result, UNUSABLE)
        # The task holds the error it ended with, whose traceback holds this frame: a cycle through
        # this frame's locals (the trace, the streamed work) that only the cyclic collector would free.
        del work
        request.scope[WORK_KEY] = request.scope.get(WORK_KEY, 0.0) + time.monotonic() - ran
        sweep.large = _large((result,))
        sweep.held += (result, streamed)
        return answer


async def run_code(request: Request, code: str, on_steps: Callable[[list[DeltaStep]], None] | None = None,
                   options: Mapping[str, Any] | None = None, stop: RunStop | None = None) -> DeltaTrace:
    """One run of ``code``: the sandbox's answer, or the run cache's (``app.web.runcache``) for a
    runner whose answers only the code and the settings decide. ``options``: the run's options,
    given to the runner and to the cache key alike, so no option can be left out of the key.
    ``on_steps`` gets the steps (a hit's all at once). Its time goes to ``Server-Timing``. ``stop``:
    the reader may end the run (``app.web.stops``); it changes no answer but a cut one, which the
    cache does not keep (a timeout), so it is not part of the key."""
    state = request.app.state
    runner, options = state.runner, dict(options or {})
    cache = state.run_cache if getattr(runner, "deterministic", False) and state.run_cache.enabled else None
    started = time.monotonic()
    if cache is not None:
        key = cache.key(code, options)
        hit = await in_thread(cache.get, key, code)
        looked = time.monotonic()
        _count(request, CACHE_KEY, looked - started)
        # a compare's two runs: "hit" only when the cache answered both
        request.scope[CACHE_DESC_KEY] = "hit" if hit and request.scope.get(CACHE_DESC_KEY, "hit") == "hit" \
            else "miss"
        if hit is not None:
            _count(request, SAVED_KEY, hit.seconds)
            if on_steps is not None and hit.trace.steps:
                on_steps(list(hit.trace.steps))
            return hit.trace
        started = looked
    asked = {**options, **({"stop": stop} if stop is not None else {})}
    if on_steps is not None:
        result = await runner.run(code, on_steps, **asked)
    else:
        result = await runner.run(code, **asked)
    seconds = time.monotonic() - started
    _count(request, SANDBOX_KEY, seconds)
    if cache is not None:  # kept beside the answer's sending, before the slot is given back
        after_answer(request.scope, lambda: cache.put(key, code, result, seconds))
    return result


def drawn_steadily(*errors: RunError | None) -> bool:
    """Called once a drawing is made, in the work's thread: whether the next drawing of these runs
    would be the same (``Drawing``): they ended by themselves, and the work cut no corner for want of
    time (``Budget.hurried``: a graph placed quickly because the budget ran low or dot was busy)."""
    return all(ended_by_itself(error) for error in errors) and not current_budget().hurried


class Drawing:
    """What the server draws from one run (a page's fragment, a picture), kept by this process
    (``RunCache.drawn``) and answered again as drawn — no run, no work — to the same code drawn with
    the same ``params``, in the same language. Kept only when it would be drawn the same again
    (``drawn_steadily``); ``note`` is told, in the work's thread, once it is drawn."""

    def __init__(self, request: Request, code: str, options: Mapping[str, Any],
                 params: tuple[str, ...]) -> None:
        self.request, self.code = request, code
        self.cache = request.app.state.run_cache
        self.key = self.cache.drawing_key(code, options, *params, current_locale())
        self.steady = False
        self.started = time.monotonic()

    @classmethod
    def of(cls, request: Request, code: str, options: Mapping[str, Any], *params: str) -> Drawing | None:
        """``options``: the run's (``run_options``). None where nothing is kept: a runner whose answers
        may differ, or no cache in this process."""
        state = request.app.state
        if not getattr(state.runner, "deterministic", False) or state.run_cache.local is None:
            return None
        return cls(request, code, options, params)

    async def lookup(self) -> str | None:
        started = time.monotonic()
        hit = await in_thread(self.cache.drawn, self.key)
        _count(self.request, CACHE_KEY, time.monotonic() - started)
        if hit is None:
            return None
        self.request.scope[CACHE_DESC_KEY] = "hit"
        _count(self.request, SAVED_KEY, hit[1])  # what the drawing took to make: its runs and the work
        return hit[0]

    def note(self, *errors: RunError | None) -> None:
        self.steady = drawn_steadily(*errors)

    def made(self, result: DeltaTrace, text: T) -> T:
        self.note(result.error)
        return text

    def watch(self, work: Callable[[DeltaTrace], T]) -> Callable[[DeltaTrace], T]:
        return lambda result: self.made(result, work(result))

    def keep(self, text: str) -> None:
        """Keep ``text`` if it is steady (beside the answer's sending)."""
        if self.steady:
            seconds, cache = time.monotonic() - self.started, self.cache
            after_answer(self.request.scope, lambda: cache.keep_drawn(self.key, self.code, text, seconds))


def _count(request: Request, key: str, seconds: float) -> None:
    request.scope[key] = request.scope.get(key, 0.0) + seconds


RUN_GRACE_SECONDS = 5.0  # the sandbox's own grace past the wall limit, and the answer's reading
_NO_ANSWER = DeltaTrace(ok=False, steps=[])  # a run that never answered (its request was cancelled)


@dataclass
class _Sweep:
    """What a request leaves for once its answer is made (``app.web.after``)."""

    large: bool = False  # it read a large trace: collect its garbage and trim the heap
    # What it made, freed then: a large trace's models and a page's views take ~0.1–0.3 s to free.
    held: list[object] = field(default_factory=list)

    def run(self) -> None:
        self.held.clear()
        # (a pause other requests keep holding: under a flood of small runs it may never end, so a
        # young generation grown past a backlog is collected here too)
        if self.large or gc.get_count()[0] > YOUNG_BACKLOG:
            _trim()


@contextlib.asynccontextmanager
async def _slot(request: Request, runs: int) -> AsyncIterator[tuple[Refusal | None, _Sweep]]:
    """The gates before a request's runs: the client's rate (``runs`` tokens), an admission slot and
    a sandbox that is ready. Yields the refusal or None, and the request's ``_Sweep``.

    From the slot's start until the answer is made the cyclic collector is paused; then, beside the
    sending (``app.web.after``, off the client's wait), what the request made is freed and collected,
    the pause ends, and only then the slot is given back: the slots bound how many traces are alive
    at once, and so the server's memory."""
    sweep = _Sweep()
    refusal = await take_token(request, runs)
    if refusal is not None:
        yield refusal, sweep
        return
    state = request.app.state
    if not await state.admission.acquire():
        yield Refusal(503, 1, N_("Busy"), "internal.busy"), sweep
        return
    release_pause = pause_collector()
    quiet_sweep.started()

    def end() -> None:
        try:
            sweep.run()
        finally:
            release_pause()
            state.admission.release()
            quiet_sweep.ended(sweep.large)  # the server gone quiet: its old garbage too (app/heap.py)

    try:
        runner = state.runner
        if hasattr(runner, "ready") and not await runner.ready():
            code, params = runner.unavailable()
            yield Refusal(503, 30, N_("Not available"), code, params, "SandboxUnavailable"), sweep
        else:
            yield None, sweep
    finally:
        after_answer(request.scope, end)


def _large(results: tuple[DeltaTrace, ...]) -> bool:
    return sum(len(step.tensors) + 1 for result in results for step in result.steps) > TRIM_AFTER_FACTS


TRIM_AFTER_FACTS = 500  # steps + tensors: a trace of megabytes
YOUNG_BACKLOG = 50_000  # young objects a paused collector may leave uncollected (~15 ms to collect)


def _trim() -> None:
    """Hand the memory a large trace used (its models, its JSON) back to the system: without it glibc
    keeps the high-water mark of every concurrent large answer (measured by ``python -m app.bench
    soak``: +260 MB after a flood). The answer's own garbage is all young (the request ran with the
    collector paused, ``app.heap``), so the young generation is collected (a full collection walks
    the whole server heap: Adam x100, ~26 ms with the traces already dropped), and an older one when
    its turn has come as the collector itself counts turns: while requests overlap the pause may
    not end, and garbage that got old meanwhile would otherwise stay. It runs once the answer is made."""
    collect_due()
    trim_heap()


def budget_note(error: BudgetExceeded) -> Message:
    """The sentence a partial answer carries."""
    if error.seconds is None:
        return Message("output.client_left")
    return Message("output.server_budget", {"seconds": error.seconds})

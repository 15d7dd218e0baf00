"""A run's steps reach the server while the run goes on (``app.sandbox.child.ResultStream``), read and
checked as they come (``AnswerReader``), through the real pool and its sandboxed children: the
answer is made of the very steps handed on."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from app.config import Settings
from app.sandbox.pool import ForkServerPool
from app.sandbox.stop import RunStop

# Thousands of steps: a run of well over a flush interval (50 ms), then a last line.
LONG = "total = 0\nfor i in range(4000):\n    total += i\nlast = torch.ones(2) * total\n"


@pytest.fixture(scope="module")
def pool(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ForkServerPool]:
    # The runs end by CPU time (5 s, the default), steps or a stop, never by the wall clock: a busy
    # machine stretches a run's wall time (LONG took more than 5 s at load 7), not its CPU time.
    settings = Settings(testing=True, data_dir=tmp_path_factory.mktemp("data"), max_steps=20000,
                        wall_seconds=120)
    pool = ForkServerPool(settings)
    pool.start()
    if not pool.serving:
        pytest.fail(f"the sandbox does not serve here: {pool.unavailable_message()}")
    yield pool
    pool.close()


def test_steps_arrive_before_the_run_ends(pool: ForkServerPool) -> None:
    arrivals: list[tuple[float, list]] = []
    result = pool.run_blocking(LONG, lambda steps: arrivals.append((time.monotonic(), steps)))
    ended = time.monotonic()
    assert result.ok, result.error
    streamed = [step for _, steps in arrivals for step in steps]
    assert len(arrivals) >= 2, "a run this long is answered in several frames"
    assert arrivals[0][0] < ended
    # Every step came through the stream, in order: the answer is made of them.
    assert len(streamed) == len(result.steps)
    assert all(a is b for a, b in zip(streamed, result.steps, strict=True))
    assert result.steps[-1].variables.keys() >= {"last"}


def test_a_run_stopped_by_its_limit_keeps_the_steps_it_streamed(pool: ForkServerPool) -> None:
    arrivals: list[list] = []
    result = pool.run_blocking("x = torch.ones(3)\nwhile True:\n    x = x + 1", arrivals.append)
    assert result.truncated or result.error is not None
    streamed = [step for steps in arrivals for step in steps]
    assert streamed and len(streamed) == len(result.steps)


def test_a_run_the_server_must_end_keeps_the_steps_it_streamed(pool: ForkServerPool) -> None:
    """A snippet stuck in one long native call cannot hear its own alarm, so the child never answers:
    the server's deadline (or the kernel's CPU kill) ends it. The steps that reached the server
    before are the run up to there, and are kept (``AnswerReader.kept``)."""
    arrivals: list[list] = []
    code = ("for i in range(3000):\n    x = i\n"  # steps for well over a flush interval first
            # ~6.7 TFLOP in one call (~124 products of 3000 x 3000): a minute or more on any one core,
            # so the call outlasts the server's deadline and the CPU limit's kill (2 ** 30 and 2000 x
            # 2000, ~0.5 TFLOP, returned within the limits on a fast AVX-512 core, and the child
            # answered itself)
            "a = torch.randn(3000, 3000)\nb = torch.linalg.matrix_power(a, 2 ** 62 - 1)\n")
    result = pool.run_blocking(code, arrivals.append)
    streamed = [step for steps in arrivals for step in steps]
    assert result.error is not None and result.error.kind == "timeout", result.error
    assert result.error.code in ("timeout.wall_shown", "timeout.cpu_shown"), result.error
    assert result.truncated and streamed and len(streamed) == len(result.steps)
    assert all(a is b for a, b in zip(streamed, result.steps, strict=True))


# Each iteration a 200 × 200 matmul: steps come slower than the limits would let them end.
ENDLESS = "x = torch.randn(200, 200)\nwhile True:\n    x = torch.tanh(x @ x)\n"


def test_a_run_its_reader_stops_answers_the_steps_read_so_far(pool: ForkServerPool) -> None:
    """Stop (app.sandbox.stop): asked for once steps have come, the child is ended at once and the
    answer is the very steps handed on, with an error that says the reader stopped it."""
    arrivals: list[list] = []
    stop = RunStop()

    def on_steps(steps: list) -> None:
        arrivals.append(steps)
        if len(arrivals) == 3:
            stop.request()  # from the reading thread; the page's request comes from another one

    result = pool.run_blocking(ENDLESS, on_steps, stop=stop)
    assert result.error is not None  # ended by the stop, not the wall limit (whose error is a Timeout)
    assert result.error.type == "Stopped" and result.error.code == "timeout.stopped"
    streamed = [step for steps in arrivals for step in steps]
    assert streamed and len(streamed) == len(result.steps)
    assert all(a is b for a, b in zip(streamed, result.steps, strict=True))
    assert result.error.params == {"steps": len(result.steps)}
    # the pool goes on serving
    assert pool.run_blocking("y = torch.ones(2)\n").ok


def test_a_stop_asked_before_the_run_starts_ends_it_at_once(pool: ForkServerPool) -> None:
    stop = RunStop()
    stop.request()
    result = pool.run_blocking(ENDLESS, None, stop=stop)
    assert result.error is not None and result.error.type == "Stopped"


def test_a_stop_after_the_run_ended_changes_nothing(pool: ForkServerPool) -> None:
    stop = RunStop()
    result = pool.run_blocking("y = torch.ones(2) * 3\n", None, stop=stop)
    stop.request()
    assert result.ok and result.error is None

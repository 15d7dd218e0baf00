"""``app.web.runcache``: what decides a trace is in its key, only what a fresh run gives again is kept,
and what comes back from Redis is validated like the sandbox's answer."""

from __future__ import annotations

import os
import time
import zlib
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis as redis_client
from cluster_checks import assert_answered_from_cache, assert_no_run, settled
from fastapi.testclient import TestClient

from app.bench.cluster_kit import Redis as RedisServer
from app.bench.cluster_kit import server_timing
from app.config import Settings
from app.schema import DeltaTrace, RunError
from app.web import runcache, shared
from app.web.main import create_app
from app.web.permalink import encode_code
from app.web.runcache import HEAD, MAGIC, PREFIX, RedisStore, RunCache, keepable

CODE = """\
import torch
a = torch.randn(3, requires_grad=True)
b = (a * 2).sin().sum()
b.backward()
print(a.grad)
"""



def trace(code: str, settings: Settings) -> DeltaTrace:
    """A real trace of ``code`` (the engine in this process: no sandbox needed for the cache's own tests)."""
    from app.engine import EngineLimits, trace_delta

    return DeltaTrace.model_validate(trace_delta(code, EngineLimits(max_steps=settings.max_steps)))


def failed(kind: str, code: str | None = None, error_type: str = "X") -> DeltaTrace:
    return DeltaTrace(ok=False, steps=[], error=RunError(kind=kind, type=error_type, message="m", code=code))


def test_the_key_holds_everything_that_decides_a_trace(tmp_path: Path) -> None:
    cache = RunCache(Settings(data_dir=tmp_path))
    key = cache.key(CODE)
    assert key == RunCache(Settings(data_dir=tmp_path / "elsewhere", port=9999)).key(CODE)  # serving only
    assert key != cache.key(CODE + " ")
    assert key != cache.key(CODE, {"cuda_on_cpu": True})  # any run option, whatever its name
    assert cache.key(CODE, {"a": 1, "b": 2}) == cache.key(CODE, {"b": 2, "a": 1})
    for limit in ({"max_steps": 99}, {"wall_seconds": 9.0}, {"memory_mib": 256}, {"max_stdout_bytes": 9},
                  {"policy_gate": False}):
        assert key != RunCache(Settings(data_dir=tmp_path, **limit)).key(CODE), limit
    assert runcache.cpu_features()  # the CPU is in ENGINE, with the app's sources and torch's version


def test_only_what_a_fresh_run_gives_again_is_kept(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path)
    good = trace(CODE, settings)
    document = good.model_dump_json().encode()
    assert keepable(CODE, good, document)
    assert keepable("x = 1 / 0\n", trace("x = 1 / 0\n", settings), b"{}")  # its own error: every time
    assert keepable("x", failed("rejected", "rejected.policy"), b"{}")
    assert keepable("x", failed("output", "output.stdout"), b"{}")
    for cut in (failed("timeout", "timeout.wall"), failed("timeout", "timeout.cpu"),
                failed("memory", "memory.killed"), failed("internal", "internal.no_process"),
                failed("runtime", "runtime.crash"),
                failed("runtime", None, "MemoryError"), failed("untraced")):
        assert not keepable("x", cut, b"{}"), cut.error
    for volatile in ("torch.seed()\n", "random.seed( )\n", "g = np.random.default_rng()\n", "print(id(a))\n",
                     "p = a.data_ptr()\n", "r = random.SystemRandom()\n"):
        assert not keepable(volatile, good, document), volatile
    assert keepable("torch.manual_seed(1)\nrandom.seed(3)\nidx = 1\n", good, document)
    # a default repr shows the address of the process that ran it
    assert not keepable(CODE, good, b'{"stdout": "<MulBackward0 object at 0x7f199fb86ec0>"}')


@pytest.fixture(scope="module")
def app_client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    """The real app on the real sandbox, with this process's cache."""
    with TestClient(create_app(Settings(data_dir=tmp_path_factory.mktemp("data")))) as client:
        yield client


def test_a_repeated_code_is_answered_without_a_run_exactly_as_a_run_answers(
        app_client: TestClient, tmp_path: Path) -> None:
    code = CODE + "c = a.detach()\n"
    first = app_client.post("/api/run", json={"code": code})
    settled()  # kept beside the answer's sending
    assert_answered_from_cache(first, app_client.post("/api/run", json={"code": code}))
    # and a fresh run, by a server without a cache, gives the same bytes (runs are seeded)
    with TestClient(create_app(Settings(data_dir=tmp_path, cache_mib=0))) as fresh:
        alone = fresh.post("/api/run", json={"code": code})
        assert "cache" not in server_timing(alone)
    assert alone.content == first.content
    # the page, the embed and the picture read the same trace: no run either
    for route, body in (("/run", {"code": code}), ("/embed/run", {"code": code, "view": "both"})):
        assert_no_run(app_client.post(route, data=body))


def test_runs_that_a_fresh_run_may_not_repeat_run_again(app_client: TestClient) -> None:
    for code in ("print(id(object()))\n", "print((torch.ones(1, requires_grad=True) * 2).grad_fn)\n"):
        answers = [app_client.post("/api/run", json={"code": code})]
        settled()  # what would be kept is kept by now: the second runs because nothing was
        answers.append(app_client.post("/api/run", json={"code": code}))
        assert all("sandbox" in server_timing(a) and "saved" not in server_timing(a) for a in answers), code
        assert answers[0].json()["ok"]


def test_replicas_share_traces_through_redis(redis: RedisServer, tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path, cache_url=redis.url, cache_mib=0)
    one, two = RunCache(settings), RunCache(settings)
    made = trace(CODE, settings)
    key = one.key(CODE)
    assert two.get(key, CODE) is None
    assert one.put(key, CODE, made, 0.25)
    hit = two.get(key, CODE)
    assert hit is not None and hit.trace == made and hit.seconds == 0.25
    assert two.health()["shared"]["ok"] and two.health()["shared"]["bytes"] > 0


def test_what_redis_hands_back_is_validated_like_the_sandboxs(redis: RedisServer, tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path, cache_url=redis.url, cache_mib=0)
    cache = RunCache(settings)
    raw = redis_client.Redis.from_url(redis.url)
    made = trace(CODE, settings)
    document = made.model_dump_json()
    steps = len(made.steps)
    forged_step = document.replace('"line":2', '"line":99', 1)  # a line the code does not have
    assert forged_step != document
    hostile = {
        "not ours": b"garbage",
        "bad deflate": HEAD.pack(MAGIC, 0.1) + b"\x00\x01\x02",
        "not a trace": HEAD.pack(MAGIC, 0.1) + zlib.compress(b'{"ok": "yes"}'),
        "inconsistent": HEAD.pack(MAGIC, 0.1) + zlib.compress(forged_step.encode()),
        "a bomb": HEAD.pack(MAGIC, 0.1) + zlib.compress(b" " * (settings.max_result_bytes + 10)),
        "absurd seconds": HEAD.pack(MAGIC, 1e9) + zlib.compress(document.encode()),
        "a timeout": HEAD.pack(MAGIC, 0.1) + zlib.compress(failed("timeout", "t").model_dump_json().encode()),
    }
    key = cache.key(CODE)
    for name, entry in hostile.items():
        raw.set(PREFIX + key, entry)
        assert cache.get(key, CODE) is None, name
        assert raw.get(PREFIX + key) is None, name  # dropped
    assert cache.refused == len(hostile) and steps > 0
    raw.set(PREFIX + key, HEAD.pack(MAGIC, 0.1) + zlib.compress(document.encode()))
    assert cache.get(key, CODE).trace == made  # the control: the same path accepts a real entry


def test_the_shared_cache_is_bounded_and_keeps_what_is_used(redis: RedisServer) -> None:
    store = RedisStore(redis.url, max_bytes=20_000)  # entries of at most 2,500 bytes
    raw = redis_client.Redis.from_url(redis.url)
    keys = [f"k{n}" for n in range(40)]
    for n, key in enumerate(keys):
        store.put(key, os.urandom(1000 + 30 * n))
        if n > 0:
            assert store.get(keys[0]) is not None  # used all along: never the least recently used
    store.put("too-big", os.urandom(3000))
    held = [k for k in [*keys, "too-big"] if raw.exists(PREFIX + k)]
    used = sum(len(raw.get(PREFIX + k)) for k in held)
    assert int(raw.get(runcache.TOTAL)) == used <= 20_000
    assert keys[0] in held and keys[1] not in held and keys[-1] in held and "too-big" not in held
    assert len(held) >= 8  # the bound is filled, not emptied


def test_redis_down_runs_go_on(redis: RedisServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(shared, "RETRY_SECONDS", 0.2)
    settings = Settings(data_dir=tmp_path, cache_url=redis.url, cache_mib=0)
    cache = RunCache(settings)
    made = trace(CODE, settings)
    key = cache.key(CODE)
    cache.put(key, CODE, made, 0.1)
    redis.stop()
    started = time.monotonic()
    assert cache.get(key, CODE) is None  # a miss: the code runs
    cache.put(key, CODE, made, 0.1)
    assert time.monotonic() - started < 5
    assert not cache.health()["shared"]["ok"] and "error" in cache.health()["shared"]


def test_pages_and_pictures_drawn_before_are_answered_as_drawn(app_client: TestClient) -> None:
    code = CODE + "d = a.sin()\n"
    for route, body in (("/run", {"code": code}), ("/run", {"code": code, "step": "2"}),
                        ("/embed/run", {"code": code, "view": "graph"})):
        made = app_client.post(route, data=body)
        settled()  # kept beside the answer's sending
        again = app_client.post(route, data=body)
        assert made.status_code == again.status_code == 200 and again.text == made.text, route
        # no run, and no drawing either: no work
        assert 'cache;desc="hit"' in again.headers["server-timing"] and "work" not in server_timing(again)
    step_two = app_client.post("/run", data={"code": code, "step": "2"}).text
    assert step_two != app_client.post("/run", data={"code": code}).text  # each step its own drawing
    chinese = app_client.post("/run", data={"code": code}, headers={"Accept-Language": "zh-CN"})
    assert chinese.text != made.text and "work" in server_timing(chinese)  # each language too
    picture = {"code": encode_code(code), "step": 3}
    first = app_client.get("/render.svg", params=picture)
    settled()
    second = app_client.get("/render.svg", params=picture)
    assert second.content == first.content and "work" not in server_timing(second)
    # what would not be drawn the same again is drawn each time
    for volatile in ("print(id(object()))\n", "print(torch.ones(1, requires_grad=True).mul(2).grad_fn)\n"):
        answers = [app_client.post("/run", data={"code": volatile})]
        settled()
        answers.append(app_client.post("/run", data={"code": volatile}))
        assert all("work" in server_timing(a) for a in answers), volatile


def test_a_drawing_hurried_by_its_budget_is_not_kept() -> None:
    from app.budget import Budget, use_budget
    from app.render.layout import Box, LayoutCache, lay_out
    from app.web.gates import drawn_steadily

    assert drawn_steadily(None)
    boxes, edges = [Box("a", 40, 20, 0, 0), Box("b", 40, 20, 0, 0)], [("a", "b")]
    with use_budget(Budget(0.05)) as budget:  # less than the layout's reserve left: dot is skipped
        assert lay_out(boxes, edges, LayoutCache()).quick == 1
        assert budget.hurried and not drawn_steadily(None)
    with use_budget(Budget(60)):  # the control: time enough, dot lays it out
        assert lay_out(boxes, edges, LayoutCache()).quick == 0 and drawn_steadily(None)
    assert not drawn_steadily(failed("timeout", "timeout.wall").error)
    assert not drawn_steadily(None, failed("output", None, "ServerBudget").error)  # a partial view


def test_a_run_option_keeps_its_own_answers(app_client: TestClient) -> None:
    """cuda_on_cpu (any run option): the same code asked with and without it is two runs, two drawings."""
    code = "x = torch.ones(2).cuda()\ny = x * 2\n"
    for _ in range(2):  # the second time from the cache, each its own
        simulated = app_client.post("/api/run", json={"code": code, "cuda_on_cpu": True}).json()
        plain = app_client.post("/api/run", json={"code": code}).json()
        assert simulated["ok"] and simulated["cuda_on_cpu"] is True
        assert not plain["ok"] and plain["error"]["code"] == "runtime.no_cuda"
        page = app_client.post("/run", data={"code": code, "cuda_on_cpu": "1"}).text
        assert 'data-testid="cuda-notice"' in page
        assert 'data-testid="cuda-notice"' not in app_client.post("/run", data={"code": code}).text

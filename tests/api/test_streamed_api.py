"""``POST /api/run``'s analysis made from the steps fed while the run goes on (``app.web.api._Analysed``)
is the analysis of the whole answer, in both formats."""

from __future__ import annotations

import gzip
import zlib

import httpx
import pytest

from app import diagnostics
from app.schema import DeltaTrace
from app.trace.delta import compress
from app.web import api
from app.web.api import _Analysed, _answer, _json
from app.web.gzipped import Gzipped
from app.web.streamed import Streamed
from tests import golden
from tests.api.test_streamed_page import _frames

TRACES = [(g.source, DeltaTrace.model_validate(compress(g.result))) for g in golden.load()]
LIMIT = 8 * 1024 * 1024


@pytest.mark.parametrize("form", ["delta", "v1"])
@pytest.mark.parametrize(("code", "trace"), TRACES, ids=[f"golden{i}" for i in range(len(TRACES))])
def test_the_answer_fed_step_by_step_is_the_answer_of_the_whole_trace(code: str, trace: DeltaTrace,
                                                                       form: str) -> None:
    streamed = Streamed(lambda: _Analysed(code, form, LIMIT), lambda t: _answer(t, code, form, LIMIT))
    for frame in _frames(trace):
        streamed.feed.put(frame)
    streamed.feed.settle(trace)
    answer = streamed.consume()
    assert streamed.used == bool(trace.steps)
    assert answer == _answer(trace, code, form, LIMIT)


def test_a_v1_answer_over_the_cap_is_refused_from_the_fed_steps_too(monkeypatch: pytest.MonkeyPatch) -> None:
    code, trace = max(TRACES, key=lambda t: len(t[1].steps))
    streamed = Streamed(lambda: _Analysed(code, "v1", 1000), lambda t: _answer(t, code, "v1", 1000))
    streamed.feed.put(list(trace.steps))
    streamed.feed.settle(trace)
    ruled: list[int] = []
    monkeypatch.setattr(diagnostics, "_findings", lambda context: ruled.append(1) or [])
    status, body = streamed.consume()
    assert streamed.used and status == 413 and '"format": "delta"' in body.replace('\\"', '"')
    assert not ruled  # refused before any rule ran for an answer that is not sent


@pytest.mark.parametrize("every", [1, 2, 5])
def test_the_steps_written_as_they_come_make_the_answer_of_the_whole_trace(
        monkeypatch: pytest.MonkeyPatch, every: int) -> None:
    """The delta answer's steps are written as JSON while the run goes on, a few at a time: the
    answer is still, byte for byte, the one written of the whole trace."""
    monkeypatch.setattr(api, "DUMP_EVERY", every)
    for code, trace in sorted(TRACES, key=lambda t: -len(t[1].steps))[:6]:
        streamed = Streamed(lambda code=code: _Analysed(code, "delta", LIMIT),
                            lambda t, code=code: _answer(t, code, "delta", LIMIT))
        for frame in _frames(trace):
            streamed.feed.put(frame)
        streamed.feed.settle(trace)
        answer = streamed.consume()
        assert streamed.used
        assert answer == _answer(trace, code, "delta", LIMIT)


@pytest.mark.parametrize("every", [1, 3])
def test_a_large_answer_compressed_as_it_is_written_decodes_to_the_answer(
        monkeypatch: pytest.MonkeyPatch, every: int) -> None:
    """For a client that takes gzip, the steps are compressed as they are written (past
    ``DUMP_EVERY``): one gzip member, which gzip, zlib and httpx's decoder read as the very answer."""
    monkeypatch.setattr(api, "DUMP_EVERY", every)
    compressed = 0
    for code, trace in sorted(TRACES, key=lambda t: -len(t[1].steps))[:6]:
        streamed = Streamed(lambda code=code: _Analysed(code, "delta", LIMIT, gzip=True),
                            lambda t, code=code: _answer(t, code, "delta", LIMIT))
        for frame in _frames(trace):
            streamed.feed.put(frame)
        streamed.feed.settle(trace)
        status, body = streamed.consume()
        expected = _answer(trace, code, "delta", LIMIT)[1].encode()
        if not isinstance(body, Gzipped):  # fewer steps than a batch: left to the middleware
            assert len(trace.steps) < every and body.encode() == expected
            continue
        compressed += 1
        assert status == 200 and gzip.decompress(body) == expected
        inflate = zlib.decompressobj(16 + zlib.MAX_WBITS)
        assert inflate.decompress(body) == expected and inflate.eof and not inflate.unused_data
        assert httpx.Response(200, headers={"Content-Encoding": "gzip"}, content=body).content == expected
    assert compressed


def test_gzipped_answers_go_out_as_they_are_with_their_encoding() -> None:
    response = _json(Gzipped(gzip.compress(b"{}")))
    assert response.headers["content-encoding"] == "gzip" and response.headers["vary"] == "Accept-Encoding"
    assert gzip.decompress(response.body) == b"{}"
    assert "content-encoding" not in _json("{}").headers

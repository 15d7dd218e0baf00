"""An answer's head leaves in the same write as its body's first piece (``app.serving.HeadWithBody``).

uvicorn writes the head and the body apart; a replica killed between the two writes left the proxy a
head whose body never came, which no retry can mend (tests/cluster: the replica-kill test lost such a
request). Checked on the writes the server hands its transport: what one ``send`` would carry."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from uvicorn.config import Config
from uvicorn.server import ServerState

from app.serving import BoundedH11Protocol
from tests.loop_support import run_in_own_loop

BODY = b'{"id": "abc", "code": "x = 1"}'


class Recorder(asyncio.Transport):
    """The transport the protocol writes to: every write kept apart, as the socket would get it."""

    def __init__(self) -> None:
        super().__init__()
        self.writes: list[bytes] = []
        self.closed = False

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if data:  # an empty write sends nothing (asyncio returns at once)
            self.writes.append(bytes(data))

    def close(self) -> None:
        self.closed = True

    def is_closing(self) -> bool:
        return self.closed

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"peername": ("127.0.0.1", 50000), "sockname": ("127.0.0.1", 8000)}.get(name, default)

    def pause_reading(self) -> None: ...

    def resume_reading(self) -> None: ...

    def get_write_buffer_size(self) -> int:
        return 0


async def answer(app: Any, request: bytes) -> Recorder:
    """``request`` through the server's protocol to ``app``; the writes once the app has ended."""
    config = Config(app, lifespan="off", access_log=False)
    protocol = BoundedH11Protocol(config=config, server_state=ServerState(), app_state={})
    transport = Recorder()
    protocol.connection_made(transport)
    protocol.data_received(request)
    for _ in range(100):  # the app's task runs on this loop: let it end
        await asyncio.sleep(0)
        if not protocol.tasks:
            break
    protocol.connection_lost(None)
    return transport


def app_sending(*messages: dict[str, Any], fail: bool = False) -> Any:
    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        for message in messages:
            await send(message)
            await asyncio.sleep(0)  # what lies between the messages: middlewares, other tasks
        if fail:
            raise RuntimeError("the app failed after starting its answer")
    return app


START = {"type": "http.response.start", "status": 200,
         "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(BODY)).encode())]}
GET = b"GET /api/links/abc HTTP/1.1\r\nhost: x\r\n\r\n"


def test_a_small_answer_is_one_write() -> None:
    app = app_sending(START, {"type": "http.response.body", "body": BODY})
    sent = run_in_own_loop(answer(app, GET)).writes
    assert len(sent) == 1, sent
    assert sent[0].startswith(b"HTTP/1.1 200 OK\r\n") and sent[0].endswith(b"\r\n\r\n" + BODY)


def test_a_body_in_pieces_carries_the_head_with_its_first() -> None:
    pieces = [BODY[:10], BODY[10:20], BODY[20:]]
    messages = [{"type": "http.response.body", "body": p, "more_body": i < 2} for i, p in enumerate(pieces)]
    sent = run_in_own_loop(answer(app_sending(START, *messages), GET)).writes
    assert sent[0].startswith(b"HTTP/1.1 200 OK\r\n") and sent[0].endswith(b"\r\n\r\n" + pieces[0])
    assert sent[1:] == pieces[1:]


@pytest.mark.parametrize("request_line", [b"HEAD /api/links/abc HTTP/1.1", b"GET /api/links/abc HTTP/1.1"])
def test_an_answer_without_body_bytes_still_sends_its_head(request_line: bytes) -> None:
    start = {**START, "status": 204, "headers": []} if request_line.startswith(b"GET") else START
    sent = run_in_own_loop(answer(app_sending(start, {"type": "http.response.body", "body": b""}),
                                  request_line + b"\r\nhost: x\r\n\r\n")).writes
    assert len(sent) == 1 and sent[0].startswith(b"HTTP/1.1 "), sent
    assert sent[0].endswith(b"\r\n\r\n")


def test_an_app_failing_after_its_head_closes_with_the_head_sent_as_before() -> None:
    transport = run_in_own_loop(answer(app_sending(START, fail=True), GET))
    assert transport.closed
    assert len(transport.writes) == 1 and transport.writes[0].startswith(b"HTTP/1.1 200 OK\r\n")


def test_two_requests_on_one_connection_each_get_one_write() -> None:
    app = app_sending(START, {"type": "http.response.body", "body": BODY})
    sent = run_in_own_loop(answer(app, GET + GET)).writes
    assert [w.startswith(b"HTTP/1.1 200 OK\r\n") and w.endswith(BODY) for w in sent] == [True, True], sent

"""Length-prefixed frames: 4 bytes big-endian length, then UTF-8 JSON.

A run's answer is a stream of them (``app.sandbox.child.ResultStream``): frames of steps (JSON
arrays) as the run makes them, then the envelope (a JSON object without steps), then EOF.
``read_answer`` reads them (``app.sandbox.runner.AnswerReader`` makes the trace).

An answer's frames are at most ``FRAME_MAX`` bytes each: the server holds one frame's parsed JSON
at a time, so that is what a child decides, however large its answer (a parse holds ~20-35 bytes
a byte before a single step is checked). A step larger than a frame travels in parts, the frames
that end with a part that goes on flagged ``CONTINUED`` in their header.
"""

from __future__ import annotations

import json
import os
import select
import struct
import time
from collections.abc import Callable

HEADER = struct.Struct(">I")
FRAME_MAX = 1 << 20  # the largest frame of an answer the server reads
# A step's fields that are collections of facts: a step larger than a frame shares them out among
# its parts (``app.sandbox.child``), which the server joins back (``app.sandbox.runner.joined``).
SPLIT_FIELDS = ("variables", "tensors", "storages", "nodes", "arrays")
CONTINUED = 1 << 31  # header bit of an answer's frame: its last step goes on in the next frame


def encode_frame(payload: bytes, continued: bool = False) -> bytes:
    return HEADER.pack(len(payload) | (CONTINUED if continued else 0)) + payload


class FrameError(ValueError):
    """The worker's output is not exactly one well-formed frame."""


def decode_frame(data: bytes, max_bytes: int) -> bytes:
    if len(data) < HEADER.size:
        raise FrameError("the worker sent no result")
    (length,) = HEADER.unpack_from(data)
    if length > max_bytes:
        raise FrameError(f"the result is larger than {max_bytes} bytes")
    body = data[HEADER.size :]
    if len(body) != length:
        raise FrameError("the worker's result frame is truncated or has trailing bytes")
    return body


# Raw-descriptor helpers: the child writes with blocking I/O; the server reads against a deadline
# (its descriptors are non-blocking) so that a silent or flooding child cannot hold it.


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def read_exact(fd: int, size: int) -> bytes:
    chunks: list[bytes] = []
    while size:
        chunk = os.read(fd, min(size, 1 << 20))
        if not chunk:
            raise FrameError("the stream ended inside a frame")
        chunks.append(chunk)
        size -= len(chunk)
    return b"".join(chunks)


def read_frame(fd: int, max_bytes: int) -> bytes:
    """One frame from a blocking descriptor (the child reading its job)."""
    (length,) = HEADER.unpack(read_exact(fd, HEADER.size))
    if length > max_bytes:
        raise FrameError(f"frame of {length} bytes is larger than {max_bytes}")
    return read_exact(fd, length)


class Deadline(Exception):
    """The peer did not answer in time."""


def _wait(fd: int, events: int, deadline: float) -> None:
    poller = select.poll()
    poller.register(fd, events)
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise Deadline
        if poller.poll(remaining * 1000):
            return


def read_frame_before(fd: int, max_bytes: int, deadline: float) -> bytes:
    """Exactly one frame from a non-blocking descriptor, or ``Deadline``/``FrameError``."""
    header = _read_before(fd, HEADER.size, deadline)
    (length,) = HEADER.unpack(header)
    if length > max_bytes:
        raise FrameError(f"frame of {length} bytes is larger than {max_bytes}")
    return _read_before(fd, length, deadline)


def _read_before(fd: int, size: int, deadline: float) -> bytes:
    chunks: list[bytes] = []
    while size:
        _wait(fd, select.POLLIN, deadline)
        try:
            chunk = os.read(fd, min(size, 1 << 20))
        except BlockingIOError:
            continue
        if not chunk:
            raise FrameError("the stream ended inside a frame")
        chunks.append(chunk)
        size -= len(chunk)
    return b"".join(chunks)


def read_to_eof(fd: int, cap: int, deadline: float) -> tuple[bytes, str | None]:
    """Everything until EOF. Stops early with ``"deadline"`` or ``"too_big"`` (more than ``cap`` bytes)."""
    chunks: list[bytes] = []
    total = 0
    while True:
        try:
            _wait(fd, select.POLLIN, deadline)
        except Deadline:
            return b"".join(chunks), "deadline"
        try:
            chunk = os.read(fd, 1 << 20)
        except BlockingIOError:
            continue
        if not chunk:
            return b"".join(chunks), None
        chunks.append(chunk)
        total += len(chunk)
        if total > cap:
            return b"".join(chunks), "too_big"


def write_before(fd: int, data: bytes, deadline: float) -> None:
    view = memoryview(data)
    while view:
        _wait(fd, select.POLLOUT, deadline)
        try:
            written = os.write(fd, view)
        except BlockingIOError:
            continue
        view = view[written:]


ANSWER_KEYS = frozenset({"format", "ok", "truncated", "error"})


OnSteps = Callable[[bytes, bool], None]  # a frame of steps, and whether its last step goes on


def read_answer(fd: int, max_bytes: int, deadline: float, on_steps: OnSteps | None = None,
                ) -> tuple[bytes, str | None, bytes | None]:
    """A run's answer, its frames read until EOF: each frame of steps (a JSON array) handed to
    ``on_steps`` as it arrives, with whether its last step goes on in the next frame
    (``app.sandbox.runner.AnswerReader``, which must raise nothing), then the envelope's bytes,
    returned last (and no other bytes: the reader has the steps).

    Stops early with ``"deadline"`` or ``"too_big"`` (more than ``max_bytes`` in all), as
    ``read_to_eof``. A stream that is not frames of steps of at most ``FRAME_MAX`` bytes and then one
    envelope gives back the bytes as read (not the body of a frame past ``FRAME_MAX``), which
    ``decode_frame`` rejects, and no envelope."""
    raw: list[bytes] = []
    total = 0
    while True:
        try:
            header = _read_before(fd, HEADER.size, deadline)
        except Deadline:
            return b"".join(raw), "deadline", None
        except FrameError:  # EOF before an envelope (or inside a header)
            return b"".join(raw), None, None
        (word,) = HEADER.unpack(header)
        length, continued = word & ~CONTINUED, bool(word & CONTINUED)
        if length > FRAME_MAX:  # not read: no honest child writes one
            return b"".join((*raw, header)), None, None
        total += length
        if total > max_bytes:
            return b"".join(raw), "too_big", None
        try:
            body = _read_before(fd, length, deadline)
        except Deadline:
            return b"".join(raw), "deadline", None
        except FrameError:
            return b"".join((*raw, header)), None, None
        raw += (header, body)
        if body[:1] == b"[" and body[-1:] == b"]":
            if on_steps is not None and body[1:-1].strip():
                on_steps(body, continued)
            continue
        rest, stopped = read_to_eof(fd, max_bytes - total, deadline)
        if stopped or rest or continued or not _is_envelope(body):
            return b"".join((*raw, rest)), stopped, None
        return b"", None, body


def _is_envelope(body: bytes) -> bool:
    """A JSON object of the envelope's keys only (so the steps the reader adds are the only ones)."""
    try:
        value = json.loads(body)
    except (ValueError, RecursionError):
        return False
    return isinstance(value, dict) and value.keys() <= ANSWER_KEYS

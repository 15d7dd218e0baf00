"""One length-prefixed frame per run: 4 bytes big-endian length, then UTF-8 JSON."""

from __future__ import annotations

import os
import select
import struct
import time

HEADER = struct.Struct(">I")


def encode_frame(payload: bytes) -> bytes:
    return HEADER.pack(len(payload)) + payload


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

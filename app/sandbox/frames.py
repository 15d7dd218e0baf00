"""One length-prefixed frame per run: 4 bytes big-endian length, then UTF-8 JSON."""

from __future__ import annotations

import struct

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

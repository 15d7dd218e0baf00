"""A gzip body made of parts compressed apart, at different times: a large answer's steps are
compressed while the run goes on (``app.web.api``), its head and its end once it is over, and the
parts are joined into one gzip member (RFC 1952) — what ``GZipMiddleware`` would have written after
the run, in one piece, for 25-50 ms of a 3-5 MB answer.

Each part but the last is raw deflate ended by a sync flush: byte-aligned, no block marked final,
no reference into another part, so parts compressed apart are one deflate stream when joined (as
pigz joins its threads' parts). The member's CRC-32 and size are of the whole text, in order.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterable

# gzip magic, deflate, no flags, no modification time, no extra flags, OS unknown
HEADER = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff"
LEVEL = 5  # app.web.main's GZipMiddleware's: the same size as the answers it compresses


class Gzipped(bytes):
    """A body that is gzip-encoded already (``Content-Encoding: gzip``; the middleware passes it on)."""


class Part:
    """Text compressed as it is given (``add``), into one part of a member (``end``)."""

    def __init__(self) -> None:
        self._compressor = zlib.compressobj(LEVEL, zlib.DEFLATED, -zlib.MAX_WBITS)
        self._out: list[bytes] = []

    def add(self, text: bytes) -> None:
        self._out.append(self._compressor.compress(text))

    def end(self, last: bool = False) -> bytes:
        """The part's bytes; ``last``: it ends the member (its final block)."""
        self._out.append(self._compressor.flush(zlib.Z_FINISH if last else zlib.Z_SYNC_FLUSH))
        out, self._out = b"".join(self._out), []
        return out


def part(text: bytes, last: bool = False) -> bytes:
    """``text`` compressed as one part."""
    made = Part()
    made.add(text)
    return made.end(last)


def member(parts: Iterable[bytes], texts: Iterable[bytes]) -> Gzipped:
    """The gzip member of ``parts`` (the last ended with ``last=True``), which compress ``texts``,
    in order."""
    crc = size = 0
    for text in texts:
        crc = zlib.crc32(text, crc)
        size += len(text)
    return Gzipped(HEADER + b"".join(parts) + struct.pack("<II", crc, size & 0xFFFFFFFF))

"""Permalink tokens: deflate-raw + base64url, made by the browser, read by the server."""

from __future__ import annotations

import base64
import zlib

import pytest

from app.web.permalink import PermalinkError, decode_code, encode_code


@pytest.mark.parametrize("code", ["", "x = torch.ones(3)\n", "print('héllo → ∂')\n" * 50, "a" * 20000])
def test_round_trip(code: str) -> None:
    token = encode_code(code)
    assert set(token) <= set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")
    assert decode_code(token, 20 * 1024) == code


def test_reads_tokens_made_elsewhere_with_raw_deflate() -> None:
    compressor = zlib.compressobj(1, zlib.DEFLATED, -15)  # another level, as CompressionStream may use
    raw = compressor.compress(b"y = x.t()\n") + compressor.flush()
    assert decode_code(base64.urlsafe_b64encode(raw).decode().rstrip("="), 1024) == "y = x.t()\n"


def test_a_bomb_stops_at_the_limit() -> None:
    token = encode_code("0" * 10_000_000)  # about 10 KB of token
    with pytest.raises(PermalinkError, match="longer than 20 KB"):
        decode_code(token, 20 * 1024)


@pytest.mark.parametrize("token", ["***", "AAAA", encode_code("abc")[:-3], base64.urlsafe_b64encode(
    zlib.compress(b"zlib header, not raw")).decode()])
def test_garbage_is_refused_with_a_reason(token: str) -> None:
    with pytest.raises(PermalinkError):
        decode_code(token, 1024)


def test_non_utf8_is_refused() -> None:
    compressor = zlib.compressobj(9, zlib.DEFLATED, -15)
    raw = compressor.compress(b"\xff\xfe") + compressor.flush()
    with pytest.raises(PermalinkError, match="UTF-8"):
        decode_code(base64.urlsafe_b64encode(raw).decode(), 1024)

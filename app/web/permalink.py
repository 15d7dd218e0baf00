"""The code in a permalink: raw DEFLATE (RFC 1951) of the UTF-8 source, in unpadded base64url.

The browser makes it with ``CompressionStream("deflate-raw")`` (static/src/permalink.js) and the server
reads it with the standard library, so the page, the embed mode and the SVG export all open the
same URLs: ``/?code=<token>&step=<n>`` (``step`` counts from 1).
"""

from __future__ import annotations

import base64
import binascii
import zlib

from app.i18n import gettext as _

MAX_TOKEN_CHARS = 64 * 1024


class PermalinkError(ValueError):
    """The token is not one this module (or the page) made, or it expands past the limit."""


def encode_code(code: str) -> str:
    compressor = zlib.compressobj(9, zlib.DEFLATED, -15)
    raw = compressor.compress(code.encode("utf-8")) + compressor.flush()
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def decode_code(token: str, max_bytes: int) -> str:
    """The source a token carries; refuses more than ``max_bytes`` of it (a zip bomb stops early)."""
    if len(token) > MAX_TOKEN_CHARS:
        raise PermalinkError(_("The link is too long."))
    try:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
    except (binascii.Error, ValueError):
        raise PermalinkError(_("The link's code is not valid base64url.")) from None
    inflater = zlib.decompressobj(-15)
    try:
        data = inflater.decompress(raw, max_bytes + 1)
    except zlib.error:
        raise PermalinkError(_("The link's code is not valid compressed data.")) from None
    if len(data) > max_bytes or inflater.unconsumed_tail:
        raise PermalinkError(_("The link's code is longer than {kb} KB.").format(kb=max_bytes // 1024))
    if not inflater.eof:
        raise PermalinkError(_("The link's code is cut short."))
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise PermalinkError(_("The link's code is not UTF-8 text.")) from None


def decode_pair(token: str, compare_token: str, max_bytes: int) -> tuple[str, str]:
    """The two codes of a compare link (``code`` and ``compare_code``); the error names the broken one."""
    codes = []
    for name, each in (("code", token), ("compare_code", compare_token)):
        try:
            codes.append(decode_code(each, max_bytes))
        except PermalinkError as error:
            raise PermalinkError(f"{name}: {error}") from None
    return codes[0], codes[1]

"""Normalise and check a snippet before it is stored: what makes "same code, same id" hold."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from app.i18n import gettext as _


class InvalidSnippet(ValueError):
    """The snippet cannot be stored; ``status`` is the HTTP status that says why."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass(frozen=True)
class Snippet:
    code: str  # normalised
    digest: bytes  # SHA-256 of the normalised code's UTF-8 bytes


def normalise(code: str) -> str:
    """Line endings to LF, no byte-order mark, no trailing whitespace at the end, one final newline.

    Only changes that cannot alter what the snippet does or which line numbers its steps carry:
    an editor on Windows and one on Linux must produce the same link.
    """
    code = code.removeprefix("\ufeff").replace("\r\n", "\n").replace("\r", "\n")
    code = code.rstrip()
    return code + "\n" if code else ""


def prepare_snippet(code: str, max_bytes: int) -> Snippet:
    """Normalise ``code`` and check it can be stored; raise ``InvalidSnippet`` with a clear message."""
    try:
        code.encode("utf-8")
    except UnicodeEncodeError:
        # A JSON body can carry lone surrogates ("\ud800"), which are not text.
        raise InvalidSnippet(400, _("The snippet is not valid UTF-8 text.")) from None
    if "\x00" in code:
        # Python refuses to compile it, and PostgreSQL cannot store it in a text column.
        raise InvalidSnippet(422, _("The snippet contains a NUL character."))
    code = normalise(code)
    if not code:
        raise InvalidSnippet(422, _("The snippet is empty."))
    data = code.encode("utf-8")
    if len(data) > max_bytes:
        raise InvalidSnippet(413, _("The snippet is longer than {kb} KB ({size} bytes).").format(
            kb=max_bytes // 1024, size=len(data)))
    return Snippet(code=code, digest=hashlib.sha256(data).digest())

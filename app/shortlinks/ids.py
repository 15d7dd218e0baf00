"""Short-link ids: a prefix of the base32 of a 256-bit digest of the normalised code (the store's
keyed hash of its SHA-256, ``app.shortlinks.store``).

Lower-case RFC 4648 base32 (a-z, 2-7) survives URLs, case-folding tools and being read aloud.
Ten characters (50 bits) keep links short; when a prefix is already taken by *other* code, the
next longer prefix is used, so a collision never overwrites or mixes up two snippets.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Iterator

DEFAULT_LENGTH = 10
FULL_LENGTH = 52  # 256 bits in base32, padding dropped
ID_PATTERN = re.compile(r"[a-z2-7]{1,52}")


def full_id(digest: bytes) -> str:
    return base64.b32encode(digest).decode("ascii").rstrip("=").lower()


def candidates(digest: bytes, length: int = DEFAULT_LENGTH) -> Iterator[str]:
    """Ids to try in order: the short prefix first, then ever longer ones."""
    whole = full_id(digest)
    for size in range(max(1, length), FULL_LENGTH + 1):
        yield whole[:size]


def is_valid_id(link_id: str) -> bool:
    return ID_PATTERN.fullmatch(link_id) is not None

"""The one reader of a posted form (``application/x-www-form-urlencoded``): the page's run, the
embed's, the compare's edit and the reader's Stop all read their bodies here, under a byte bound
the caller gives, and never keep more than the fields any of them sends."""

from __future__ import annotations

from urllib.parse import parse_qs

from fastapi import Request

TOO_LONG = "__too_long__"  # the body went past the bound: it was not read further
BAD_FORM = "__bad_form__"  # more fields than any form of ours sends
MAX_FIELDS = 8


async def read_form(request: Request, limit: int) -> dict[str, str]:
    """The posted fields (the first value of each), or ``{TOO_LONG: "1"}`` / ``{BAD_FORM: "1"}``."""
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > limit:
            return {TOO_LONG: "1"}
    try:
        fields = parse_qs(body.decode("utf-8", errors="replace"), keep_blank_values=True,
                          max_num_fields=MAX_FIELDS)
    except ValueError:
        return {BAD_FORM: "1"}
    return {key: values[0] for key, values in fields.items()}

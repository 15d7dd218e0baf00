"""The language of each request, and the switch that remembers the reader's choice.

One ASGI middleware, outermost, so every answer (pages, fragments, the SVG, the JSON of the API and
the 413/408 of ``app.web.limits``) is made under the request's locale: ``lang=`` in the URL, else
the ``lang`` cookie the switch sets, else ``Accept-Language``, else English (``app.i18n.negotiate``).
It also leaves the request no other cookie than that one (``_only_our_cookie``).
The JSON API keeps its English ``RunError.message`` whatever the locale: translations come from
``code`` + ``params`` where a trace is drawn.

``GET /lang/<tag>`` is the switch: it remembers the choice for a year and sends the reader back to
the page they were on (``next=``, else the referrer; a path on this site only), without ``lang=`` in
it, so the choice shows at once. The playground keeps its permalink in the address bar, so the code
and the step on screen come back too (and unrun edits are in the browser's drafts).
"""

from __future__ import annotations

from urllib.parse import parse_qsl, urlencode, urlsplit

from fastapi import APIRouter, Request
from fastapi.responses import RedirectResponse, Response
from starlette.types import ASGIApp, Receive, Scope, Send

from app import i18n
from app.web.limits import MAX_QUERY_FIELDS

SCOPE_KEY = "explorer.locale"
router = APIRouter()


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope.get("headers", ()):
        if key == name:
            return value.decode("latin-1")
    return None


def _cookie(scope: Scope) -> str | None:
    """The ``lang`` cookie's value, read in one pass over the header (``None``: none, or not a tag).

    The switch writes the value itself (``en``, ``zh-CN``): a value in quotes is taken as it is
    inside them, with no unquoting, and one longer than a language tag is no choice at all."""
    raw = _header(scope, b"cookie")
    if not raw:
        return None
    for part in raw.split(";"):
        name, equals, value = part.partition("=")
        if equals and name.strip() == i18n.COOKIE:
            value = value.strip()
            if len(value) >= 2 and value[0] == value[-1] == '"':
                value = value[1:-1]
            return value if len(value) <= i18n.MAX_TAG else None
    return None


def _only_our_cookie(scope: Scope, lang: str | None) -> None:
    """The request's ``Cookie`` header, from here in, is ``lang=<tag>`` or nothing: the only cookie
    this server reads. FastAPI parses the whole header on every route (Starlette's
    ``request.cookies``), unquoting each value with ``http.cookies``, which on Python < 3.11.10 is
    quadratic in backslashes (CVE-2024-7592): one header of 15,000 of them held the event loop for
    a second per request. Cookies set by other software on the same host are of no use here."""
    headers = scope.get("headers", ())
    if not any(key == b"cookie" for key, _ in headers):
        return
    kept = [(key, value) for key, value in headers if key != b"cookie"]
    if lang is not None and lang.replace("-", "").replace("_", "").isalnum():
        kept.append((b"cookie", f"{i18n.COOKIE}={lang}".encode("latin-1")))
    scope["headers"] = kept


def _query_lang(scope: Scope) -> str | None:
    query = scope.get("query_string", b"").decode("latin-1")
    if "lang=" not in query:
        return None
    for key, value in parse_qsl(query, keep_blank_values=True, max_num_fields=MAX_QUERY_FIELDS):
        if key == "lang":
            return value
    return None


class LocaleMiddleware:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        cookie = _cookie(scope)
        _only_our_cookie(scope, cookie)
        accept = _header(scope, b"accept-language")
        try:
            locale = i18n.negotiate(_query_lang(scope), cookie, accept)
        except ValueError:  # too many query fields: app.web.limits refuses them, in the reader's language
            locale = i18n.negotiate(None, cookie, accept)
        scope[SCOPE_KEY] = locale
        with i18n.use_locale(locale):
            await self.app(scope, receive, send)


def _local(target: str) -> str:
    """``target`` when it is a path on this site, else ``/``; its ``lang=`` removed."""
    if not target.startswith("/") or target.startswith("//") or "\\" in target or len(target) > 16384:
        return "/"
    parts = urlsplit(target)
    if parts.scheme or parts.netloc:
        return "/"
    query = [(k, v) for k, v in parse_qsl(parts.query, keep_blank_values=True) if k != "lang"]
    return parts.path + ("?" + urlencode(query) if query else "")


def _same_site(referer: str, request: Request) -> str:
    """The path and query of a referrer on this site, else ``/``."""
    parts = urlsplit(referer)
    if not parts.netloc or parts.netloc != request.headers.get("host"):
        return "/"
    return parts.path + (f"?{parts.query}" if parts.query else "")


@router.get("/lang/{tag}", include_in_schema=False)
async def switch_language(tag: str, request: Request) -> Response:
    """The language switch: remember ``tag`` and go back to ``next``."""
    locale = i18n.parse_tag(tag)
    if locale is None:
        return Response("Unknown language: use en or zh-CN.", status_code=404, media_type="text/plain")
    back = request.query_params.get("next") or _same_site(request.headers.get("referer", ""), request)
    answer = RedirectResponse(_local(back), status_code=303)
    answer.set_cookie(i18n.COOKIE, i18n.TAGS[locale], max_age=i18n.COOKIE_MAX_AGE, path="/", samesite="lax")
    return answer

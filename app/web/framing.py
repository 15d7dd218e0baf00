"""Who may put our pages in a frame: other sites may frame ``/embed`` (and its fragments), nothing else.

One ASGI middleware decides it for every response, so a new route cannot forget it: it adds the
``frame-ancestors`` directive to the response's Content-Security-Policy (or starts one), and
``X-Frame-Options: DENY`` where framing is refused (for browsers that predate ``frame-ancestors``).
A route's own CSP (``default-src 'self'`` …) is kept as it is.
"""

from __future__ import annotations

from starlette.datastructures import MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

EMBED_PREFIX = "/embed"
ANYONE = "frame-ancestors *"
NOBODY = "frame-ancestors 'none'"


def may_be_framed(path: str) -> bool:
    """``/embed`` and everything under ``/embed/`` (never ``/embedded`` or the like)."""
    return path == EMBED_PREFIX or path.startswith(EMBED_PREFIX + "/")


def with_frame_ancestors(csp: str, directive: str) -> str:
    """``csp`` with its ``frame-ancestors`` directive replaced by (or extended with) ``directive``."""
    kept = [part.strip() for part in csp.split(";") if part.strip()]
    kept = [part for part in kept if part.split()[0].lower() != "frame-ancestors"]
    return "; ".join([*kept, directive])


class FramingPolicy:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        framable = may_be_framed(scope.get("path", ""))

        async def send_with_policy(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                csp = headers.get("content-security-policy", "")
                headers["Content-Security-Policy"] = with_frame_ancestors(csp, ANYONE if framable else NOBODY)
                if framable:
                    if "x-frame-options" in headers:
                        del headers["x-frame-options"]
                else:
                    headers["X-Frame-Options"] = "DENY"
            await send(message)

        await self.app(scope, receive, send_with_policy)

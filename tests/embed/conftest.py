"""Fixtures for the embed tests: the app with its default runner, and a second origin for the browser.

The API tests run the real app (``create_app`` with the default sandboxed runner, as served) in a
TestClient; the browser tests reuse tests/ui's real server and Debian's chromium, and serve the
"docs page" that embeds the explorer from a second local HTTP server on another port (another
origin, as a docs site is).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from fastapi.testclient import TestClient

from app.config import Settings
from app.web.main import create_app


@pytest.fixture(scope="session")
def client(tmp_path_factory) -> Iterator[TestClient]:
    settings = Settings(data_dir=tmp_path_factory.mktemp("embed-data"))
    with TestClient(create_app(settings)) as test_client:
        yield test_client


class DocsSite:
    """A static site on another port: ``pages[path]`` is served as HTML at ``url + path``."""

    def __init__(self) -> None:
        self.pages: dict[str, str] = {}
        site = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                body = site.pages.get(self.path.split("?")[0])
                data = (body or "not found").encode()
                self.send_response(200 if body is not None else 404)
                self.send_header("Content-Type", "text/html; charset=utf-8")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args) -> None:  # quiet
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        # "localhost", not 127.0.0.1: another site, not only another origin, as a real docs host is
        self.url = f"http://localhost:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture(scope="session")
def docs_site() -> Iterator[DocsSite]:
    site = DocsSite()
    yield site
    site.close()

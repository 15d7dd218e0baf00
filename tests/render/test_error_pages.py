"""The one error page: a link the playground cannot open answers it with the right status, says why,
quotes the address as given (no redirect: the address bar keeps it) and offers a way on."""

from __future__ import annotations

import json
import re
from html import unescape
from urllib.parse import quote

import pytest
from fastapi.testclient import TestClient

from app.config import Settings
from app.gallery import EXAMPLES
from app.web.main import create_app
from app.web.permalink import encode_code


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    with TestClient(create_app(Settings(data_dir=tmp_path_factory.mktemp("links")))) as test_client:
        yield test_client


@pytest.mark.parametrize(("address", "status", "words"), [
    ("/?example=nope", 404, "no example called 'nope'"),
    ("/?code=not-a-token!", 400, "not valid base64url"),
    ("/?code=" + encode_code("x = 1\n")[:-3], 400, "cut short"),
    ("/?s=aaaaaaaaaa", 404, "does not exist here"),
    ("/s/aaaaaaaaaa", 404, "does not exist"),
])
def test_a_link_that_cannot_be_opened_gets_the_error_page(client: TestClient, address: str, status: int,
                                                          words: str) -> None:
    response = client.get(address, follow_redirects=False)
    assert response.status_code == status
    assert response.headers["content-type"].startswith("text/html")
    assert response.headers["content-security-policy"].startswith("default-src 'self'")
    html = response.text
    assert 'data-testid="error-page"' in html and "<h1>" in html and words in unescape(html)
    assert f'<code class="error-address" data-testid="error-address">{address}</code>' in html
    assert '<a class="btn btn-primary" href="/" data-testid="error-home">' in html  # a way to the playground
    assert all(f'href="/?example={e.slug}"' in html for e in EXAMPLES)
    assert '<link rel="stylesheet" href="/static/page.css">' in html  # styled like the playground


def test_the_error_page_escapes_and_cuts_what_it_quotes(client: TestClient) -> None:
    hostile = "<script>alert(1)</script>" + "x" * 400
    response = client.get("/?example=" + quote(hostile))
    assert response.status_code == 404
    assert "<script>alert" not in response.text and "&lt;script&gt;" in response.text
    quoted = response.text.split('data-testid="error-address">')[1].split("</code>")[0]
    assert len(quoted) < 300 and quoted.endswith("…")


def test_links_without_a_source_open_the_first_example(client: TestClient) -> None:
    for address in ("/", "/?example=", "/?utm_source=docs"):
        response = client.get(address)
        assert response.status_code == 200 and f'value="{EXAMPLES[0].slug}" selected' in response.text


def test_a_short_link_keeps_its_step(client: TestClient) -> None:
    link = client.post("/api/links", json={"code": "a = torch.ones(2)\nb = a * 2\n"}).json()
    follow = client.get(link["url"] + "?step=2", follow_redirects=False)
    assert follow.status_code == 303
    location = follow.headers["location"]
    assert location.startswith("/?code=") and location.endswith("&step=2")
    page = client.get(location)
    opens = re.search(r"hx-vals='([^']*)'", page.text)
    assert opens and json.loads(opens.group(1)) == {"step": 2}  # the page's first run opens step 2
    for bad in ("0", "-1", "two", "9" * 12):
        ignored = client.get(link["url"] + "?step=" + bad, follow_redirects=False)
        assert "step=" not in ignored.headers["location"]

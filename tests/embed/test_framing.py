"""Only /embed may be framed by other sites; every other response refuses framing."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from app.gallery import EXAMPLES
from app.web.framing import may_be_framed, with_frame_ancestors
from app.web.permalink import encode_code

PAGE_CSP = "default-src 'self'"  # the playground's own policy must survive the framing directive


def frame_ancestors(response) -> str:
    csp = response.headers.get("content-security-policy", "")
    found = [part.strip() for part in csp.split(";") if part.strip().startswith("frame-ancestors")]
    assert len(found) == 1, csp  # exactly one directive: browsers use the first and ignore the rest
    return found[0]


def assert_refuses_framing(response) -> None:
    assert frame_ancestors(response) == "frame-ancestors 'none'"
    assert response.headers.get("x-frame-options") == "DENY"


def assert_may_be_framed(response) -> None:
    assert frame_ancestors(response) == "frame-ancestors *"
    assert "x-frame-options" not in response.headers


def test_embed_page_may_be_framed_and_keeps_its_csp(client: TestClient) -> None:
    response = client.get(f"/embed?code={encode_code(EXAMPLES[0].code)}")
    assert response.status_code == 200
    assert_may_be_framed(response)
    assert PAGE_CSP in response.headers["content-security-policy"]
    assert "object-src 'none'" in response.headers["content-security-policy"]


def test_embed_errors_and_fragments_may_be_framed(client: TestClient) -> None:
    assert_may_be_framed(client.get("/embed?view=nope"))
    assert_may_be_framed(client.get("/embed?s=aaaaaaaaaa"))
    assert_may_be_framed(client.post("/embed/run", data={"code": "", "view": "both"}))


def test_playground_refuses_framing_and_keeps_its_csp(client: TestClient) -> None:
    response = client.get("/")
    assert response.status_code == 200
    assert_refuses_framing(response)
    assert PAGE_CSP in response.headers["content-security-policy"]


@pytest.mark.parametrize("method, path", [
    ("GET", "/?example=clone-vs-detach"),
    ("GET", "/healthz"),
    ("GET", "/api/links/aaaaaaaaaa"),
    ("GET", "/s/aaaaaaaaaa"),
    ("GET", "/static/explorer.css"),
    ("GET", "/render.svg?view=bad"),
    ("GET", "/embedded"),  # a prefix is not a path
    ("POST", "/run"),
    ("POST", "/api/run"),
])
def test_everything_else_refuses_framing(client: TestClient, method: str, path: str) -> None:
    if method == "POST":
        response = client.post(path, json={"code": ""}) if path.startswith("/api") else client.post(path)
    else:
        response = client.get(path, follow_redirects=False)
    assert_refuses_framing(response)


def test_short_link_redirect_refuses_framing(client: TestClient) -> None:
    made = client.post("/api/links", json={"code": EXAMPLES[0].code})
    assert made.status_code == 200
    assert_refuses_framing(made)
    response = client.get(made.json()["url"], follow_redirects=False)
    assert response.status_code == 303
    assert_refuses_framing(response)


def test_policy_helpers() -> None:
    assert may_be_framed("/embed") and may_be_framed("/embed/run")
    assert not may_be_framed("/embedded") and not may_be_framed("/") and not may_be_framed("/s/embed")
    assert with_frame_ancestors("", "frame-ancestors 'none'") == "frame-ancestors 'none'"
    assert with_frame_ancestors("default-src 'self'; frame-ancestors https://a.example;",
                                "frame-ancestors *") == "default-src 'self'; frame-ancestors *"

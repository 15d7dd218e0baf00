"""The HTTP contract of short links, on both backends, through the real app (ASGI, in process)."""

from __future__ import annotations

import json
import random
import string
from collections.abc import Iterator
from urllib.parse import parse_qs, urlsplit

import pytest
from fastapi.testclient import TestClient

from app.config import Settings
from app.web.main import create_app
from app.web.permalink import decode_code


class NoRuns:
    """Short links never run code; a stub runner keeps the sandbox's start-up out of these tests."""

    async def run(self, code: str) -> None:
        raise AssertionError("short links must not run snippets")


CODE = "import torch\nx = torch.ones(2, requires_grad=True)\ny = x.clone()\nz = x.detach()\n"


@pytest.fixture
def client(backend_settings: Settings) -> Iterator[TestClient]:
    settings = backend_settings.model_copy(update={"max_code_bytes": 2048})
    with TestClient(create_app(settings, runner=NoRuns())) as test_client:
        yield test_client


def share(client: TestClient, code: str) -> tuple[int, dict]:
    response = client.post("/api/links", json={"code": code})
    return response.status_code, response.json()


def test_share_then_follow_then_read(client: TestClient) -> None:
    status, body = share(client, CODE)
    assert status == 200
    assert body["url"] == f"/s/{body['id']}"
    assert len(body["id"]) == 10

    assert share(client, CODE) == (200, body)  # same code, same id, the same answer

    follow = client.get(body["url"], follow_redirects=False)
    assert follow.status_code == 303
    # The playground's own permalink, which the page and /embed decode with app.web.permalink.
    location = urlsplit(follow.headers["location"])
    assert location.path == "/"
    assert decode_code(parse_qs(location.query)["code"][0], 2048) == CODE

    read = client.get(f"/api/links/{body['id']}")
    assert read.status_code == 200
    assert read.json() == {"id": body["id"], "code": CODE}
    assert "immutable" in read.headers["cache-control"]
    # Ids are case-insensitive for people who retype them.
    assert client.get(f"/api/links/{body['id'].upper()}").json()["code"] == CODE


def test_code_too_long_for_a_url_goes_by_id(backend_settings: Settings) -> None:
    # 20 KB that barely compresses: its permalink token would exceed what servers accept in a URL.
    rng = random.Random(5)
    code = "".join(f"s = '{''.join(rng.choices(string.ascii_letters, k=60))}'\n" for _ in range(300))
    with TestClient(create_app(backend_settings, runner=NoRuns())) as client:
        status, body = share(client, code)
        assert status == 200
        follow = client.get(body["url"], follow_redirects=False)
        assert follow.status_code == 303 and follow.headers["location"] == f"/?s={body['id']}"
        assert client.get(f"/api/links/{body['id']}").json()["code"] == code


def test_unknown_ids_are_404_as_json_and_as_a_page(client: TestClient) -> None:
    api = client.get("/api/links/aaaaaaaaaa")
    assert api.status_code == 404 and api.json() == {"detail": "No short link with this id."}

    page = client.get("/s/aaaaaaaaaa", follow_redirects=False)
    assert page.status_code == 404
    assert page.headers["content-type"].startswith("text/html")
    assert "does not exist" in page.text

    as_json = client.get("/s/aaaaaaaaaa", headers={"Accept": "application/json"}, follow_redirects=False)
    assert as_json.status_code == 404 and "does not exist" in as_json.json()["detail"]

    hostile = client.get("/s/<script>alert(1)</script>", follow_redirects=False)
    assert hostile.status_code == 404 and "<script>" not in hostile.text


def raw(client: TestClient, body: bytes, content_type: str = "application/json") -> tuple[int, str]:
    response = client.post("/api/links", content=body, headers={"Content-Type": content_type})
    return response.status_code, response.json()["detail"]


@pytest.mark.parametrize(
    ("body", "status", "words"),
    [
        (b'{"code": "x = \xff\xfe"}', 400, "not valid UTF-8"),
        (b'{"code": "x = \\ud800"}', 400, "not valid UTF-8"),
        (b'{"code": "x = 1"', 400, "not valid JSON"),
        (b"", 400, "not valid JSON"),
        (b'["x = 1"]', 422, "exactly one field"),
        (b'{"code": "x", "extra": 1}', 422, "exactly one field"),
        (b'{"code": 42}', 422, "must be a string"),
        (b'{"code": null}', 422, "must be a string"),
        (b'{"code": ""}', 422, "empty"),
        (b'{"code": " \\n\\t "}', 422, "empty"),
        (b'{"code": "x = 1\\u0000"}', 422, "NUL"),
        (b"[" * 5000 + b"]" * 5000, 400, "not valid JSON"),  # deep nesting is refused, not a crash
    ],
)
def test_garbage_is_refused_clearly(client: TestClient, body: bytes, status: int, words: str) -> None:
    got_status, detail = raw(client, body)
    assert (got_status, words in detail) == (status, True), detail


def test_too_big_is_413_both_before_and_after_decoding(client: TestClient) -> None:
    status, detail = raw(client, json.dumps({"code": "#" * 2049}).encode())
    assert status == 413 and "longer than 2 KB" in detail
    # A body far beyond any valid snippet is refused before it is parsed or even fully read.
    status, detail = raw(client, b'{"code": "' + b"#" * 200_000 + b'"}')
    assert status == 413 and "request body is larger" in detail
    # Exactly at the limit is fine.
    assert share(client, "#" * 2047 + "\n")[0] == 200


def test_wrong_content_type_is_415(client: TestClient) -> None:
    status, detail = raw(client, b'{"code": "x = 1"}', content_type="text/plain")
    assert status == 415 and "application/json" in detail


def test_sharing_is_rate_limited_per_client(backend_settings: Settings) -> None:
    settings = backend_settings.model_copy(update={"rate_burst": 2, "rate_per_minute": 1.0})
    with TestClient(create_app(settings, runner=NoRuns())) as client:
        assert [share(client, f"x = {n}")[0] for n in range(2)] == [200, 200]
        refused = client.post("/api/links", json={"code": "x = 3"})
        assert refused.status_code == 429 and int(refused.headers["retry-after"]) > 0
        assert client.get("/s/aaaaaaaaaa").status_code == 404  # reading is not limited


def test_store_outage_is_503_not_500(tmp_path) -> None:  # noqa: ANN001
    # A data folder that cannot be created (its parent is a file) stands for a broken disk.
    blocker = tmp_path / "file"
    blocker.write_text("")
    settings = Settings(data_dir=blocker / "data", database_url=None)
    with TestClient(create_app(settings, runner=NoRuns())) as client:
        response = client.post("/api/links", json={"code": "x = 1"})
        assert response.status_code == 503 and response.headers["retry-after"] == "5"
        assert str(blocker) not in response.text  # the cause is logged, not shown
        assert client.get("/s/aaaaaaaaaa", follow_redirects=False).status_code == 503
        assert client.get("/healthz").status_code == 200  # running snippets does not need the store

"""Short links cannot grow without bound, and do not say what others stored (issue 25, hole 6), on real
SQLite and real PostgreSQL: a size cap for all snippets, a quota per client and day, links never
opened expire, and sharing answers the same whether the snippet was stored already or not.

Time is the store's ``now`` argument, so expiry and the quota's day are tested without waiting."""

from __future__ import annotations

import hashlib
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from test_links_servers import server

from app.config import Settings
from app.shortlinks import Limits, LinkStore, QuotaExceeded, StoreFull, open_store, prepare_snippet
from app.shortlinks.ids import DEFAULT_LENGTH, full_id
from app.shortlinks.store import DAY
from app.web.main import create_app

MAX = 20 * 1024
T0 = 1_800_000_000.0  # a moment, in seconds since the epoch
ALICE, BOB = "192.0.2.1", "198.51.100.7"


@pytest.fixture
def bounded(backend_settings: Settings) -> Iterator[LinkStore]:
    store = open_store(backend_settings)
    store.limits = Limits(max_bytes=4000, client_bytes=2500, client_links=5, unopened_seconds=7 * DAY)
    try:
        yield store
    finally:
        store.close()


def put(store: LinkStore, code: str, client: str = ALICE, now: float = T0) -> str:
    return store.put(prepare_snippet(code, MAX), client, now)[0]


def code_of(size: int, n: int = 0) -> str:
    """A snippet of exactly ``size`` bytes (newline included)."""
    head = f"x = {n}  #"
    return head + "#" * (size - len(head) - 1) + "\n"


def test_a_client_past_its_day_is_refused_until_the_day_is_over(bounded: LinkStore) -> None:
    for n in range(5):
        put(bounded, code_of(100, n))
    with pytest.raises(QuotaExceeded) as refused:
        put(bounded, code_of(100, 5), now=T0 + 3600)
    assert refused.value.retry_after == pytest.approx(DAY - 3600)
    put(bounded, code_of(100, 5), BOB)  # another client has its own day
    put(bounded, code_of(100, 5), now=T0 + DAY + 1)  # the day is over


def test_the_quota_counts_bytes_too(bounded: LinkStore) -> None:
    put(bounded, code_of(2000, 1))
    with pytest.raises(QuotaExceeded):
        put(bounded, code_of(600, 2))
    put(bounded, code_of(500, 3))  # 2,500 bytes in all: allowed


def test_sharing_again_charges_the_same(bounded: LinkStore) -> None:
    """A snippet stored already costs the client what a new one costs: the quota tells nothing."""
    link = put(bounded, code_of(100), BOB)
    for _ in range(5):
        assert put(bounded, code_of(100)) == link
    with pytest.raises(QuotaExceeded):
        put(bounded, code_of(100))


def test_nothing_new_is_stored_past_the_cap(bounded: LinkStore) -> None:
    clients = [f"203.0.113.{n}" for n in range(8)]
    stored = [put(bounded, code_of(1000, n), clients[n]) for n in range(4)]
    assert bounded.stored_bytes() == 4000
    with pytest.raises(StoreFull):
        put(bounded, code_of(10, 9), clients[5])
    assert put(bounded, code_of(1000, 0), clients[6]) == stored[0]  # what is stored is still shared
    assert bounded.stored_bytes() == 4000


def test_never_opened_links_expire_and_opened_ones_stay(bounded: LinkStore) -> None:
    opened, unopened, shared_again = (put(bounded, code_of(300, n), f"203.0.113.{n}") for n in range(3))
    assert bounded.get(opened, now=T0 + 60) == code_of(300, 0)
    put(bounded, code_of(300, 2), "203.0.113.9", now=T0 + 6 * DAY)  # shared again: its time starts again
    put(bounded, code_of(50, 7), BOB, now=T0 + 7 * DAY + 1)  # a share sweeps what expired
    assert bounded.get(unopened, now=T0 + 7 * DAY + 2) is None
    assert bounded.get(opened, now=T0 + 7 * DAY + 2) == code_of(300, 0)
    assert bounded.get(shared_again, now=T0 + 7 * DAY + 2) == code_of(300, 2)
    assert bounded.stored_bytes() == 300 + 300 + 50


def test_expired_links_make_room_in_a_full_store(bounded: LinkStore) -> None:
    for n in range(4):
        put(bounded, code_of(1000, n), f"203.0.113.{n}")
    with pytest.raises(StoreFull):
        put(bounded, code_of(1000, 5), BOB, now=T0 + DAY)
    put(bounded, code_of(1000, 5), BOB, now=T0 + 8 * DAY)  # all four expired, never opened
    assert bounded.stored_bytes() == 1000


def test_ids_are_keyed_by_the_store(backend_settings: Settings, tmp_path: Path) -> None:
    """No one can work out a snippet's id (and ask whether it is stored) without sharing it: the id is
    not the bare SHA-256's; replicas on one database share the key, another store has its own."""
    code = "import torch\nx = torch.ones(3)\n"
    first, second = open_store(backend_settings), open_store(backend_settings)
    other = open_store(Settings(data_dir=tmp_path / "elsewhere"))
    try:
        link = put(first, code)
        assert link != full_id(hashlib.sha256(code.encode()).digest())[:DEFAULT_LENGTH]
        assert put(second, code, BOB) == link
        assert put(other, code) != link
    finally:
        for store in (first, second, other):
            store.close()


def test_one_answer_whether_stored_or_not(backend_settings: Settings) -> None:
    with TestClient(create_app(backend_settings, runner=None)) as client:
        first = client.post("/api/links", json={"code": "y = torch.zeros(2)\n"})
        again = client.post("/api/links", json={"code": "y = torch.zeros(2)\n"})
    assert (first.status_code, first.json()) == (again.status_code, again.json())
    assert first.status_code == 200
    drop = {"date"}
    assert {k: v for k, v in first.headers.items() if k not in drop} == \
        {k: v for k, v in again.headers.items() if k not in drop}


def test_the_answers_say_what_happened(backend_settings: Settings) -> None:
    settings = backend_settings.model_copy(update={"links_client_links": 2, "links_max_bytes": 60})
    with TestClient(create_app(settings, runner=None)) as client:
        assert client.post("/api/links", json={"code": "a = 1\n"}).status_code == 200
        full = client.post("/api/links", json={"code": "b = " + "2" * 80 + "\n"})
        assert full.status_code == 507 and "no more short links" in full.json()["detail"]
        assert client.post("/api/links", json={"code": "c = 3\n"}).status_code == 200
        over = client.post("/api/links", json={"code": "d = 4\n"}, headers={"Accept-Language": "zh-CN"})
        assert over.status_code == 429 and 0 < int(over.headers["retry-after"]) <= DAY
        assert "2 个链接" in over.json()["detail"]


def test_an_older_table_is_brought_up_to_date(tmp_path: Path) -> None:
    """Links stored before the bounds stay readable, count in the total, and are kept (as opened)."""
    path = tmp_path / "data" / "links.sqlite3"
    path.parent.mkdir(mode=0o700)
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE short_links (id TEXT PRIMARY KEY, digest TEXT NOT NULL UNIQUE, "
                   "code TEXT NOT NULL, created_at TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP)")
        db.execute("INSERT INTO short_links (id, digest, code) VALUES ('abcdefghij', 'd1', 'x = \u00e9\n')")
    store = open_store(Settings(data_dir=tmp_path / "data"))
    try:
        put(store, code_of(100), now=T0 + 400 * DAY)  # sweeps what expired
        assert store.get("abcdefghij") == "x = \u00e9\n"
        assert store.stored_bytes() == len("x = \u00e9\n".encode()) + 100
    finally:
        store.close()


def test_the_quota_is_per_client_as_the_rate_limit_sees_clients(tmp_path: Path) -> None:
    """Behind a trusted proxy, clients are told apart by X-Forwarded-For (``app.web.clients``): the
    quota is theirs, not the proxy's; a spoofed header from anyone else changes nothing."""
    env = {"EXPLORER_DATA_DIR": str(tmp_path / "data"), "EXPLORER_LINKS_CLIENT_LINKS": "1",
           "EXPLORER_TRUSTED_PROXIES": "127.0.0.1"}
    with server(env) as client:
        for n, who in enumerate(("203.0.113.5", "203.0.113.6")):
            answer = client.post("/api/links", json={"code": f"x = {n}\n"}, headers={"X-Forwarded-For": who})
            assert answer.status_code == 200, answer.text
        again = client.post("/api/links", json={"code": "x = 9\n"},
                            headers={"X-Forwarded-For": "203.0.113.5"})
        assert again.status_code == 429
    env["EXPLORER_TRUSTED_PROXIES"] = ""
    env["EXPLORER_DATA_DIR"] = str(tmp_path / "other")
    with server(env) as client:
        assert client.post("/api/links", json={"code": "x = 1\n"},
                           headers={"X-Forwarded-For": "203.0.113.5"}).status_code == 200
        spoofed = client.post("/api/links", json={"code": "x = 2\n"},
                              headers={"X-Forwarded-For": "203.0.113.6"})
        assert spoofed.status_code == 429  # the peer is the client: one quota

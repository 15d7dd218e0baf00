"""The store on real SQLite and real PostgreSQL: content-addressed (with the store's key), immutable,
collision-safe."""

from __future__ import annotations

import threading

import pytest

from app.config import Settings
from app.shortlinks import LinkStore, open_store, prepare_snippet
from app.shortlinks.ids import DEFAULT_LENGTH, full_id

MAX = 20 * 1024


def put(store: LinkStore, code: str, client: str = "192.0.2.1") -> tuple[str, bool]:
    return store.put(prepare_snippet(code, MAX), client)


def test_round_trip_and_same_code_same_id(store: LinkStore) -> None:
    code = "import torch\nx = torch.arange(6.)\nv = x.view(2, 3)\n"
    link_id, created = put(store, code)
    assert created
    assert link_id == full_id(store._keyed(prepare_snippet(code, MAX).digest))[:DEFAULT_LENGTH]
    assert store.get(link_id) == code
    # Again, and in a form that normalises to the same text: same id, nothing new stored.
    assert put(store, code) == (link_id, False)
    assert put(store, code.replace("\n", "\r\n") + "\n\n") == (link_id, False)


def test_unicode_survives_exactly(store: LinkStore) -> None:
    code = "# 克隆与分离 — clone() & detach() 🔥\nimport torch\ns = '\\u00e9\\t\\\\'\n"
    link_id, _ = put(store, code)
    assert store.get(link_id) == code


def test_unknown_and_malformed_ids_resolve_to_nothing(store: LinkStore) -> None:
    assert store.get("aaaaaaaaaa") is None
    assert store.get("'; DROP TABLE short_links; --") is None
    assert store.get("A" * 10) is None  # ids are lower case; the web layer lower-cases for users
    link_id, _ = put(store, "x = 1\n")
    assert store.get(link_id) == "x = 1\n"  # the table survived the odd lookups


def test_prefix_collisions_get_longer_ids_and_never_mix_snippets(backend_settings: Settings) -> None:
    """With 1-character ids (32 values), 60 snippets must collide; each keeps its own code."""
    store = open_store(backend_settings)
    store.id_length = 1
    try:
        codes = [f"x = {n}\n" for n in range(60)]
        ids = [put(store, code)[0] for code in codes]
        assert len(set(ids)) == len(codes)
        assert any(len(i) > 1 for i in ids), "expected at least one collision"
        for link_id, code in zip(ids, codes, strict=True):
            assert store.get(link_id) == code
            assert full_id(store._keyed(prepare_snippet(code, MAX).digest)).startswith(link_id)
            assert put(store, code) == (link_id, False)  # stable once assigned
    finally:
        store.close()


def test_concurrent_writers_of_the_same_code_agree(backend_settings: Settings) -> None:
    """Two stores (as two server processes would hold) race on the same snippets."""
    stores = [open_store(backend_settings) for _ in range(2)]
    codes = [f"y = torch.zeros({n})\n" for n in range(8)]
    results: list[list[tuple[str, bool]]] = [[], [], [], []]
    barrier = threading.Barrier(4)

    def work(slot: int) -> None:
        barrier.wait()
        results[slot] = [put(stores[slot % 2], code) for code in codes]

    threads = [threading.Thread(target=work, args=(slot,)) for slot in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    try:
        for n, code in enumerate(codes):
            answers = {results[slot][n][0] for slot in range(4)}
            assert len(answers) == 1, answers
            assert sum(results[slot][n][1] for slot in range(4)) == 1  # exactly one writer created it
            assert stores[0].get(answers.pop()) == code
    finally:
        for each in stores:
            each.close()


def test_rejects_unsupported_database_urls(tmp_path) -> None:  # noqa: ANN001
    with pytest.raises(ValueError, match="postgresql://"):
        open_store(Settings(data_dir=tmp_path, database_url="mysql://db/links"))

"""Ids and normalisation: same code (as a user means it) → same id; garbage refused with a reason."""

from __future__ import annotations

import hashlib

import pytest

from app.shortlinks import InvalidSnippet, prepare_snippet
from app.shortlinks.ids import DEFAULT_LENGTH, FULL_LENGTH, candidates, full_id, is_valid_id

CODE = "import torch\nx = torch.ones(3, requires_grad=True)\ny = x.clone().detach()\n"


def test_digest_is_sha256_of_the_normalised_utf8_code() -> None:
    snippet = prepare_snippet(CODE, 20 * 1024)
    assert snippet.code == CODE
    assert snippet.digest == hashlib.sha256(CODE.encode()).digest()


@pytest.mark.parametrize(
    "variant",
    [
        CODE.replace("\n", "\r\n"),  # Windows editor
        CODE.replace("\n", "\r"),  # classic Mac
        "\ufeff" + CODE,  # byte-order mark
        CODE.rstrip("\n"),  # no final newline
        CODE + "\n\n   \n\t",  # trailing blank lines
    ],
)
def test_equivalent_texts_share_one_digest(variant: str) -> None:
    assert prepare_snippet(variant, 20 * 1024).digest == prepare_snippet(CODE, 20 * 1024).digest


@pytest.mark.parametrize(
    "other",
    [
        "\n" + CODE,  # a leading blank line shifts every step's line number
        CODE.replace("x = ", "x  = "),
        CODE.replace("ones(3", "ones(4"),
    ],
)
def test_meaningful_changes_change_the_digest(other: str) -> None:
    assert prepare_snippet(other, 20 * 1024).digest != prepare_snippet(CODE, 20 * 1024).digest


@pytest.mark.parametrize(
    ("code", "status", "words"),
    [
        ("", 422, "empty"),
        ("  \n\r\n\t ", 422, "empty"),
        ("x = 1\x00", 422, "NUL"),
        ("x = '\ud800'", 400, "UTF-8"),
        ("# " + "é" * 600, 413, "longer than 1 KB"),  # 1202 bytes in UTF-8, though 602 characters
    ],
)
def test_garbage_is_refused_with_a_clear_reason(code: str, status: int, words: str) -> None:
    with pytest.raises(InvalidSnippet) as caught:
        prepare_snippet(code, 1024)
    assert caught.value.status == status
    assert words in caught.value.message


def test_size_bound_counts_utf8_bytes_of_the_normalised_code() -> None:
    assert prepare_snippet("#" * 1023 + "\n", 1024).code.endswith("\n")
    # CRLF → LF shrinks the text, so a 1030-byte CRLF body that normalises to 1024 bytes is accepted.
    assert len(prepare_snippet("#\r\n" * 512, 1024).code.encode()) == 1024


def test_ids_are_prefixes_of_the_full_base32_digest() -> None:
    digest = hashlib.sha256(b"x").digest()
    whole = full_id(digest)
    assert len(whole) == FULL_LENGTH and is_valid_id(whole)
    ids = list(candidates(digest))
    assert ids[0] == whole[:DEFAULT_LENGTH]
    assert ids[-1] == whole
    assert [len(i) for i in ids] == list(range(DEFAULT_LENGTH, FULL_LENGTH + 1))


@pytest.mark.parametrize("bad", ["", "ABC!", "abc1", "a" * 53, "../etc", "abc def", "é"])
def test_invalid_ids_are_recognised(bad: str) -> None:
    assert not is_valid_id(bad)

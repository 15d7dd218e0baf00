"""The tutorial corpus's registry: each ``tutorial_corpus_*.py`` part adds its snippets here by name."""

from __future__ import annotations

CORPUS: dict[str, str] = {}


def snippet(name: str, code: str) -> None:
    assert name not in CORPUS, name
    CORPUS[name] = code

"""The gallery in Chinese: titles, summaries and comments translated, the code itself untouched.
Torch is the oracle: the Chinese example runs to exactly the trace of the English one."""

from __future__ import annotations

import io
import json
import re
import tokenize

import pytest

from app import i18n
from app.gallery import EXAMPLES, code_comments, localized
from tests.i18n.english import english_phrases


def _tokens(code: str) -> list[tuple[int, str]]:
    return [(t.type, t.string) for t in tokenize.generate_tokens(io.StringIO(code).readline)
            if t.type not in (tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE)]


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda e: e.slug)
def test_only_the_comments_change(example) -> None:  # noqa: ANN001
    with i18n.use_locale("zh_CN"):
        chinese = localized(example)
    assert chinese.slug == example.slug and chinese.diagnostics == example.diagnostics
    assert _tokens(chinese.code) == _tokens(example.code)
    assert chinese.code.count("\n") == example.code.count("\n")  # same lines: steps keep their numbers
    for text in (chinese.title, chinese.summary, *(c for _, _, c in code_comments(chinese.code))):
        assert english_phrases(text) == [], text
    assert chinese.title != example.title and chinese.summary != example.summary
    with i18n.use_locale("en"):
        assert localized(example) == example


@pytest.mark.slow
def test_the_chinese_examples_trace_like_the_english_ones() -> None:
    """Every example, run by the engine in both languages: the same steps, tensors, graphs, output
    (object addresses a print shows, ``<CloneBackward0 object at 0x7f...>``, masked)."""
    from app.engine import trace_delta

    def traced(code: str) -> str:
        return re.sub(r"0x[0-9a-f]+", "0x…", json.dumps(trace_delta(code), sort_keys=True))

    for example in EXAMPLES:
        with i18n.use_locale("zh_CN"):
            code = localized(example).code
        assert traced(code) == traced(example.code), example.slug

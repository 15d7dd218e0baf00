"""The catalog is complete: every string the app, its templates and its scripts mark is in it
(Babel extracts them with babel.cfg, as ``scripts/i18n`` does), none is left there that the source
no longer has, every Chinese entry is translated (not empty, not fuzzy), and a translation fills in
exactly the fields its English has (a missing ``{name}`` would drop a tensor's name from a sentence;
an extra one would fail at run time). And the scripts have no user-facing string that skips ``t()``."""

from __future__ import annotations

import contextlib
import re
import string
from pathlib import Path

import pytest
from babel.messages.pofile import read_po

from app import i18n
from app.i18n_extract import extract
from app.run_errors import TEMPLATES

ROOT = Path(__file__).resolve().parents[2]
PO = i18n.po_path("zh_CN")
TEMPLATE_FIELD = re.compile(r"%\((\w+)\)[sd]")


def _catalog():
    with PO.open("rb") as po:
        return read_po(po, locale="zh_CN")


CATALOG = _catalog()
MESSAGES = [m for m in CATALOG if m.id]


def _key(message) -> str:
    return message.id[0] if isinstance(message.id, tuple | list) else message.id


def _fields(text: str) -> set[str]:
    """``{name}`` fields (str.format, with their format specs) and ``%(name)s`` (Jinja's newstyle)."""
    found = set(TEMPLATE_FIELD.findall(text))
    with contextlib.suppress(ValueError):  # not a str.format template (a Jinja string with a brace)
        found |= {f"{name}:{spec}" for _, name, spec, _ in string.Formatter().parse(text) if name is not None}
    return found


def test_the_catalog_holds_exactly_what_the_source_marks() -> None:
    source = {_key(m) for m in extract() if m.id}
    catalog = {_key(m) for m in MESSAGES}
    assert source - catalog == set(), "new strings not in the catalog: run scripts/i18n and translate them"
    assert catalog - source == set(), "strings the source no longer has: run scripts/i18n"
    assert len(catalog) > 400


def test_every_message_our_code_writes_is_in_the_catalog() -> None:
    catalog = {_key(m) for m in MESSAGES}
    assert set(TEMPLATES.values()) <= catalog


@pytest.mark.parametrize("message", MESSAGES, ids=lambda m: _key(m)[:60])
def test_every_entry_is_translated_with_the_same_fields(message) -> None:  # noqa: ANN001
    assert not message.fuzzy
    forms = message.string if isinstance(message.string, tuple | list) else (message.string,)
    ids = message.id if isinstance(message.id, tuple | list) else (message.id,)
    assert forms and all(form.strip() for form in forms), "untranslated"
    for form in forms:
        assert _fields(form) == _fields(ids[-1]), (ids[-1], form)


def test_chinese_entries_are_chinese() -> None:
    """Only names, code and symbols may stay as they are."""
    same = sorted(m.id for m in MESSAGES if isinstance(m.id, str) and m.string == m.id)
    assert same == sorted(["Autograd Explorer", "d score / d x", "hooks"]), same


# User-facing text a script sets without t(): textContent/title/placeholder = "Words", an attribute
# set to words, a dialog's words (checked against the scripts before they were translated: it found
# every string this catalog now has for them). explorer.js is the render's: checked once it is translated.
UNMARKED = re.compile(
    r"""(?:textContent|title|placeholder|value)\s*=\s*[^;]*?(?<!t\()["'] ?[A-Za-z]+ [A-Za-z]"""
    r"""|setAttribute\(\s*["'](?:aria-label|title)["']\s*,[^;]*?(?<!t\()["'][A-Za-z]+ ?[A-Za-z]"""
    r"""|(?:confirm|alert|status|tell|toast|copy|Error)\([^;]*?(?<!t\()["'][A-Z][a-z]+ """
)
SCRIPTS = sorted(p for p in [*ROOT.glob("static/*.js"), *ROOT.glob("static/src/*.js")]
                 if p.name != "explorer.js")


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_scripts_say_nothing_outside_the_catalog(script: Path) -> None:
    lines = script.read_text().splitlines()
    found = [f"{script.name}:{n}: {line.strip()}" for n, line in enumerate(lines, 1)
             if UNMARKED.search(line) and not line.strip().startswith("//")]
    assert found == []


def test_the_scripts_strings_reach_the_page() -> None:
    """Every t()/tn() string of the scripts is in the page's JSON block, translated."""
    scripts = {_key(m) for m in MESSAGES if any(f.startswith("static/") for f, _ in m.locations)}
    with i18n.use_locale("zh_CN"):
        block = i18n.js_catalog()
    assert block["locale"] == "zh-CN"
    assert set(block["messages"]) == scripts and len(scripts) > 40
    with i18n.use_locale("en"):
        assert i18n.js_catalog() == {"locale": "en", "messages": {}}  # English: the msgid is the text

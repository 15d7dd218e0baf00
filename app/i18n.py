"""The explorer's languages: English (the source text) and Simplified Chinese, from Babel catalogs.

Pure: no torch, no FastAPI. The catalog is ``app/locale/<locale>/LC_MESSAGES/messages.po`` (committed,
kept up to date with ``scripts/i18n``); it is read once, at first use, with Babel, so there is no
compiled ``.mo`` to build or to forget (fuzzy entries are left out, as ``msgfmt`` would).

The locale of a request travels in a ``contextvars.ContextVar``, like the budget (``app.budget``): the
web layer picks it (``negotiate``: ``lang=`` > the remembered cookie > ``Accept-Language`` > English)
and opens it with ``use_locale`` around the request; ``run_in_threadpool`` copies it into worker
threads, so pure code (diagnostics, render, the gallery) translates with ``gettext`` without a locale
parameter. Outside a request (tests, the CLI) it is English, which is the source text itself.

Python code marks text with ``gettext`` / ``ngettext`` (``str.format`` fields, ``{name}``) and text
translated later with ``N_``; templates use ``_()`` (Jinja's i18n extension, newstyle: ``%(name)s``);
the JS reads ``t("...")`` from the strings the page hands it (``js_catalog``).
"""

from __future__ import annotations

import contextvars
import io
from collections.abc import Iterator
from contextlib import contextmanager
from decimal import Decimal
from functools import cache
from pathlib import Path

from babel import Locale, UnknownLocaleError, negotiate_locale
from babel.messages.mofile import write_mo
from babel.messages.pofile import read_po
from babel.numbers import format_decimal
from babel.support import NullTranslations, Translations

from app.run_errors import TEMPLATES, Message, Param

RUN_OUTPUT = TEMPLATES["output.run_output"]

LOCALE_DIR = Path(__file__).with_name("locale")
DOMAIN = "messages"
DEFAULT = "en"
# Babel's names (catalog folders) → the BCP 47 tags of <html lang>, lang= and the cookie.
TAGS = {"en": "en", "zh_CN": "zh-CN"}
NAMES = {"en": "English", "zh_CN": "简体中文"}  # each in its own language, for the switch
COOKIE = "lang"
COOKIE_MAX_AGE = 365 * 24 * 3600
MAX_TAG = 35  # longest language tag read (BCP 47 tags in use are far shorter)
JS_PREFIX = "static/"  # catalog entries found in these files are the strings the JS asks for


def N_(message: str) -> str:  # noqa: N802 - the gettext convention: marked here, translated at use
    """Mark ``message`` for the catalog without translating it now."""
    return message


# -- choosing a locale -----------------------------------------------------------------------------

def parse_tag(raw: str | None) -> str | None:
    """A supported locale for a language tag (``zh-CN``, ``zh_cn``, ``zh-Hans``, ``en-GB``), else None.

    Any Chinese tag gets Simplified Chinese, the only Chinese there is (a reader of Traditional reads
    it more easily than English)."""
    if not raw or len(raw) > MAX_TAG:
        return None
    tag = raw.strip().replace("-", "_")
    try:
        locale = Locale.parse(tag)
    except (ValueError, UnknownLocaleError):
        return None
    if locale.language == "zh":
        return "zh_CN"
    if locale.language == "en":
        return "en"
    return None


def accepted(header: str | None) -> list[str]:
    """The tags of an ``Accept-Language`` header, most wanted first (``q=0`` ones left out)."""
    ranked: list[tuple[float, int, str]] = []
    for position, part in enumerate((header or "").split(",")[:20]):
        tag, _, params = part.strip().partition(";")
        quality = 1.0
        if params.strip().startswith("q="):
            try:
                quality = float(params.strip()[2:])
            except ValueError:
                quality = 0.0
        if tag and tag != "*" and quality > 0:
            ranked.append((-quality, position, tag.strip()))
    return [tag for _, _, tag in sorted(ranked)]


def negotiate(lang: str | None = None, cookie: str | None = None, accept_language: str | None = None) -> str:
    """The locale of a request: ``lang=`` in the URL, else the reader's remembered choice (the
    cookie the language switch sets), else the browser's ``Accept-Language``, else English."""
    for chosen in (lang, cookie):
        found = parse_tag(chosen)
        if found is not None:
            return found
    wanted = [tag.replace("-", "_") for tag in accepted(accept_language)]
    exact = negotiate_locale(wanted, list(TAGS))
    if exact is not None:
        return exact
    for tag in wanted:  # zh-TW, zh-Hant, en-IN: the same language
        found = parse_tag(tag)
        if found is not None:
            return found
    return DEFAULT


_current: contextvars.ContextVar[str] = contextvars.ContextVar("explorer_locale", default=DEFAULT)


def current_locale() -> str:
    """The locale of the request being served (English outside one)."""
    return _current.get()


def current_tag() -> str:
    """``en`` or ``zh-CN``: for ``<html lang>`` and ``lang=`` in links."""
    return TAGS[_current.get()]


@contextmanager
def use_locale(locale: str) -> Iterator[str]:
    """Make ``locale`` the ``current_locale()`` of this block (and of threads started with its context)."""
    if locale not in TAGS:
        raise ValueError(f"unsupported locale {locale!r}")
    token = _current.set(locale)
    try:
        yield locale
    finally:
        _current.reset(token)


# -- the catalogs ----------------------------------------------------------------------------------

def po_path(locale: str) -> Path:
    return LOCALE_DIR / locale / "LC_MESSAGES" / f"{DOMAIN}.po"


@cache
def translations(locale: str) -> NullTranslations:
    """The locale's catalog, read from its ``.po`` with Babel (English: the source text)."""
    path = po_path(locale)
    if locale == DEFAULT or not path.is_file():
        return NullTranslations()
    with path.open("rb") as po:
        catalog = read_po(po, locale=locale)
    compiled = io.BytesIO()
    write_mo(compiled, catalog, use_fuzzy=False)
    compiled.seek(0)
    return Translations(compiled, domain=DOMAIN)


def gettext(message: str) -> str:
    return translations(_current.get()).gettext(message)


def ngettext(singular: str, plural: str, n: int) -> str:
    return translations(_current.get()).ngettext(singular, plural, n)


def pgettext(context: str, message: str) -> str:
    return translations(_current.get()).pgettext(context, message)


def npgettext(context: str, singular: str, plural: str, n: int) -> str:
    return translations(_current.get()).npgettext(context, singular, plural, n)


class CurrentTranslations:
    """What Jinja's ``install_gettext_translations`` installs: every call asks the request's locale,
    so one template environment serves every language."""

    gettext = staticmethod(gettext)
    ngettext = staticmethod(ngettext)
    pgettext = staticmethod(pgettext)
    npgettext = staticmethod(npgettext)


# -- numbers ---------------------------------------------------------------------------------------

def number(value: int) -> str:
    """An integer with the locale's grouping: ``12,345`` (the same in both languages today)."""
    return format_decimal(value, locale=_current.get())


def decimal(value: float, digits: int = 1) -> str:
    """``value`` with ``digits`` decimals and the locale's grouping. Rounded by Python first
    (``f"{value:.1f}"``), so the English text stays what ``f"{value:,.1f}"`` always wrote."""
    rounded = Decimal(f"{value:.{digits}f}")
    pattern = "#,##0." + "0" * digits if digits else "#,##0"
    return format_decimal(rounded, format=pattern, locale=_current.get())


# -- messages said by code (app.run_errors) -------------------------------------------------------

def message_text(code: str | None, params: dict[str, Param] | None = None, fallback: str = "") -> str:
    """A message of ``app.run_errors`` in the current language; ``fallback`` (the English text as
    stored) for a code this server does not know (a trace from another version)."""
    template = TEMPLATES.get(code or "")
    if template is None:
        return fallback
    params = params or {}
    try:
        text = gettext(template).format(**params)
    except (KeyError, IndexError, ValueError):  # a translation that names other fields: a catalog bug
        text = template.format(**params)
    output = params.get("output")
    if output and "{output}" not in template:  # a partial answer: what the run printed rides along
        text += gettext(RUN_OUTPUT) + str(output)
    return text


def say(message: Message) -> str:
    """A ``Message`` in the current language."""
    return message_text(message.code, message.params, str(message))


def error_text(error: object) -> str:
    """A ``RunError``'s message to show: ours translated from its code, torch's as torch wrote it.
    In English it is the stored text itself, byte for byte (the sandbox wrote it from the same
    template, and may have shortened it)."""
    code = getattr(error, "code", None)
    message = getattr(error, "message", "")
    if not code or _current.get() == DEFAULT:
        return message
    return message_text(code, getattr(error, "params", None), message)


# -- the strings the page's scripts use ------------------------------------------------------------

@cache
def _js_messages(locale: str) -> tuple[tuple[str, tuple[str, ...] | str], ...]:
    path = po_path(locale)
    if locale == DEFAULT or not path.is_file():
        return ()
    with path.open("rb") as po:
        catalog = read_po(po, locale=locale)
    found: list[tuple[str, tuple[str, ...] | str]] = []
    for message in catalog:
        if not message.id or message.fuzzy or not any(f.startswith(JS_PREFIX) for f, _ in message.locations):
            continue
        if isinstance(message.id, tuple | list):
            forms = tuple(message.string) if all(message.string) else ()
            if forms:
                found.append((message.id[0], forms))
        elif message.string:
            found.append((message.id, message.string))
    return tuple(found)


def js_catalog() -> dict[str, object]:
    """For the page's ``<script type="application/json" id="i18n">``: the locale and the translation
    of every string the scripts in ``static/`` ask for (``t(msgid)``, ``tn(singular, plural, n)``:
    plurals by their singular, as a list of forms). English needs none: the msgid is the text."""
    locale = _current.get()
    return {"locale": TAGS[locale], "messages": {msgid: list(text) if isinstance(text, tuple) else text
                                               for msgid, text in _js_messages(locale)}}


def switch_links() -> list[dict[str, str | bool]]:
    """The language switch: one entry per language, in its own name."""
    current = _current.get()
    return [{"tag": TAGS[name], "name": NAMES[name], "current": name == current} for name in TAGS]


__all__ = [
    "COOKIE", "DEFAULT", "N_", "TAGS", "CurrentTranslations", "current_locale", "current_tag", "decimal",
    "error_text", "gettext", "js_catalog", "message_text", "negotiate", "ngettext", "npgettext", "number",
    "parse_tag", "pgettext", "say", "switch_links", "translations", "use_locale",
]

"""Finding the catalog's messages: Babel's extraction over ``babel.cfg``, plus two extractors of
our own, and ``python -m app.i18n_extract`` (``scripts/i18n``) to bring the catalogs up to date.

* ``extract_gallery``: ``app/gallery.py``'s marked strings (titles, summaries) and every ``# comment``
  inside its example code (the strings passed to ``_code``): a learner reads those in their language.
* ``extract_js``: Babel's JavaScript extractor with the scripts' own keywords, ``t(msgid)`` and
  ``tn(singular, plural, n)`` (``static/i18n.js``), whatever keywords the caller passes.

Not imported by the app: only by this tool and the catalog's tests.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from babel.messages.catalog import Catalog
from babel.messages.extract import extract_from_dir, extract_javascript, extract_python
from babel.messages.frontend import parse_mapping_cfg
from babel.messages.pofile import read_po, write_po

from app.gallery import code_comments
from app.i18n import DOMAIN, TAGS, po_path

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "babel.cfg"
JS_KEYWORDS = {"t": None, "tn": (1, 2)}
GALLERY_NOTE = "A comment in a gallery example's code: keep it short, it sits beside the code."


def extract_gallery(fileobj: Any, keywords: Any, comment_tags: Any, options: Any) -> Iterator[tuple]:
    """Babel extractor for ``app/gallery.py``: its ``N_()`` strings and its code's comments."""
    source = fileobj.read()
    fileobj.seek(0)
    yield from extract_python(fileobj, keywords, comment_tags, options)
    text = source.decode("utf-8") if isinstance(source, bytes) else source
    for node in ast.walk(ast.parse(text)):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "_code"
                and node.args and isinstance(node.args[0], ast.Constant)):
            code = node.args[0].value.strip("\n") + "\n"
            # The string starts on the line after `_code("""`: line numbers point at the comment.
            for line, _column, comment in code_comments(code):
                yield node.lineno + line, None, comment, [GALLERY_NOTE]


# Babel checks each found call against the keywords it was given: the scripts' calls are reported
# under the gettext names of the same shape.
AS_GETTEXT = {"t": "gettext", "tn": "ngettext"}


def extract_js(fileobj: Any, keywords: Any, comment_tags: Any, options: Any) -> Iterator[tuple]:
    """Babel's JavaScript extractor, with the scripts' keywords (``t``, ``tn``)."""
    found = extract_javascript(fileobj, JS_KEYWORDS, comment_tags, options)
    for lineno, funcname, messages, comments in found:
        yield lineno, AS_GETTEXT.get(funcname, funcname), messages, comments


def extract() -> Catalog:
    """Every message the app, its templates and its scripts use, as Babel finds them with babel.cfg."""
    with CONFIG.open() as config:
        method_map, options_map = parse_mapping_cfg(config)
    catalog = Catalog(domain=DOMAIN, project="Autograd Explorer", charset="utf-8")
    for filename, lineno, message, comments, context in extract_from_dir(
        ROOT, method_map, options_map, comment_tags=("Translators:",), strip_comment_tags=True,
    ):
        catalog.add(message, None, [(filename, lineno)], auto_comments=comments, context=context)
    return catalog


def update(check: bool = False) -> int:
    """Bring every locale's ``.po`` up to date with the source (new messages empty, vanished ones
    dropped); with ``check``, only say whether they are (the exit status)."""
    template = extract()
    stale = 0
    for locale in TAGS:
        path = po_path(locale)
        if locale == "en":
            continue
        with path.open("rb") as po:
            catalog = read_po(po, locale=locale, domain=DOMAIN)
        before = {m.id for m in catalog if m.id}
        catalog.update(template, no_fuzzy_matching=True)
        after = {m.id for m in catalog if m.id}
        if before != after:
            stale += 1
            print(f"{path.relative_to(ROOT)}: +{len(after - before)} -{len(before - after)} messages")
        if not check:
            with path.open("wb") as po:
                # no line numbers: an edit elsewhere in a file does not touch the catalog
                write_po(po, catalog, width=110, sort_by_file=False, ignore_obsolete=True,
                         include_lineno=False)
    return 1 if check and stale else 0


if __name__ == "__main__":
    sys.exit(update(check="--check" in sys.argv[1:]))

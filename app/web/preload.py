"""What the server keeps for good, loaded before it serves rather than by the first request that needs it.

Loaded mid-flood, these long-lived objects land in whatever free space the busy heap has, among the
short-lived objects of the requests around them; when those are freed, each of them keeps its 1 MiB
pymalloc arena from going back to the system. Measured by ``python -m app.bench soak`` with a heap
profile: the wasmtime bindings (~6 MB of ctypes classes, imported by the first graph that goes to
dot), Babel's locale data (~4 MB, the first number formatted in a language) and the message
catalogs held ~90 arenas for ~8 MB of objects. Loaded at start they pack into a few arenas. Together
~0.25 s of CPU, once per process.
"""

from __future__ import annotations

from app import i18n
from app.render import layout
from app.templating import templates


def preload() -> None:
    layout.load_bindings()
    for locale in i18n.TAGS:
        i18n.translations(locale)
        with i18n.use_locale(locale):  # Babel loads a locale's data on its first formatted number
            i18n.number(1)
    for name in templates.list_templates():  # compiled once, then kept in the environment's cache
        templates.get_template(name)

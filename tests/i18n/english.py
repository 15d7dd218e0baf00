"""What a Chinese reader should not meet: English sentences outside code.

``english_phrases(text)`` finds runs of three or more English words (letters only, one space
apart) after leaving out what is code or a quotation: `backticked` pieces, torch's own words in
quotes (“...”, "..."), and the product's name. Identifiers (``grad_fn``, ``x.detach()``,
``requires_grad=True``) are not words here: their ``_``, ``.`` and ``(`` break a run.
"""

from __future__ import annotations

import re

ALLOWED = ("Autograd Explorer", "Noto Sans CJK")
CODE = re.compile(r"`[^`]*`")
QUOTED = re.compile(r"“[^”]*”|\"[^\"]*\"")
PHRASE = re.compile(r"(?<![\w.])[A-Za-z]+(?: [A-Za-z]+){2,}(?![\w(])")


def english_phrases(text: str) -> list[str]:
    text = QUOTED.sub(" ", CODE.sub(" ", text))
    for allowed in ALLOWED:
        text = text.replace(allowed, " ")
    return PHRASE.findall(text)

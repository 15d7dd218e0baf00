"""Tutorial-style snippets: code as PyTorch's own docs and tutorials write it (issue 24, 5).

Each must run through the gated sandbox and print exactly what plain torch prints
(``test_tutorial.py``). Floats are printed as torch prints tensors (4 decimals) or rounded, so a
kernel's last bit does not decide a test; nothing prints an address (``<MulBackward0 object at ...>``).
The snippets live in parts, one theme each (``tutorial_corpus_*.py``); this module gathers them.
"""

from __future__ import annotations

import tutorial_corpus_advanced  # noqa: F401 - each part registers its snippets
import tutorial_corpus_autograd  # noqa: F401
import tutorial_corpus_data  # noqa: F401
import tutorial_corpus_examples  # noqa: F401
import tutorial_corpus_gate  # noqa: F401
import tutorial_corpus_intermediate  # noqa: F401
import tutorial_corpus_introyt  # noqa: F401
import tutorial_corpus_loops  # noqa: F401
import tutorial_corpus_math  # noqa: F401
import tutorial_corpus_ops  # noqa: F401
import tutorial_corpus_pipelines  # noqa: F401
import tutorial_corpus_recipes  # noqa: F401
import tutorial_corpus_reprs  # noqa: F401
import tutorial_corpus_saving  # noqa: F401
import tutorial_corpus_scripts  # noqa: F401
import tutorial_corpus_text  # noqa: F401
import tutorial_corpus_tools  # noqa: F401
from tutorial_registry import CORPUS

__all__ = ["CORPUS"]

"""Every gallery example runs, fast, and shows what its summary promises."""

from __future__ import annotations

import subprocess
import sys

import pytest

from app.gallery import EXAMPLES, get_example
from app.render import build_explorer
from tests.render.conftest import trace

# slug -> the line that raises
EXPECTED_ERRORS = {"inplace-on-leaf": 2, "inplace-through-detach": 5, "backward-twice": 4,
                   "custom-loss-detach": 10}


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda e: e.slug)
def test_example_runs_and_renders(example) -> None:
    result = trace(example.code)
    assert len(result.steps) < 100 and not result.truncated
    if example.slug in EXPECTED_ERRORS:
        assert result.error is not None and result.error.line == EXPECTED_ERRORS[example.slug]
    else:
        assert result.ok, result.error
    view = build_explorer(result, example.code)
    assert view.step_count == len(result.steps)
    assert "\n" not in example.summary and example.title


def test_slugs_are_unique_and_twins_exist() -> None:
    slugs = [e.slug for e in EXAMPLES]
    assert len(slugs) == len(set(slugs))
    for example in EXAMPLES:
        assert get_example(example.slug) is example
        assert example.fixed_twin is None or get_example(example.fixed_twin) is not None


def test_the_seed_article_scenarios_are_all_there() -> None:
    required = {"clone-vs-detach", "four-combinations", "losses-keep-graphs", "losses-item",
                "inplace-through-detach", "inplace-on-leaf", "clone-then-modify",
                "requires-grad-after-detach",
                "freeze-early-layers", "input-gradient", "no-grad-inference", "custom-loss-detach",
                "gradient-penalty", "views-share-storage", "retain-grad",
                # backward, node by node (issue 13)
                "backward-stopped-by-detach", "two-paths-accumulate", "backward-twice", "retain-graph",
                "backward-hook-prints"}
    assert required <= {e.slug for e in EXAMPLES}


def test_the_web_layer_never_imports_torch() -> None:
    probe = ("import sys, app.web.pages, app.render, app.gallery, app.web.permalink; "
             "print('torch' in sys.modules)")
    output = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert output.stdout.strip() == "False"

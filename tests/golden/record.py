"""Record the v1 traces the engine gives for every snippet the engine, render and diagnostics tests
run, plus the gallery: the golden file ``expand(v2) == v1`` is checked against.

    python -m pytest tests/engine tests/render tests/diagnostics -p tests.golden.record -q
        -o addopts="" --golden-out tests/golden/v1.jsonl.gz

The file holds what the engine *that recorded it* said. Regenerate it only for a deliberate change of
the v1 contract, and say in the commit which answers changed and why.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

RECORDED: dict[tuple, dict] = {}


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--golden-out", default=None, help="where to write the recorded v1 traces")


def pytest_configure(config: pytest.Config) -> None:
    import app.engine
    import app.engine.run

    original = app.engine.run.trace_snippet

    def recording(source, limits=None, builtins_namespace=None, **kwargs):  # noqa: ANN001, ANN202
        import builtins

        from app.engine import EngineLimits

        if builtins_namespace is None:
            builtins_namespace = builtins
        result = original(source, limits, builtins_namespace, **kwargs)
        limits = limits or EngineLimits()
        if builtins_namespace is builtins and not kwargs:
            key = (source, limits.max_steps, limits.max_stdout)
            if key not in RECORDED:
                RECORDED[key] = json.loads(json.dumps(result))
        return result

    app.engine.run.trace_snippet = recording
    app.engine.trace_snippet = recording


def pytest_sessionfinish(session: pytest.Session) -> None:
    out = session.config.getoption("--golden-out")
    if not out:
        return
    from app.engine import EngineLimits
    from app.engine.run import trace_snippet
    from app.gallery import EXAMPLES

    for example in EXAMPLES:
        trace_snippet(example.code, EngineLimits())
    with gzip.open(Path(out), "wt", encoding="utf-8") as stream:
        for (source, max_steps, max_stdout), result in sorted(RECORDED.items()):
            record = {"source": source, "max_steps": max_steps, "max_stdout": max_stdout, "result": result}
            stream.write(json.dumps(record) + "\n")

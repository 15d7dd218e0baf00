"""What the diagnostics said about every golden trace (``tests/golden``) when they were recorded:
the regression oracle for rewriting the rules (same findings, same words).

    .venv/bin/python -m tests.diagnostics.diagnostics_golden   # rewrites golden_diagnostics.jsonl.gz

Regenerate only for a deliberate change of a rule's findings or words, and say in the commit which
answers changed and why. The file was first recorded from the rules as they were before the
delta-native rewrite (issue 9), which read every step whole.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterator
from pathlib import Path

FILE = Path(__file__).with_name("golden_diagnostics.jsonl.gz")


def key(source: str, max_steps: int, max_stdout: int) -> str:
    return json.dumps([source, max_steps, max_stdout])


def load() -> dict[str, list[dict]]:
    """Golden trace key → the diagnostics it got, as plain data."""
    with gzip.open(FILE, "rt", encoding="utf-8") as stream:
        return {record["key"]: record["diagnostics"] for record in map(json.loads, stream)}


def _records() -> Iterator[dict]:
    from app.diagnostics import diagnose
    from app.schema import DeltaTrace
    from app.trace.delta import compress
    from tests.golden import load as load_traces

    for golden in load_traces():
        trace = DeltaTrace.model_validate(compress(golden.result))
        found = diagnose(trace, golden.source)
        yield {"key": key(golden.source, golden.max_steps, golden.max_stdout),
               "diagnostics": [d.model_dump() for d in found]}


def main() -> None:
    with gzip.open(FILE, "wt", encoding="utf-8") as stream:
        for record in _records():
            stream.write(json.dumps(record) + "\n")


if __name__ == "__main__":
    main()

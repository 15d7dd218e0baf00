"""``python -m app.bench [NAME ...]``: run the registered sub-benchmarks (all by default).

A sub-benchmark is a module ``app.bench.<name>`` with ``run() -> list[Row]``. Registering one is a
one-line change to ``BENCHMARKS``; a listed module that does not exist (yet) is skipped.
"""

from __future__ import annotations

import importlib
import sys

from app.bench import Row, render

# Order is the order they run in.
BENCHMARKS = ["engine", "http", "stepping", "analysis", "graph", "soak", "scale", "compare", "embed_scroll",
              "library", "cluster", "page", "detector"]


def _load(name: str):  # noqa: ANN202 - a module
    try:
        return importlib.import_module(f"app.bench.{name}")
    except ModuleNotFoundError as error:
        if error.name != f"app.bench.{name}":
            raise  # the benchmark exists but something it imports is missing: a real failure
        return None


def main(argv: list[str]) -> int:
    unknown = [name for name in argv if name not in BENCHMARKS]
    if unknown:
        print(f"unknown benchmark(s): {', '.join(unknown)}; known: {', '.join(BENCHMARKS)}", file=sys.stderr)
        return 2
    rows: list[Row] = []
    missed = False
    for name in argv or BENCHMARKS:
        module = _load(name)
        if module is None:
            print(f"[{name}] not present, skipped", file=sys.stderr)
            continue
        print(f"[{name}] running ...", file=sys.stderr, flush=True)
        for row in module.run():
            rows.append(row)
            missed |= row.met is False
    print(render(rows))
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

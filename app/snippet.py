"""The snippet's statements as ``ast`` reads them, pure (nothing runs): which are loops, and the
statement lists a compound statement holds. The detector's line facts (``app.diagnostics.source``)
and the views' loops (``app.render.loops``) both walk the snippet with these, so they agree on what
its loops are without importing each other.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from typing import TypeGuard


def parse(code: str) -> ast.Module | None:
    """The snippet's tree; None when it does not parse (nothing to read from it)."""
    try:
        return ast.parse(code)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None


def is_loop(stmt: ast.stmt) -> TypeGuard[ast.For | ast.AsyncFor | ast.While]:
    return isinstance(stmt, ast.For | ast.AsyncFor | ast.While)


def span(stmt: ast.stmt) -> tuple[int, int]:
    """A statement's first and last line."""
    return stmt.lineno, stmt.end_lineno or stmt.lineno


def nested(stmt: ast.stmt) -> Iterator[list[ast.stmt]]:
    """The statement lists inside a statement: its body, ``else`` and ``finally``, its handlers'."""
    for child in ("body", "orelse", "finalbody"):
        body = getattr(stmt, child, None)
        if isinstance(body, list) and body and isinstance(body[0], ast.stmt):
            yield body
    for handler in getattr(stmt, "handlers", []):
        yield handler.body


def loops(tree: ast.Module | None) -> list[tuple[int, int]]:
    """The lines of each ``for`` / ``while`` statement of the snippet, in source order."""
    found: list[tuple[int, int]] = []

    def walk(body: list[ast.stmt]) -> None:
        for stmt in body:
            if is_loop(stmt):
                found.append(span(stmt))
            for inner in nested(stmt):
                walk(inner)

    if tree is not None:
        walk(tree.body)
    return found

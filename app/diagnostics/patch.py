"""A fix as code: edits of the snippet's lines (``app.schema.Patch``) that a rule makes from the
statements it names (``app.diagnosis.apply`` carries them out).

Edits are made on the source as the user typed it, never on ``ast.unparse`` of it: quotes, spacing and
comments stay the user's. ``ast`` positions count UTF-8 bytes within a line, so a line is cut as
bytes. Pure; nothing runs.
"""

from __future__ import annotations

import ast
import io
import tokenize

from app.schema import Patch
from app.snippet import span


def _line_bytes(lines: list[str], number: int) -> bytes:
    return lines[number - 1].encode() if 0 < number <= len(lines) else b""


def segment(lines: list[str], node: ast.AST) -> str:
    """The source text of an expression as typed (one line or several)."""
    start, end = node.lineno, node.end_lineno or node.lineno  # type: ignore[attr-defined]
    first, last = node.col_offset, node.end_col_offset  # type: ignore[attr-defined]
    if start == end:
        return _line_bytes(lines, start)[first:last].decode(errors="replace")
    parts = [_line_bytes(lines, start)[first:]]
    parts += [_line_bytes(lines, n) for n in range(start + 1, end)]
    parts.append(_line_bytes(lines, end)[:last])
    return b"\n".join(parts).decode(errors="replace")


def replace(lines: list[str], stmt: ast.stmt, node: ast.AST, text: str) -> Patch:
    """The statement's lines with ``node``'s source (inside them) replaced by ``text``."""
    return replace_many(lines, stmt, [(node, text)])


def replace_many(lines: list[str], stmt: ast.stmt, edits: list[tuple[ast.AST, str]]) -> Patch:
    """The statement's lines with each node's source replaced (the nodes do not overlap)."""
    start, end = span(stmt)
    whole = b"\n".join(_line_bytes(lines, n) for n in range(start, end + 1))

    def offset(line: int, column: int) -> int:
        return sum(len(_line_bytes(lines, n)) + 1 for n in range(start, line)) + column

    spans = sorted(((offset(n.lineno, n.col_offset), offset(n.end_lineno or n.lineno, n.end_col_offset), text)  # type: ignore[attr-defined]
                    for n, text in edits), reverse=True)
    for first, last, text in spans:  # from the end: earlier offsets stay true
        whole = whole[:first] + text.encode() + whole[last:]
    return Patch(start=start, end=end, text=whole.decode(errors="replace"))


def insert_before(line: int, indent: int, text: str) -> Patch:
    """``text`` (one or more lines) as new lines before ``line``, at ``indent`` characters."""
    pad = " " * indent
    body = "\n".join(pad + row if row else row for row in text.split("\n"))
    return Patch(start=line, end=line - 1, text=body)


def indentation(lines: list[str], line: int) -> str:
    row = lines[line - 1] if 0 < line <= len(lines) else ""
    return row[: len(row) - len(row.lstrip())]


def wrap(lines: list[str], stmt: ast.stmt, header: str) -> Patch:
    """The statement moved into a block: ``with torch.no_grad():`` above it, the statement indented."""
    start, end = span(stmt)
    pad = indentation(lines, start)
    inner = [("    " + row if row.strip() else row) for row in lines[start - 1:end]]
    return Patch(start=start, end=end, text="\n".join([pad + header, *inner]))


def delete(stmt: ast.stmt) -> Patch:
    start, end = span(stmt)
    return Patch(start=start, end=end, text="")


def unwrap(lines: list[str], block: ast.With | ast.For | ast.While) -> Patch:
    """The block's body in its place, one level less indented (the block's header gone)."""
    start, end = span(block)
    body_start = block.body[0].lineno
    outer = indentation(lines, start)
    inner = indentation(lines, body_start)
    rows = []
    for row in lines[body_start - 1:end]:
        if row.startswith(inner):
            rows.append(outer + row[len(inner):])
        else:  # a blank line, or a line less indented than the body (a continuation)
            rows.append(row.lstrip() and outer + row.lstrip())
    return Patch(start=start, end=end, text="\n".join(rows))


def is_simple(node: ast.expr) -> bool:
    """An expression a method call can follow without parentheses: ``loss``, ``out[0]``, ``f(x)``."""
    return isinstance(node, ast.Name | ast.Attribute | ast.Subscript | ast.Call | ast.Constant)


def method(lines: list[str], node: ast.expr, call: str) -> str:
    """``loss.item()`` / ``(a + b).detach()`` from the expression as typed."""
    text = segment(lines, node)
    return f"{text}.{call}" if is_simple(node) else f"({text}).{call}"


def shown(text: str) -> str:
    """Patched code as a message quotes it: one line, its comments left out (the patch keeps them)."""
    out = []
    for row in text.split("\n"):
        try:
            tokens = list(tokenize.generate_tokens(io.StringIO(row).readline))
        except (tokenize.TokenError, IndentationError, SyntaxError):
            out.append(row.strip())
            continue
        cut = next((t.start[1] for t in tokens if t.type == tokenize.COMMENT), None)
        out.append((row if cut is None else row[:cut]).strip())
    from app.diagnostics.source import shorten

    return shorten("; ".join(part for part in out if part))

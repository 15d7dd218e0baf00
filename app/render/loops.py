"""The snippet's loops over a run: how much memory each iteration adds, and the steps where a loop ended.

A loop's header line (``for …:`` / ``while …:``) is a step each time it runs: when it takes its next
item, and once more when it finds none and the loop ends. Between two of its header steps lies one
whole iteration, so the bytes alive at each header step (``Holding.total_bytes``) say what an
iteration adds: a steady training loop adds nothing, a loop that keeps its losses' graphs adds the
same every time. The median of the iterations' changes is the figure (the first iteration often
makes what later ones reuse: optimizer state, ``.grad``).

The step where a loop ended is "after line 18 ran" in the trace's terms, which reads as if the loop
ran once more: the page says the loop ended instead.
"""

from __future__ import annotations

import ast
import statistics
from dataclasses import dataclass

from app.i18n import gettext as _
from app.render import fmt
from app.render.steps import StepInput
from app.snippet import loops, parse

MAX_LOOPS = 3  # loops the memory view speaks of, the most iterations first
MIN_ITERATIONS = 2


@dataclass(frozen=True)
class LoopGrowth:
    line: int  # the loop's header line
    iterations: int  # whole iterations seen (from one header step to the next)
    per_iteration: int  # bytes: the median change over an iteration
    text: str


class LoopBytes:
    """Fed by ``drive``: the bytes alive after every step."""

    def __init__(self) -> None:
        self.bytes: list[int] = []

    def add_step(self, step: StepInput) -> None:
        self.bytes.append(step.holding.total_bytes)


@dataclass(frozen=True)
class Loops:
    growth: tuple[LoopGrowth, ...]
    ended: frozenset[int]  # steps where a loop's header found no next item


def read_loops(code: str, lines: list[int] | tuple[int, ...], alive: list[int], finished: bool) -> Loops:
    """The loops of ``code`` over a run whose step ``i`` ran line ``lines[i]`` and left ``alive[i]``
    bytes; ``finished``: the run ran to its end (a loop cut by a limit did not end)."""
    tree = parse(code)
    ranges = loops(tree)
    if not ranges or not lines:
        return Loops((), frozenset())
    functions = _function_lines(tree)
    headers: dict[int, list[int]] = {start: [] for start, _ in ranges}
    for step, line in enumerate(lines):
        if line in headers:
            headers[line].append(step)
    ended: set[int] = set()
    growth: list[LoopGrowth] = []
    for start, end in ranges:
        steps = headers[start]
        for step in steps:
            after = lines[step + 1] if step + 1 < len(lines) else None
            # the next step is outside the loop, and not in a function its iterator may run
            if (finished if after is None else not (start <= after <= end or after in functions)):
                ended.add(step)
        changes = [alive[b] - alive[a] for a, b in zip(steps, steps[1:], strict=False)]
        if len(changes) >= MIN_ITERATIONS:
            per = round(statistics.median(changes))
            growth.append(LoopGrowth(start, len(changes), per, _growth_text(start, len(changes), per)))
    growth.sort(key=lambda g: (-g.iterations, g.line))
    return Loops(tuple(sorted(growth[:MAX_LOOPS], key=lambda g: g.line)), frozenset(ended))


def _growth_text(line: int, iterations: int, per: int) -> str:
    parts = {"line": line, "n": iterations, "size": fmt.nbytes(abs(per))}
    if per > 0:
        return _("Loop at line {line}: +{size} per iteration (median of {n})").format(**parts)
    if per < 0:
        return _("Loop at line {line}: −{size} per iteration (median of {n})").format(**parts)
    return _("Loop at line {line}: no growth per iteration (median of {n})").format(**parts)


def _function_lines(tree: ast.Module | None) -> frozenset[int]:
    """Lines inside the snippet's functions (a generator a loop iterates runs there); none when the
    snippet could not be parsed."""
    if tree is None:
        return frozenset()
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            lines.update(range(node.lineno, (node.end_lineno or node.lineno) + 1))
    return frozenset(lines)

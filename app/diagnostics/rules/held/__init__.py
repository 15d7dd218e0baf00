"""Graphs held across loop iterations: memory that grows every time the loop goes round.

Read from the trace, not from how the code is spelled: ``app.diagnostics.holders`` finds, for each run
of a loop, the graph nodes a name still reaches iterations after they were made, and the names that
hold them. Each holder is one cause, said once, at the line that makes it hold them:

* ``graph-kept-by-container``: a list, dict, deque or attribute that gains an item every iteration
  (``losses.append(loss)``, a hook that stores its output, a meter object);
* ``graph-chained-across-iterations``: a name built from its own previous value — a running total
  (``total += loss``), an average, or state carried from one iteration to the next (``x = x.clone()``,
  an RNN's hidden state).

Every byte count quoted is the memory chart's (``Accounting``), at steps the message names.
"""

from __future__ import annotations

from collections.abc import Iterator

from app.diagnostics.context import Context
from app.diagnostics.holders import Cause, causes, grows
from app.diagnostics.lifetimes import Lifetimes, lifetimes
from app.diagnostics.loops import loop_runs
from app.diagnostics.rules.held.chained import CHAIN_RULE, chained_across
from app.diagnostics.rules.held.kept import CONTAINER_RULE, kept_by_container
from app.schema import Diagnostic


def held_across_iterations(context: Context) -> Iterator[Diagnostic]:
    life = lifetimes(context)
    found: dict[str, Cause] = {}
    for run in loop_runs(context):
        for cause in causes(context, life, run):
            known = found.get(cause.key)
            # One finding per cause: of the runs that show it, the innermost loop's last run.
            if known is None or (cause.run.loop.start, cause.run.starts[0]) >= (known.run.loop.start,
                                                                             known.run.starts[0]):
                found[cause.key] = cause
    for cause in sorted(found.values(), key=lambda c: c.run.starts[0]):
        finding = _finding(context, life, cause)
        if finding is not None:
            yield finding


def _finding(context: Context, life: Lifetimes, cause: Cause) -> Diagnostic | None:
    if grows(context, cause):
        return kept_by_container(context, cause)
    return chained_across(context, life, cause)


__all__ = ["CHAIN_RULE", "CONTAINER_RULE", "held_across_iterations"]

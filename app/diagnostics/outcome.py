"""What a run came to, in the three numbers a fix changes: the memory held at its end, how much its
main loop grows per iteration, and which parameters got a gradient. The compare view puts two runs'
outcomes side by side in one line (``app.render.findings.change_line``). Read from the same index and
memory accounting as the findings: the figures are the chart's.
"""

from __future__ import annotations

from app.diagnosis import Outcome
from app.diagnostics.context import Context
from app.diagnostics.holders import growth_per_iteration
from app.diagnostics.loops import loop_runs
from app.diagnostics.trained import trained


def _name(names: list[str]) -> str | None:
    plain = [n for n in names if ":" not in n]
    if not plain:
        return None
    return min(plain, key=lambda n: ("." not in n, "[" in n, len(n), n))


def outcome(context: Context) -> Outcome:
    changes = context.memory
    if not changes:
        return Outcome(steps=0, end_bytes=0)
    growth, loop_line = None, None
    runs = [run for run in loop_runs(context) if len(run.starts) >= 3]
    if runs:
        run = max(runs, key=lambda r: (len(r.starts), -r.starts[0]))
        per_iteration = growth_per_iteration(context, run.starts)  # the findings' own reading
        growth = per_iteration[0] if per_iteration is not None else None
        loop_line = run.loop.start
    last = context.at(len(context) - 1)
    leaves = trained(context).leaves()
    if not leaves:  # no optimizer: the named leaves that require grad at the end
        leaves = {tid for key in context.index.timeline.ids("variables")
                  if (tid := last.variable(key)) is not None and (f := last.tensor(tid)) is not None
                  and f.is_leaf and f.requires_grad}
    got = context.index.grad_until
    gradients = {}
    for tid in leaves:
        name = _name(last.names(tid))
        if name is not None:
            gradients[name] = tid in got
    return Outcome(len(changes), changes[-1].total_bytes, growth, loop_line, dict(sorted(gradients.items())))

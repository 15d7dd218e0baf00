"""Where a held value came in: the statement that stored it, or the loop's own call that handed it to
the function that did (``meter.update(loss)``), and whether a Python number would do there."""

from __future__ import annotations

import ast
from dataclasses import dataclass

from app.diagnostics.context import Context
from app.diagnostics.holders import Cause
from app.diagnostics.numbers import number_fits, takes_number
from app.diagnostics.source import Add, LineFacts, resolve


@dataclass
class Place:
    """Where an item entered the container: the statement, and the value expression, as typed."""

    line: int
    facts: LineFacts | None
    value: ast.expr | None = None
    add: Add | None = None
    call_arg: ast.expr | None = None  # ``meter.update(loss)``: the argument the item came in as


def caller(context: Context, cause: Cause, step: int, tid: str | None, place: Place) -> Place | None:
    """The loop's own line that handed the item to the function that stored it."""
    facts = context.facts(step)
    if tid is None or facts is None or facts.func == cause.run.loop.func:
        return None
    for k in range(step + 1, cause.run.stop):
        outer = context.facts(k)
        if outer is None or outer.func != cause.run.loop.func:
            continue
        before = context.before(k)
        for node in ast.walk(outer.node) if outer.node is not None else ():
            if isinstance(node, ast.Call):  # by position or by name (``meter.update(val=loss)``)
                for arg in [*node.args, *(k.value for k in node.keywords if k.arg is not None)]:
                    if resolve(before, arg, outer.func) == tid:
                        return Place(context.line(k), outer, arg, call_arg=arg)
        return None
    return None


def number_fits_place(context: Context, place: Place) -> bool:
    """``.item()`` can be the cut: what takes the value (the function it is handed to, the container
    it is added to) would work as well with a Python number."""
    routes = context.routes()
    if routes is None or place.facts is None:
        return False
    if place.call_arg is not None:
        return number_fits(routes, place.facts.func, place.call_arg, place.facts.node)
    if place.add is not None:
        return takes_number(routes, routes.scope(place.facts.func), boxes=[place.add.container])
    return True  # a plain name: the chain rule asks about the name itself



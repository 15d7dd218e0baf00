"""Words every held-across-iterations finding uses: its title, and the sentence that quotes the
memory chart (the figures its readout shows at the steps it names)."""

from __future__ import annotations

from app.diagnostics.context import Context
from app.i18n import gettext as _
from app.units import fmt_bytes


def chart(context: Context, growth: tuple[float, int, int] | None, nodes: int) -> str:
    """The sentence that quotes the memory chart (the figures its readout shows at those steps)."""
    changes = context.memory
    if growth is None:
        return ""
    per, first, last = growth
    fields = {"growth": fmt_bytes(max(round(per), 0)), "first": fmt_bytes(changes[first].total_bytes),
              "first_step": first + 1, "last": fmt_bytes(changes[last].total_bytes), "last_step": last + 1,
              "graph": fmt_bytes(changes[last].graph_bytes), "nodes": nodes}
    if round(per) <= 0:
        return _(
            "The memory chart shows {last} at step {last_step} and barely grows: backward() already freed "
            "what those graphs saved. Their nodes still pile up, and a loop that skips backward() (an "
            "evaluation, a logging step) keeps everything they save."
        ).format(**fields)
    if not changes[last].graph_bytes:
        return _(
            "Memory grows by about {growth} per iteration: the memory chart shows {first} at step "
            "{first_step} and {last} at step {last_step}."
        ).format(**fields)
    return _(
        "Memory grows by about {growth} per iteration: the memory chart shows {first} at step "
        "{first_step} and {last} at step {last_step}, {graph} of it held only by the graph."
    ).format(**fields)


def titled(what: str, growth: tuple[float, int, int] | None) -> str:
    """The finding's title: what holds the graphs, and what it costs each time round."""
    effect = _("memory grows each time round") if growth is not None and round(growth[0]) > 0 else _(
        "its graph nodes pile up each time round")
    return _("{what}: {effect}").format(what=what, effect=effect)


"""What to call a tensor on the page, from ``Holding`` (who reaches it by name, who holds it).

A tensor is *named* when the user can reach it: a variable, or the ``.grad`` / ``._base`` of a named
tensor. Everything else is there because the autograd graph holds it (a saved tensor, the leaf behind
an ``AccumulateGrad``) and is described by that holder instead. Internal ids (``t3``, ``n7``) never
reach a label: a tensor nobody names or holds reads "unnamed tensor".

Names that differ only in their subscripts (``losses[0]`` … ``losses[999]``) belong to one *family*
(``losses[…]``): the views fold a family into one chip or one group of strips.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping

from app.i18n import N_
from app.i18n import gettext as _
from app.schema import NodeFact, TensorFact
from app.trace.holding import ACCUMULATE_GRAD, Holding, short_node_name

_BACKWARD = re.compile(r"Backward\d*$")
_SUBSCRIPT = re.compile(r"\[[^\[\]]*\]")
UNNAMED = N_("unnamed tensor")  # translated where it is said
MAX_FAMILIES = 3  # in one label: more are counted, not listed
MAX_HOLDERS = 4



def is_accumulate(node: NodeFact) -> bool:
    return node.variable is not None or short_node_name(node.name) == ACCUMULATE_GRAD


def tensor_kind(fact: TensorFact, named: bool = True) -> str:
    """The legend's words, shared by both views: leaf / nonleaf / nograd, and held (by the graph)."""
    kind = ("leaf" if fact.is_leaf else "nonleaf") if fact.requires_grad else "nograd"
    return kind if named else kind + " held"


def family(name: str) -> str:
    """``losses[3]`` and ``losses[17]`` are both ``losses[…]``; ``d['a']`` is ``d[…]``."""
    if "[" not in name:  # most names: no subscript to fold (this runs for every label, every step)
        return name
    return _SUBSCRIPT.sub("[…]", name)


def subscript(name: str) -> int | None:
    """The integer index of a name with one trailing subscript (``losses[3]`` → 3), else None."""
    if not name.endswith("]"):
        return None
    head, bracket, index = name[:-1].rpartition("[")
    if not bracket or "[" in head or not index.lstrip("-").isdigit():
        return None
    return int(index)


def family_label(pattern: str, low: int | None, high: int | None) -> str:
    """``losses[0…999]`` when the members are ``losses[i]`` for integers from low to high."""
    if low is None or high is None or pattern.count("[…]") != 1 or not pattern.endswith("[…]"):
        return pattern
    return pattern[:-3] + (f"[{low}]" if low == high else f"[{low}…{high}]")


def fold_names(names: Iterable[str]) -> str:
    """Several names for one tensor, each family once: ``x, losses[0…999]`` (at most a few)."""
    families: dict[str, list[str]] = {}
    for name in names:
        families.setdefault(family(name), []).append(name)
    parts = []
    for pattern, members in families.items():
        if len(members) == 1:
            parts.append(members[0])
            continue
        indices = [subscript(name) for name in members]
        if None in indices:
            parts.append(f"{pattern} ×{len(indices)}")
        else:
            parts.append(family_label(pattern, min(indices), max(indices)))  # type: ignore[type-var]
    if len(parts) > MAX_FAMILIES:
        parts = [*parts[:MAX_FAMILIES], _("+{n} more").format(n=len(parts) - MAX_FAMILIES)]
    return ", ".join(parts)


def holder_phrase(role: str) -> str:
    """``SinBackward0.self`` reads "self of Sin": the chip "self" inside SinBackward0."""
    if "." not in role:  # an AccumulateGrad holds a leaf nobody names
        return _("unnamed leaf")
    node, saved = role.split(".", 1)
    op = _BACKWARD.sub("", node) or node
    return _("{saved} of {node}").format(saved=saved, node=op)


def holders_text(roles: Iterable[str]) -> str:
    """``MulBackward0.self ×1000, SinBackward0.self``: each role once, with how many hold it so."""
    counts: dict[str, int] = {}
    for role in roles:
        counts[role] = counts.get(role, 0) + 1
    return roles_text(counts)


def roles_text(counts: Mapping[str, int]) -> str:
    """``holders_text`` of roles already counted."""
    parts = [role if n == 1 else f"{role} ×{n}" for role, n in counts.items()]
    if len(parts) > MAX_HOLDERS:
        parts = [*parts[:MAX_HOLDERS], _("+{n} more").format(n=len(parts) - MAX_HOLDERS)]
    return ", ".join(parts)


def _plain_first(name: str) -> tuple[bool, int, str]:
    return ("[" in name or "." in name or ":" in name, len(name), name)


def display_name(tid: str, names: Mapping[str, list[str]], holders: Mapping[str, list[str]]) -> str:
    """One short label: the user's names, else what holds it, else "unnamed tensor"."""
    if tid in names:
        # all the user's own names for it, plain ones first; of derived ones (x.grad) the first is enough
        own = sorted((n for n in names[tid] if not n.endswith((".grad", "._base"))), key=_plain_first)
        return fold_names(own) if own else names[tid][0]
    if tid in holders:
        return holder_phrase(holders[tid][0])
    return _(UNNAMED)


class NamesOf(Mapping[str, list[str]]):
    """``Holding``'s names as the mapping ``display_name`` reads: named tensors only."""

    def __init__(self, holding: Holding) -> None:
        self.holding = holding

    def __contains__(self, tid: object) -> bool:
        return isinstance(tid, str) and self.holding.is_named(tid)

    def __getitem__(self, tid: str) -> list[str]:
        if not self.holding.is_named(tid):
            raise KeyError(tid)
        return self.holding.names(tid)

    def __iter__(self) -> Iterator[str]:
        return iter(self.holding.named)

    def __len__(self) -> int:
        return len(self.holding.named)


def holders_of(holding: Holding, tid: str) -> list[str]:
    """Who in the graph holds ``tid``, oldest node first (so a label does not change when a newer
    node does), or holds a view of it (``…._base``)."""
    held = holding.held_by.get(tid)
    if not held:
        return holding.holders(tid)
    return [role for nid in sorted(held, key=id_order) for role in held[nid]]


def first_holder_of(holding: Holding, tid: str) -> str | None:
    """``holders_of(holding, tid)[0]`` (None when nothing holds it), without sorting every holder: a
    weight the graphs of a thousand iterations saved is labelled at every step that touches it."""
    held = holding.held_by.get(tid)
    if held:
        return held[min(held, key=id_order)][0]  # every node's list of roles has at least one
    holders = holding.holders(tid)
    return holders[0] if holders else None


class HoldersOf(Mapping[str, list[str]]):
    """``Holding``'s graph holders as a mapping: tensors some graph node holds (or holds a view of)."""

    def __init__(self, holding: Holding) -> None:
        self.holding = holding

    def __contains__(self, tid: object) -> bool:
        return isinstance(tid, str) and bool(holders_of(self.holding, tid))

    def __getitem__(self, tid: str) -> list[str]:
        found = holders_of(self.holding, tid)
        if not found:
            raise KeyError(tid)
        return found

    def __iter__(self) -> Iterator[str]:
        return iter(t for t in self.holding.held_by if self.holding.holders(t))

    def __len__(self) -> int:
        return sum(1 for _ in self)


def holder_label(holding: Holding, tid: str) -> str:
    """How a tensor no variable reaches is called: by its first graph holder, else "unnamed"."""
    first = first_holder_of(holding, tid)
    return holder_phrase(first) if first is not None else _(UNNAMED)


def label(holding: Holding, tid: str) -> str:
    """``display_name`` of ``tid`` now: its names, else its first graph holder, else "unnamed"."""
    if holding.is_named(tid):
        return display_name(tid, NamesOf(holding), {})
    return holder_label(holding, tid)


def id_order(ident: str) -> tuple[int, str]:
    """``t2`` before ``t10``: ids sort by their number."""
    digits = ident[1:]
    return (int(digits), ident) if digits.isdigit() else (0, ident)


def clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


__all__ = [
    "ACCUMULATE_GRAD", "UNNAMED", "HoldersOf", "NamesOf", "clip", "display_name", "family", "family_label",
    "first_holder_of", "fold_names", "holder_label", "holder_phrase", "holders_of", "holders_text",
    "id_order", "is_accumulate", "label", "roles_text", "short_node_name", "subscript", "tensor_kind",
]

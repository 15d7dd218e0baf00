"""What a storage is, for the memory view's groups: read from the trace's facts alone.

A run at model size holds dozens of storages; the reader asks first what they are. Each tensor is one
of these, decided from who reaches it (``app.trace.holding``: its variables, the ``.grad`` and
``._base`` pointers to it, the graph's holders) and its own flags:

* **gradient** — the ``.grad`` of a named tensor;
* **optimizer** — optimizer state: the engine names it ``opt.state[i]['exp_avg']``
  (``app/engine/names.py``), the index being the parameter's, as ``opt.state_dict()`` numbers it;
* **parameter** — a leaf that requires grad (what backward writes a ``.grad`` for), by the object
  that keeps it: ``model.conv.weight`` belongs to ``model.conv``; a plain variable to no module;
* **buffer** — a leaf that needs no gradient, kept as an attribute of an object (a module's
  ``running_mean``, a mask): named ``owner.attribute``;
* **data** — any other leaf that needs no gradient: inputs, targets, batches, constants;
* **yours** — every other tensor a name reaches: results the code keeps (``loss``, ``out``);
* **graph** — no name reaches it: activations only the autograd graph keeps alive
  (``Holding.storage_named`` is that one definition).

A storage is what the most telling of its tensors is, in the order above (a ``detach()`` of a
parameter is still the parameter's memory).
"""

from __future__ import annotations

import re
from typing import NamedTuple

from app.i18n import N_
from app.schema import TensorFact
from app.trace.holding import Holding

# (kind, title, hint), in the order the memory view shows them; marked here, translated where shown
KINDS = (
    ("parameter", N_("Parameters"), N_("leaves that require grad, by the module that keeps them")),
    ("gradient", N_("Gradients"), N_("the .grad of a tensor: what backward() wrote")),
    ("optimizer", N_("Optimizer state"), N_("what the optimizer keeps per parameter (momentum, exp_avg …)")),
    ("buffer", N_("Buffers"),
     N_("tensors an object keeps as attributes that need no gradient (running statistics …)")),
    ("data", N_("Data"), N_("other tensors that need no gradient: inputs, targets, batches")),
    ("yours", N_("Your other tensors"), N_("results your variables keep")),
    ("graph", N_("Activations held by the graph"),
     N_("storages only the autograd graph keeps alive: tensors saved for backward")),
)
RANK = {kind: rank for rank, (kind, _, _) in enumerate(KINDS)}
NO_MODULE = ""  # a parameter no object keeps: a plain variable

_OPTIMIZER_STATE = re.compile(r"\.state\[\d+\]")
# owner.attribute (model.0.weight; __init__:self.fc.weight while a function runs), no subscript
_ATTRIBUTE_PATH = re.compile(r"(?:\w+:)?[A-Za-z_]\w*(?:\.\w+)+")


class Kind(NamedTuple):
    kind: str
    module: str = NO_MODULE  # parameters: the object that keeps it ("model.conv"); else ""


GRAPH = Kind("graph")


def tensor_kind_of(holding: Holding, tid: str, fact: TensorFact) -> Kind:
    """What one tensor is at this step (``holding`` up to date with it)."""
    if not holding.is_named(tid):
        return GRAPH
    state = holding.state
    if state is not None:
        for owner in holding.pointers.get(tid, ()):
            if holding.is_named(owner) and state.tensors[owner].grad == tid:
                return Kind("gradient")
    own = holding.own.get(tid, ())
    if any(_OPTIMIZER_STATE.search(name) for name in own):
        return Kind("optimizer")
    attribute = next((name for name in own if _ATTRIBUTE_PATH.fullmatch(name)), None)
    if fact.is_leaf and fact.requires_grad:
        return Kind("parameter", attribute.rpartition(".")[0] if attribute else NO_MODULE)
    if fact.is_leaf:
        return Kind("buffer") if attribute else Kind("data")
    return Kind("yours")


def storage_kind(kinds: list[Kind]) -> Kind:
    """What a storage is, from what each of its tensors is (the first in ``KINDS`` order wins; among
    tensors of that kind, the first given)."""
    return min(kinds, key=lambda k: RANK[k.kind]) if kinds else GRAPH

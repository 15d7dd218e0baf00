"""The diagnostic rules. Each is a function ``(Context) -> Iterable[Diagnostic]``; ``RULES`` lists the
ids each one may emit, for the gallery and the docs."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from app.diagnostics.context import Context
from app.diagnostics.rules import (
    accumulate,
    cleared,
    clones,
    errors,
    grads,
    held,
    inference,
    inplace,
    nonleaf,
    replaced,
)
from app.schema import Diagnostic

Rule = Callable[[Context], Iterable[Diagnostic]]

RULES: dict[Rule, tuple[str, ...]] = {
    held.held_across_iterations: (held.CONTAINER_RULE, held.CHAIN_RULE),
    inplace.saved_modified: (inplace.SAVED_RULE,),
    inplace.alias_writes: (inplace.ALIAS_RULE,),
    grads.grad_stays_none: (grads.NONE_RULE,),
    nonleaf.nonleaf_grad_reads: (nonleaf.NONLEAF_RULE,),
    errors.runtime_errors: (
        errors.LEAF_RULE, errors.TWICE_RULE, errors.NO_GRAPH_RULE, errors.NON_SCALAR_RULE, errors.SAVED_RULE,
        inference.RULE,
    ),
    clones.unneeded_clones: (clones.RULE,),
    accumulate.accumulated_grads: (accumulate.RULE,),
    cleared.cleared_grads: (cleared.RULE,),
    replaced.replaced_params: (replaced.RULE,),
}

RULE_IDS: frozenset[str] = frozenset(rule_id for ids in RULES.values() for rule_id in ids)

"""The diagnostics index (histories built in one pass over the deltas) answers every question the
rules ask exactly as the whole step answers it, at every step of every golden trace.

The oracles here are the whole-step definitions the rules used before they read deltas (each step
expanded to v1 and scanned); the index must agree with them — order included, where a message
depends on it."""

from __future__ import annotations

from collections import deque

import pytest

from app.diagnostics.index import MODIFIED_MARK, Index, container_of, head_of
from app.diagnostics.source import tensors_named
from app.diagnostics.trace import detached_from, exclusive, label, reach, saved_by, version_bumps
from app.schema import DeltaTrace, RunResult, Step
from app.trace.delta import compress, expand
from app.trace.holding import holders_in, names_in
from tests.golden import load

GOLDEN = list(load())


def whole_reach(step: Step, roots) -> tuple[set[str], set[str], set[str]]:  # noqa: ANN001
    """(tensors, storages, nodes) kept alive by ``roots``: the rules' old whole-step reach."""
    tensors, storages, nodes = set(), set(), set()
    tq, nq = deque(t for t in roots if t in step.tensors), deque()
    while tq or nq:
        while tq:
            tid = tq.popleft()
            if tid in tensors or tid not in step.tensors:
                continue
            tensors.add(tid)
            fact = step.tensors[tid]
            if fact.storage is not None:
                storages.add(fact.storage)
            tq.extend(t for t in (fact.grad, fact.base) if t is not None)
            if fact.grad_fn is not None:
                nq.append(fact.grad_fn)
        while nq:
            nid = nq.popleft()
            if nid in nodes or nid not in step.nodes:
                continue
            nodes.add(nid)
            node = step.nodes[nid]
            nq.extend(n for n in node.next if n is not None)
            if node.variable is not None:
                tq.append(node.variable)
            tq.extend(t for t in node.saved.values() if t is not None)
    return tensors, storages, nodes


def whole_exclusive(step: Step, excluded: set[str]) -> tuple[int, set[str], set[str]]:
    _, all_storages, all_nodes = whole_reach(step, step.variables.values())
    _, storages, nodes = whole_reach(step, [t for k, t in step.variables.items() if k not in excluded])
    alone = all_storages - storages
    return sum(step.storages[s].nbytes for s in alone), alone, all_nodes - nodes


def edges_into(step: Step) -> dict[str, int]:
    counts: dict[str, int] = {}
    targets = []
    for fact in step.tensors.values():
        targets += [x for x in (fact.grad, fact.base, fact.grad_fn) if x is not None]
    for node in step.nodes.values():
        targets += [n for n in node.next if n is not None]
        targets += [node.variable] if node.variable is not None else []
        targets += [t for t in node.saved.values() if t is not None]
    for target in targets:
        counts[target] = counts.get(target, 0) + 1
    return counts


def whole_tensors_named(step: Step, names: set[str], func: str | None) -> set[str]:
    found = set()
    for key, tid in step.variables.items():
        local = key.split(":", 1)[1] if ":" in key else key
        if ":" in key and (func is None or not key.startswith(f"{func}:")):
            continue
        if local.split(".", 1)[0].split("[", 1)[0] in names:
            found.add(tid)
    return found


def _both(golden) -> tuple[RunResult, Index]:  # noqa: ANN001
    """The whole steps as the rules used to see them (``expand`` of the delta trace: its dicts in
    the replay's order), and the index of the same delta trace."""
    trace = DeltaTrace.model_validate(compress(golden.result))
    return expand(trace), Index(trace)


def _cases() -> list:
    return [pytest.param(g, id=g.name) for g in GOLDEN]


@pytest.mark.parametrize("golden", _cases())
def test_the_index_answers_as_the_whole_step(golden) -> None:  # noqa: ANN001
    v1, index = _both(golden)
    modified = []
    flagged = set()
    for k, step in enumerate(v1.steps):
        view = index.at(k)
        assert view.line == step.line
        names: dict[str, list[str]] = {}
        for name, tid in step.variables.items():
            names.setdefault(tid, []).append(name)
        for tid in step.tensors:
            assert view.names(tid) == names.get(tid, [])  # in the order the step lists them
            assert view.name_count(tid) == len(names.get(tid, []))
        users: dict[str, list[str]] = {}
        for tid, fact in step.tensors.items():
            if fact.storage is not None:
                users.setdefault(fact.storage, []).append(tid)
        for sid in step.storages:
            assert view.users(sid) == users.get(sid, [])
            assert view.user_count(sid) == len(users.get(sid, []))
            assert view.grad_user_count(sid) == sum(step.tensors[t].requires_grad for t in users.get(sid, []))
            expected = [(nid, name, tid) for nid, node in step.nodes.items()
                        for name, tid in node.saved.items()
                        if tid is not None and tid in step.tensors and step.tensors[tid].storage == sid]
            assert saved_by(view, sid) == expected
        refs = edges_into(step)
        for ident in [*step.tensors, *step.nodes]:
            assert view.refs(ident) == refs.get(ident, 0)
        containers = {c for key in step.variables if (c := container_of(key)) is not None}
        for container in containers:
            keys = [key for key in step.variables if container_of(key) == container]
            assert sorted(view.keys(container)) == sorted(keys)
        heads = {head_of(key) for key in step.variables}
        for func, head in heads:
            assert tensors_named(view, {head}, func) == whole_tensors_named(step, {head}, func)
        for tid in step.tensors:
            assert detached_from(view, tid) == _whole_detached_from(step, tid)
        before = v1.steps[k - 1] if k else None
        if before is not None:
            bumped = {t for t, f in step.tensors.items()
                      if t in before.tensors and (f.version or 0) > (before.tensors[t].version or 0)}
            assert version_bumps(index, k) == bumped
        for nid, node in step.nodes.items():
            for name, complaint in node.saved_errors.items():
                if MODIFIED_MARK in complaint and (nid, name) not in flagged:
                    flagged.add((nid, name))
                    modified.append((k, nid, name, complaint))
        _check_labels(view, step)
    assert [(k, nid, name, c) for k, _, _, nid, name, c in index.modified] == modified


def _whole_detached_from(step: Step, tid: str) -> list[str]:
    fact = step.tensors[tid]
    if fact.storage is None or fact.requires_grad or fact.grad_fn or fact.base:
        return []
    if step.storages.get(fact.storage) is None or step.storages[fact.storage].nbytes == 0:
        return []
    return [o for o, f in step.tensors.items() if o != tid and f.storage == fact.storage and f.requires_grad]


def _check_labels(view, step: Step) -> None:  # noqa: ANN001
    """A tensor no variable names reads as Holding names it, else by what holds it: never its id."""
    named = names_in(step)
    holders = holders_in(step)
    for tid in step.tensors:
        text = label(view, tid)
        assert tid not in text
        own = [n for n, t in step.variables.items() if t == tid]
        if own:
            best = sorted(own, key=lambda n: (("[" in n or "." in n or ":" in n), len(n), n))[0]
            assert text == f"`{best}`" or text.startswith(f"`{best[:79]}")
        elif tid in named:
            assert text.strip("`") in named[tid]  # x.grad, x._base
        elif tid in holders:
            from app.diagnostics.trace import held_by

            assert text in {held_by(role) for role in holders[tid]}
        else:
            assert text == "an unnamed tensor"


@pytest.mark.parametrize("golden", [g for g in _cases() if len(g.values[0].result["steps"]) <= 200])
def test_exclusive_bytes_equal_the_whole_step_difference(golden) -> None:  # noqa: ANN001
    """What only some variables keep alive (a container's items, one name): computed from the part
    they reach alone, it equals reach(every variable) − reach(the others) of the whole step."""
    v1, index = _both(golden)
    for k, step in enumerate(v1.steps):
        view = index.at(k)
        groups = [{key} for key in list(step.variables)[:40]]  # (the oracle costs a whole step per group)
        containers = {c for key in step.variables if (c := container_of(key)) is not None}
        groups += [{key for key in step.variables if container_of(key) == c} for c in containers]
        for keys in groups:
            assert exclusive(view, keys) == whole_exclusive(step, keys), (k, keys)


@pytest.mark.parametrize("golden", _cases())
def test_reach_equals_the_whole_step_reach(golden) -> None:  # noqa: ANN001
    v1, index = _both(golden)
    for k, step in enumerate(v1.steps[:200]):
        found = reach(index.at(k), step.variables.values())
        tensors, storages, nodes = whole_reach(step, step.variables.values())
        assert (set(found.tensors), found.storages, set(found.nodes)) == (tensors, storages, nodes)
        # Every fact of a step is reachable from its variables: what ``exclusive`` relies on.
        assert tensors == set(step.tensors) and nodes == set(step.nodes)


# ---- the rules' own reformulations, against the whole-step definitions they replace --------------

def _context(golden):  # noqa: ANN001, ANN202
    from app.diagnostics.context import Context

    trace = DeltaTrace.model_validate(compress(golden.result))
    return expand(trace), Context.build(trace, golden.source)


@pytest.mark.parametrize("golden", _cases())
def test_lifetimes_equal_the_step_by_step_scan(golden) -> None:  # noqa: ANN001
    """When each node was made and went away, who points at it, which tensors had it as grad_fn and
    which backward steps ran it: built from the histories, as scanning every whole step finds them."""
    import math

    from app.diagnostics.lifetimes import lifetimes

    v1, context = _context(golden)
    born: dict[str, int] = {}
    died: dict[str, float] = {}
    parents: dict[str, set[str]] = {}
    users: dict[str, set[str]] = {}
    ran: dict[str, list[int]] = {}
    for k, step in enumerate(v1.steps):
        for nid, node in step.nodes.items():
            born.setdefault(nid, k)
            for child in node.next:
                if child is not None:
                    parents.setdefault(child, set()).add(nid)
        for nid in born:
            if nid not in step.nodes and nid not in died:
                died[nid] = k
        for tid, fact in step.tensors.items():
            if fact.grad_fn is not None:
                users.setdefault(fact.grad_fn, set()).add(tid)
        if step.phase == "backward" and step.node is not None:
            ran.setdefault(step.node, []).append(k)
    life = lifetimes(context)
    assert life.born == born
    assert {n: d for n, d in life.died.items() if d != math.inf} == died
    assert {n: set(p) for n, p in life.parents.items()} == parents
    assert {n: set(u) for n, u in life.users.items()} == users
    assert life.ran == ran


@pytest.mark.parametrize("golden", _cases())
def test_graph_leaves_equal_the_whole_step_reach(golden) -> None:  # noqa: ANN001
    """The flow's leaves of a tensor (each node's found once, shared across steps) are the leaves whole
    reach finds behind it at that step."""
    from app.diagnostics.flow import Flow

    v1, context = _context(golden)
    flow = Flow(context)
    for k, step in enumerate(v1.steps[:300]):
        view = context.at(k)
        for tid, fact in step.tensors.items():
            _tensors, _storages, nodes = whole_reach(step, [tid])
            expected = {step.nodes[n].variable for n in nodes if step.nodes[n].variable is not None}
            if fact.grad_fn is None:
                expected = {tid} if fact.requires_grad else set()
            assert flow.graph_leaves(view, tid) == expected, (k, tid)


@pytest.mark.parametrize("golden", _cases())
def test_held_nodes_equal_the_whole_step_scan(golden) -> None:  # noqa: ANN001
    """A loop run's held nodes — made before its last iteration, alive at its end — as the run's last
    whole step lists them."""
    from app.diagnostics.holders import held_nodes
    from app.diagnostics.lifetimes import lifetimes
    from app.diagnostics.loops import loop_runs

    v1, context = _context(golden)
    life = lifetimes(context)
    for run in loop_runs(context):
        bounds = run.bounds()
        if len(bounds) < 3:
            continue
        last = v1.steps[run.last]
        first_seen: dict[str, int] = {}
        for k, step in enumerate(v1.steps[:run.stop]):
            for nid in step.nodes:
                first_seen.setdefault(nid, k)
        expected = {nid for nid, node in last.nodes.items() if not node.name.endswith("AccumulateGrad")
                    and bounds[0] <= first_seen[nid] < bounds[-3]}
        assert set(held_nodes(life, run)) == expected


@pytest.mark.parametrize("golden", [g for g in _cases() if len(g.values[0].result["steps"]) <= 200])
def test_written_in_place_later_equals_the_step_by_step_scan(golden) -> None:  # noqa: ANN001
    """unneeded-clone reads the index's writes (version rises, and numbers that moved at the same
    version: a write torch does not count); the old way compared every later step."""
    from app.diagnostics.rules.clones import _modified

    v1, context = _context(golden)
    steps = v1.steps
    for start, step in enumerate(steps):
        for tid in step.tensors:
            base = step.tensors[tid]
            seen = {t: f for t, f in step.tensors.items() if f.storage == base.storage}
            written = False
            for later in steps[start + 1:]:
                if later.tensors.get(tid) is None:
                    break
                for t, o in later.tensors.items():
                    if o.storage != base.storage:
                        continue
                    was = seen.setdefault(t, o)
                    if (o.version or 0) > (was.version or 0) or (
                            (o.version or 0) == (was.version or 0) and was.storage == o.storage
                            and (o.values != was.values or o.summary != was.summary)):
                        written = True
                    seen[t] = o if (o.version or 0) >= (was.version or 0) else was
                if written:
                    break
            assert _modified(context, start, tid) == written, (start, tid)


def test_an_index_is_freed_when_dropped_without_a_collection() -> None:
    """No reference cycle holds an index (its relations share a read count, not the index): a page
    request's index goes by reference counting, not at the next collection that walks it."""
    import gc
    import weakref

    golden = next(g for g in GOLDEN if len(g.result["steps"]) > 5)
    trace = DeltaTrace.model_validate(compress(golden.result))
    enabled = gc.isenabled()
    gc.disable()
    try:
        index = Index(trace)
        assert index.names.members("t1", 0) is not None and index.reads > 0
        gone = weakref.ref(index)
        del index
        assert gone() is None
    finally:
        if enabled:
            gc.enable()

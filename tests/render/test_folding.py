"""The change-based views agree with whole steps, and what repeats is folded: a leak of n iterations
is a handful of elements whatever n is, its payload grows linearly, and every folded member is still
there (counted, listed, with its facts)."""

from __future__ import annotations

import os

import pytest

from app.render import build_explorer, fmt, frame_at
from app.render.memory import MAX_ROWS
from app.render.names import display_name, id_order, tensor_kind
from app.render.variables import MAX_CHIPS
from app.schema import DeltaTrace, RunResult, Step
from app.trace.delta import compress
from app.trace.holding import holders_in, named_storages, names_in
from tests.golden import load
from tests.render.conftest import explore, shown_strips, trace, trace_v1

GOLDEN = [g for g in load() if len(g.result["steps"]) <= 300]  # the 1000-step loop is stepping's


def _count(frame, k: int | None) -> int:
    return int(frame.text(k).replace(",", "")) if k is not None and frame.text(k) else 0


def _folded(view, frame, named: bool) -> int:
    """Storages counted in the folds of the groups of named storages (every kind but the graph's), or
    of the graph's."""
    folds = [f for g in view.memory.leaf_groups() if (g.name != "graph") == named
             for f in g.families if f.fold_k is not None and frame.shows(f.fold_k)]
    return sum(_count(frame, f.count_k) for f in folds)


def holders(step: Step) -> dict[str, list[str]]:
    """``holders_in``, oldest node first: the order labels pick their holder in."""
    nodes = dict(sorted(step.nodes.items(), key=lambda item: id_order(item[0])))
    return holders_in(step.model_copy(update={"nodes": nodes}))


def check_memory(view, step: Step, index: int) -> None:
    """Every storage of the whole step is drawn in its group or counted in a fold, and every drawn
    strip says what the whole step says about it."""
    frame = frame_at(view, index)
    named, names, held = named_storages(step), names_in(step), holders(step)
    shown: dict[bool, set[str]] = {True: set(), False: set()}
    for group, strip in shown_strips(view, index):
        sid = frame.ref(strip.k)
        assert sid in step.storages
        shown[group.name != "graph"].add(sid)
        assert (group.name != "graph") == (sid in named)
        tids = sorted((t for t, f in step.tensors.items() if f.storage == sid), key=id_order)[:MAX_ROWS]
        assert [frame.ref(r.k) for r in strip.rows] == tids
        for row, tid in zip(strip.rows, tids, strict=True):
            fact = step.tensors[tid]
            assert frame.text(row.label_k) == display_name(tid, names, held)
            assert frame.state(row.k) == tensor_kind(fact, tid in names)
            assert frame.text(row.version_k) == ("" if fact.version is None else f"v{fact.version}")
        storage = step.storages[sid]
        if strip.valued:
            cells = frame.text(strip.cells_k)
            assert (cells.split(" ") if cells else []) == [fmt.scalar(v) for v in storage.values]
        if group.name == "graph":
            for role in {r for t in tids for r in held.get(t, [])}:
                assert role in frame.text(strip.note_k)
    for is_named in (True, False):
        expected = {s for s in step.storages if (s in named) == is_named}
        assert shown[is_named] <= expected
        assert len(shown[is_named]) + _folded(view, frame, is_named) == len(expected)
    assert frame.shows(view.memory.empty_k) == (not step.storages)


def check_variables(view, step: Step, index: int) -> None:
    frame = frame_at(view, index)
    reachable = {n: t for n, t in step.variables.items() if t in step.tensors}
    covered = 0
    for chip in view.variables.chips:
        if not frame.shows(chip.k):
            continue
        if frame.state(chip.k) == "fold":
            assert frame.ref(chip.k) is None
            covered += int(frame.text(chip.shape_k).lstrip("×").replace(",", ""))
        else:
            name = frame.text(chip.name_k)
            assert frame.ref(chip.k) == reachable[name]
            assert frame.state(chip.k) == tensor_kind(step.tensors[reachable[name]])
            covered += 1
    more = view.variables.more_k
    covered += int(frame.text(more).lstrip("+").split()[0].replace(",", "")) if frame.shows(more) else 0
    assert covered == len(reachable)


def check_facts(view, step: Step, index: int) -> None:
    facts = view.facts
    for tid, fact in step.tensors.items():
        runs = facts.details[tid]
        (entry,) = [e for a, b, e in runs if a <= index <= b]
        rows = dict(facts.pairs[i] for i in facts.entries[entry])
        assert rows["shape"] == fmt.shape(fact.shape) and rows["dtype"] == fact.dtype
        # the counter first; a parameter born past 0 adds why after " · " (tests/render/test_explain.py)
        assert rows["_version"].split(" · ")[0] == ("—" if fact.version is None else str(fact.version))
        assert rows["id"].split(" ")[0] == tid
        assert rows["title"] == display_name(tid, names_in(step), holders(step))


@pytest.mark.parametrize("golden", GOLDEN, ids=[g.name for g in GOLDEN])
def test_every_step_agrees_with_the_whole_step(golden) -> None:
    v1 = RunResult.model_validate(golden.result)
    view = build_explorer(DeltaTrace.model_validate(compress(golden.result)), golden.source)
    assert view.lines == tuple(s.line for s in v1.steps)
    for index, step in enumerate(v1.steps):
        check_memory(view, step, index)
        check_variables(view, step, index)
        check_facts(view, step, index)
        assert view.stdout_at(index) == step.stdout


LEAK = (
    "w = torch.randn(4, requires_grad=True)\n"
    "losses = []\n"
    "for i in range({n}):\n"
    "    loss = (w * i).sin()\n"
    "    losses.append(loss)\n"
)


OURS = ("strip", "fold", "group", "memory-empty", "var", "variables-empty", "variables-more")


def _ours(view) -> dict:
    """Keys of the memory view and the variables bar, with the runs they hold."""
    tracks = view.tracks
    return {k: sum(len(t.get(k, ())) for t in (tracks.vis, tracks.text, tracks.state, tracks.ref))
            for identity, k in tracks.keys.items() if identity[0] in OURS}


def test_a_leak_is_a_few_elements_whatever_its_length() -> None:
    views = {n: explore(LEAK.format(n=n)) for n in (6, 12, 24)}
    elements = {n: len(list(v.memory.strips())) for n, v in views.items()}
    assert elements[6] == elements[12] == elements[24] <= 12
    chips = {n: len(v.variables.chips) for n, v in views.items()}
    assert chips[6] == chips[12] == chips[24] == 5  # w, loss, and 3 for losses[…] before it folds
    ours = {n: _ours(v) for n, v in views.items()}
    assert len(ours[6]) == len(ours[12]) == len(ours[24])
    # what the page replays grows with the iterations, linearly: 12 more cost about twice 6 more
    runs = {n: sum(ours[n].values()) + sum(len(e) for e in v.facts.entries) for n, v in views.items()}
    assert runs[24] - runs[12] <= 2.2 * (runs[12] - runs[6])


def test_the_folded_leak_counts_and_lists_every_member() -> None:
    n = 12
    code = LEAK.format(n=n)
    view, last = explore(code), trace_v1(code).steps[-1]
    frame = frame_at(view)
    losses = [last.variables[f"losses[{i}]"] for i in range(n)]
    (fam,) = [f for g in view.memory.groups for f in g.families if f.title == "losses[…]"]
    shown = [frame.ref(s.rows[0].k) for s in (*fam.first, *fam.last) if frame.shows(s.k)]
    # the newest loss is also `loss`, a name of its own: the family is losses[0 … n-2]
    assert shown == [losses[0], losses[1], losses[n - 2]]
    assert frame.shows(fam.fold_k) and frame.text(fam.count_k) == str(n - 4)
    members = [e for e in view.memory.folds[fam.fold_k] if e[2] <= frame.step <= e[3]]
    assert sorted(e[1] for e in members) == sorted(losses[: n - 1])
    (chip,) = [c for c in view.variables.chips
               if frame.shows(c.k) and frame.text(c.name_k).startswith("losses")]
    assert frame.text(chip.name_k) == f"losses[0…{n - 1}]" and frame.text(chip.shape_k) == f"×{n}"
    names = {e[0]: e[1] for e in view.variables.folds[chip.fold_k] if e[2] <= frame.step <= e[3]}
    assert names == {f"losses[{i}]": losses[i] for i in range(n)}
    for tid in losses:  # every folded member keeps its facts
        (entry,) = [e for a, b, e in view.facts.details[tid] if a <= frame.step <= b]
        assert dict(view.facts.pairs[i] for i in view.facts.entries[entry])["names"].startswith("loss")


def test_a_rebound_name_reuses_its_strip() -> None:
    loop = "w = torch.ones(3, requires_grad=True)\nfor i in range({n}):\n    y = w * i\n"
    short, long = explore(loop.format(n=3)), explore(loop.format(n=8))
    assert len(list(short.memory.strips())) == len(list(long.memory.strips()))
    steps = trace_v1(loop.format(n=8)).steps
    (y_strip,) = [s for g, s in long.memory.strips() if any(
        frame_at(long, i).text(r.label_k) == "y" for i in range(len(steps)) for r in s.rows)]
    for index, step in enumerate(steps):
        if "y" in step.variables:  # one element follows y from storage to storage
            assert frame_at(long, index).ref(y_strip.k) == step.tensors[step.variables["y"]].storage


def test_a_few_names_of_a_family_have_chips_of_their_own() -> None:
    code = LEAK.format(n=3)
    view, last = explore(code), trace_v1(code).steps[-1]
    frame = frame_at(view)
    chips = {frame.text(c.name_k): frame.ref(c.k) for c in view.variables.chips if frame.shows(c.k)}
    assert chips == last.variables  # w, loss, losses[0], losses[1], losses[2]


def test_names_beyond_the_cap_are_counted_and_listed() -> None:
    extra = 3
    code = "".join(f"v{i} = torch.ones(1)\n" for i in range(MAX_CHIPS + extra))
    view = explore(code)
    frame = frame_at(view)
    assert len(view.variables.chips) == MAX_CHIPS  # one name each
    assert frame.shows(view.variables.more_k) and frame.text(view.variables.more_k) == f"+{extra} more"
    listed = [e[0] for e in view.variables.folds[view.variables.more_k]]
    assert listed == [f"v{i}" for i in range(MAX_CHIPS, MAX_CHIPS + extra)]
    assert len(trace(code).steps) == MAX_CHIPS + extra


def test_the_same_run_gives_the_same_page_in_any_process() -> None:
    """No set order leaks into the payload (string hashes differ from process to process)."""
    import subprocess
    import sys

    probe = (
        "import hashlib, json; from app.render import build_explorer, client_payload; "
        "from app.schema import DeltaTrace; from app.trace.delta import compress; "
        "from tests.golden import load; "
        "g = next(g for g in load() if 'losses.append(loss)' in g.source); "
        "view = build_explorer(DeltaTrace.model_validate(compress(g.result)), g.source); "
        "print(hashlib.sha256(json.dumps(client_payload(view)).encode()).hexdigest())"
    )
    digests = {
        subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True,
                       env={**os.environ, "PYTHONHASHSEED": seed}).stdout
        for seed in ("1", "2")
    }
    assert len(digests) == 1

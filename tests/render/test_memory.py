"""The memory view over steps: groups, versions, changed cells, scaled storages."""

from __future__ import annotations

from app.render import frame_at
from tests.render.conftest import explore, row_of, shown_strips, strip_of, trace_v1

HELD = (
    "a = torch.tensor([1., 2., 3.], requires_grad=True)\n"
    "h = a.exp()\n"
    "y = h.sin()\n"
    "del h\n"
    "y.sum().backward()\n"
)


def test_a_storage_only_the_graph_keeps_moves_to_held_by_the_graph() -> None:
    view = explore(HELD)
    steps = trace_v1(HELD).steps
    h = steps[1].variables["h"]
    h_storage = steps[1].tensors[h].storage
    group, strip = strip_of(view, h, 2)
    assert group.name == "yours" and frame_at(view, 2).ref(strip.k) == h_storage
    after_del = 3  # the step after `del h`: SinBackward0 saved h, nobody names it
    group, strip = strip_of(view, h, after_del)
    assert group.name == "graph" and frame_at(view, after_del).ref(strip.k) == h_storage
    note = frame_at(view, after_del).text(strip.note_k)
    assert "SinBackward0.self" in note and "ExpBackward0.result" in note
    label = frame_at(view, after_del).text(row_of(view, h, after_del).label_k)
    assert label == "result of Exp"  # its oldest holder
    # backward frees the saved tensors: the storage is gone from the last step
    last = view.step_count - 1
    assert all(frame_at(view, last).ref(s.k) != h_storage for _, s in shown_strips(view, last))


def test_in_place_through_an_alias_bumps_both_versions_and_marks_changed_cells() -> None:
    code = "x = torch.zeros(3)\nalias = x.detach()\nalias.add_(1)\nz = x * 2\n"
    view = explore(code)
    x = trace_v1(code).steps[0].variables["x"]
    bump_step = 2
    _, strip = strip_of(view, x, bump_step)
    assert len(strip.rows) == 2  # x and alias share one strip
    at, after, before = frame_at(view, bump_step), frame_at(view, bump_step + 1), frame_at(view, 1)
    for row in strip.rows:
        assert at.text(row.version_k) == "v1" and at.state(row.version_k) == "bump"
        assert after.state(row.version_k) == ""  # marked once, at the bump
        assert after.text(row.version_k) == "v1"
    assert at.text(strip.cells_k).split(" ") == ["1.", "1.", "1."]
    assert before.text(strip.cells_k).split(" ") == ["0.", "0.", "0."]
    assert at.state(strip.cells_k).split() == ["0", "1", "2"]  # every cell changed, at that step only
    assert before.state(strip.cells_k) == "" and after.state(strip.cells_k) == ""


def test_large_storages_are_drawn_scaled_with_their_size() -> None:
    code = "big = torch.zeros(1000)\nhalf = big[:500]\nodd = big[1::2]\n"
    view = explore(code)
    ((_, strip),) = shown_strips(view)
    assert strip.scaled and strip.cells == 0
    assert strip.size == "1000 × float32 · 3.9 KiB" and strip.scale == "scaled: 32 per block"
    frame = frame_at(view, 2)
    levels = {frame.text(r.label_k): r.levels for r in strip.rows}
    assert levels["big"] == (4,) * 32
    assert levels["half"][:15] == (4,) * 15 and levels["half"][17:] == (0,) * 15
    assert set(levels["odd"]) == {2}


def test_rows_carry_the_legend_kind() -> None:
    code = "w = torch.ones(2, requires_grad=True)\nv = w * 2\nd = v.detach()\n"
    view = explore(code)
    frame = frame_at(view)
    kinds = {frame.text(r.label_k): frame.state(r.k) for _, s in shown_strips(view) for r in s.rows}
    # w * 2 saves the wrapped number 2 for backward: a tensor only the graph holds
    assert kinds == {"w": "leaf", "v": "nonleaf", "d": "nograd", "other of Mul": "nograd held"}


def test_a_strip_shows_no_internal_id() -> None:
    view = explore(HELD)
    for step in range(view.step_count):
        frame = frame_at(view, step)
        for _, strip in shown_strips(view, step):
            words = [frame.text(k) for k in (strip.note_k, strip.more_k)] + [strip.size]
            words += [frame.text(r.label_k) for r in strip.rows]
            assert not any(w.startswith(("t", "s", "n")) and w[1:].isdigit() for w in " ".join(words).split())


def test_a_storage_keeps_its_place_when_a_view_joins_it() -> None:
    code = "x = torch.ones(3)\nc = x.clone()\nd = x.detach()\n"
    view = explore(code)
    last = trace_v1(code).steps[-1]
    order = [frame_at(view).ref(strip.k) for _, strip in shown_strips(view)]
    x, c = (last.tensors[last.variables[n]].storage for n in ("x", "c"))
    assert order == [x, c]  # x's strip stays first, though "x" became "x, d" after c was made


def test_ending_a_storages_marks_gives_the_record_made_again(monkeypatch) -> None:  # noqa: ANN001
    """The step after a storage's "changed" / "bump" marks, the builder clears them in its last record
    instead of making it again: on the golden traces that is what ``_record`` would make."""
    from app.render import build_explorer, memory
    from app.render.memory_records import unmarked
    from app.schema import DeltaTrace
    from app.trace.delta import compress
    from tests.golden import load

    checked = 0
    update = memory.MemoryBuilder._update

    def both(self, sid, step, touched, unmark=False):  # noqa: ANN001, ANN202
        nonlocal checked
        prev = self.records.get(sid)
        storage = step.state.storages.get(sid)
        if unmark and prev is not None and storage is not None:
            assert unmarked(prev) == self._record(sid, storage, step, prev)
            checked += 1
        return update(self, sid, step, touched, unmark)

    monkeypatch.setattr(memory.MemoryBuilder, "_update", both)
    for golden in list(load())[::3]:  # a third of them: dozens of such records
        build_explorer(DeltaTrace.model_validate(compress(golden.result)), golden.source)
    assert checked > 30

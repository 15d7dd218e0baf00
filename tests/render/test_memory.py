"""The memory view over steps: groups, versions, changed cells, scaled storages."""

from __future__ import annotations

from app.render import frame_at
from tests.render.conftest import explore, trace

HELD = (
    "a = torch.tensor([1., 2., 3.], requires_grad=True)\n"
    "h = a.exp()\n"
    "y = h.sin()\n"
    "del h\n"
    "y.sum().backward()\n"
)


def _strips(view, storage: str):
    return [s for g in view.memory.groups for s in g.strips if s.storage == storage]


def _shown_at(view, k: int, step: int) -> bool:
    return frame_at(view, step).shows(k)


def test_a_storage_only_the_graph_keeps_moves_to_held_by_the_graph() -> None:
    view = explore(HELD)
    result = trace(HELD)
    h_storage = result.steps[1].tensors[result.steps[1].variables["h"]].storage
    named, held = sorted(_strips(view, h_storage), key=lambda s: s.group != "named")
    assert (named.group, held.group) == ("named", "graph")
    after_del = 3  # the step after `del h`: SinBackward0 saved h, nobody names it
    assert _shown_at(view, named.k, 2) and not _shown_at(view, named.k, after_del)
    assert _shown_at(view, held.k, after_del) and not _shown_at(view, held.k, 2)
    note = frame_at(view, after_del).text(held.note_k)
    assert "SinBackward0.self" in note and "ExpBackward0.result" in note
    # backward frees the saved tensors: the storage is gone from the last step
    assert not _shown_at(view, held.k, view.step_count - 1)


def test_in_place_through_an_alias_bumps_both_versions_and_marks_changed_cells() -> None:
    code = "x = torch.zeros(3)\nalias = x.detach()\nalias.add_(1)\nz = x * 2\n"
    view = explore(code)
    (strip,) = [s for g in view.memory.groups for s in g.strips if len(s.rows) >= 2]
    bump_step = 2
    for row in strip.rows:
        assert frame_at(view, bump_step).text(row.version_k) == "v1"
        assert frame_at(view, bump_step).state(row.version_k) == "bump"
        assert frame_at(view, bump_step + 1).state(row.version_k) == ""  # marked once, at the bump
    cells = [frame_at(view, bump_step).text(k) for k in strip.cell_keys]
    assert cells == ["1.", "1.", "1."]
    assert all(frame_at(view, bump_step).state(k) == "changed" for k in strip.cell_keys)
    assert all(frame_at(view, 1).state(k) == "" for k in strip.cell_keys)


def test_large_storages_are_drawn_scaled_with_their_size() -> None:
    code = "big = torch.zeros(1000)\nhalf = big[:500]\nodd = big[1::2]\n"
    view = explore(code)
    (strip,) = [s for g in view.memory.groups for s in g.strips]
    assert strip.scaled and strip.cells == 0 and strip.cell_keys == ()
    assert strip.size == "1000 × float32 · 3.9 KiB" and strip.scale == "scaled: 32 per block"
    levels = {frame_at(view, 2).text(r.label_k): r.levels for r in strip.rows}
    assert levels["big"] == (4,) * 32
    assert levels["half"][:15] == (4,) * 15 and levels["half"][17:] == (0,) * 15
    assert set(levels["odd"]) == {2}


def test_rows_carry_the_legend_kind() -> None:
    code = "w = torch.ones(2, requires_grad=True)\nv = w * 2\nd = v.detach()\n"
    view = explore(code)
    kinds = {}
    for strip in (s for g in view.memory.groups for s in g.strips):
        for row in strip.rows:
            kinds[frame_at(view).text(row.label_k)] = frame_at(view).state(row.k)
    # w * 2 saves the wrapped number 2 for backward: a tensor only the graph holds
    assert kinds == {"w": "leaf", "v": "nonleaf", "d": "nograd", "other of Mul": "nograd held"}

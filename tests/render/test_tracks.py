"""Runs: the compact per-step state the page replays without asking the server."""

from __future__ import annotations

from app.render.tracks import Frame, Tracks, value_at


def test_runs_merge_consecutive_equal_values_and_answer_by_step() -> None:
    tracks = Tracks()
    k = tracks.key(("thing",))
    for step, text in [(0, "a"), (1, "a"), (2, "b"), (5, "b"), (6, "b")]:
        tracks.set_text(k, step, text)
        tracks.show(k, step)
    assert tracks.text[k] == [[0, 1, "a"], [2, 2, "b"], [5, 6, "b"]]
    assert tracks.vis[k] == [[0, 2, 1], [5, 6, 1]]
    assert [value_at(tracks.text[k], s) for s in range(8)] == ["a", "a", "b", None, None, "b", "b", None]
    frame = Frame(tracks, 3)
    assert not frame.shows(k) and frame.text(k, "-") == "-"
    assert Frame(tracks, 5).shows(k)


def test_keys_are_stable_and_dense() -> None:
    tracks = Tracks()
    assert [tracks.key(("a",)), tracks.key(("b",)), tracks.key(("a",))] == [0, 1, 0]


def test_elements_without_a_visibility_track_always_show() -> None:
    tracks = Tracks()
    static, never = tracks.key(("static",)), tracks.key(("never",))
    tracks.vis.setdefault(never, [])
    assert Frame(tracks, 0).shows(static) and not Frame(tracks, 0).shows(never)

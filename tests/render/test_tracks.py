"""Tracks: the compact per-step state the page replays without asking the server, recorded as changes."""

from __future__ import annotations

from app.render.tracks import Frame, Tracks, value_at


def test_changes_become_runs_that_answer_by_step() -> None:
    tracks = Tracks()
    k = tracks.key(("thing",))
    tracks.change_vis(k, 0, True)
    tracks.change_text(k, 0, "a")
    tracks.change_text(k, 2, "b")
    tracks.change_vis(k, 3, False)
    tracks.change_vis(k, 5, True)
    tracks.change_text(k, 5, "b")  # the same text again: the run goes on
    tracks.change_ref(k, 1, "t1")
    tracks.close(7)
    assert tracks.text[k] == [[0, 1, "a"], [2, 6, "b"]]
    assert tracks.vis[k] == [[0, 2, 1], [5, 6, 1]]
    assert tracks.ref[k] == [[1, 6, "t1"]]
    assert [value_at(tracks.vis[k], s) for s in range(8)] == [1, 1, 1, None, None, 1, 1, None]
    frame = Frame(tracks, 3)
    assert not frame.shows(k) and frame.text(k, "-") == "b" and frame.ref(k) == "t1"
    assert Frame(tracks, 5).shows(k) and Frame(tracks, 0).ref(k) is None


def test_changed_twice_in_one_step_the_last_word_wins() -> None:
    tracks = Tracks()
    k = tracks.key(("x",))
    tracks.change_state(k, 0, "leaf")
    tracks.change_state(k, 4, "bump")
    tracks.change_state(k, 4, "leaf")  # back to what it was: one run, as if nothing happened
    tracks.change_text(k, 2, "v1")
    tracks.change_text(k, 2, None)
    tracks.close(6)
    assert tracks.state[k] == [[0, 5, "leaf"]]
    assert tracks.text[k] == []


def test_keys_are_stable_and_dense() -> None:
    tracks = Tracks()
    assert [tracks.key(("a",)), tracks.key(("b",)), tracks.key(("a",))] == [0, 1, 0]


def test_elements_without_a_visibility_track_always_show() -> None:
    tracks = Tracks()
    static, never = tracks.key(("static",)), tracks.key(("never",))
    tracks.change_vis(never, 0, False)
    tracks.close(3)
    assert Frame(tracks, 0).shows(static) and not Frame(tracks, 0).shows(never)

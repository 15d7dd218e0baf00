"""Per-step state of the page's dynamic elements, recorded as changes so 10,000 steps stay small.

Every element whose visibility, text, state or tensor changes while the user steps gets a small
integer key ``k`` (the ``data-k`` attribute in the HTML). For each key we keep up to four tracks,
each a list of runs ``[first_step, last_step, value]`` (inclusive, sorted, non-overlapping):

* ``vis``: the element is shown during the run (value is always ``1``); hidden elsewhere;
* ``text``: its text content;
* ``state``: a space-separated list of state words for CSS (``bump``, ``changed``, ``freed`` …);
* ``ref``: the tensor it stands for (its ``data-t``), for elements that show one tensor, then another.

A builder fed by a delta replay (``app.render.steps``) says what an element *becomes* from a step
on, until its next change (``change_vis`` / ``change_text`` / ``change_state`` / ``change_ref``), so
recording costs time proportional to the changes, never to steps × elements. ``close(count)`` ends
the open runs at the last step; call it once, after the last step. The server renders the page for
one step with ``Frame``; ``static/explorer.js`` replays the runs to switch steps without a request.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Any

Run = list[Any]  # [first, last, value]; last is None while the run is open


def change(runs: list[Run], step: int, value: Any) -> None:
    """The track takes ``value`` from ``step`` on (None: no value). Steps come in order."""
    if runs and runs[-1][1] is None:
        first, _, current = runs[-1]
        if current == value:
            return
        if first == step:  # changed twice in one step: the last word wins
            runs.pop()
            if runs and runs[-1][1] == step - 1 and runs[-1][2] == value:
                runs[-1][1] = None  # back to what it was just before: the earlier run goes on
                return
        else:
            runs[-1][1] = step - 1
    if value is not None:
        runs.append([step, None, value])


def close_runs(runs: list[Run], count: int) -> None:
    """End the open run, if any, at the last step."""
    if runs and runs[-1][1] is None:
        runs[-1][1] = count - 1


def value_at(runs: list[Run], step: int) -> Any:
    """The value a track has at ``step``, or None outside every run (binary search)."""
    lo, hi = 0, len(runs) - 1
    while lo <= hi:
        mid = (lo + hi) // 2
        first, last, value = runs[mid]
        if step < first:
            hi = mid - 1
        elif last is not None and step > last:
            lo = mid + 1
        else:
            return value
    return None


def _runs_of(track: dict[int, list[Run]], k: int) -> list[Run]:
    """The key's runs, made on its first change (``setdefault(k, [])`` would build a list on every
    one of the hundreds of thousands of changes a long run records)."""
    runs = track.get(k)
    if runs is None:
        runs = track[k] = []
    return runs


@dataclass
class Tracks:
    """Allocates keys for identities (any hashable) and records their changes."""

    keys: dict[Hashable, int] = field(default_factory=dict)
    vis: dict[int, list[Run]] = field(default_factory=dict)
    text: dict[int, list[Run]] = field(default_factory=dict)
    state: dict[int, list[Run]] = field(default_factory=dict)
    ref: dict[int, list[Run]] = field(default_factory=dict)

    def key(self, identity: Hashable) -> int:
        found = self.keys.get(identity)
        if found is None:
            found = self.keys[identity] = len(self.keys)
        return found

    def change_vis(self, k: int, step: int, shown: bool) -> None:
        """From ``step`` on (until its next change), the element is shown or hidden. An element
        with a visibility track is hidden wherever no run says otherwise."""
        change(_runs_of(self.vis, k), step, 1 if shown else None)

    def change_text(self, k: int, step: int, text: str | None) -> None:
        """From ``step`` on, the element reads ``text`` (None: no text of its own)."""
        change(_runs_of(self.text, k), step, text)

    def change_state(self, k: int, step: int, state: str) -> None:
        """From ``step`` on, the element's state words are ``state`` ("" for none)."""
        change(_runs_of(self.state, k), step, state or None)

    def change_ref(self, k: int, step: int, tensor: str | None) -> None:
        """From ``step`` on, the element stands for ``tensor`` (None: for none)."""
        change(_runs_of(self.ref, k), step, tensor)

    def drop(self, keys: list[int]) -> None:
        """Forget what was recorded for elements the page will not draw after all."""
        for track in (self.vis, self.text, self.state, self.ref):
            for k in keys:
                track.pop(k, None)

    def close(self, count: int) -> None:
        """End every run still open at the last step, ``count - 1``."""
        for track in (self.vis, self.text, self.state, self.ref):
            for runs in track.values():
                close_runs(runs, count)

    def runs(self) -> int:
        """How many runs all tracks hold (what the page's payload grows with)."""
        return sum(len(r) for track in (self.vis, self.text, self.state, self.ref) for r in track.values())


@dataclass(frozen=True)
class Frame:
    """The state of every dynamic element at one step: what the server renders first."""

    tracks: Tracks
    step: int

    def shows(self, k: int) -> bool:
        runs = self.tracks.vis.get(k)
        return runs is None or value_at(runs, self.step) is not None

    def text(self, k: int, default: str = "") -> str:
        runs = self.tracks.text.get(k)
        found = value_at(runs, self.step) if runs else None
        return default if found is None else found

    def state(self, k: int) -> str:
        runs = self.tracks.state.get(k)
        found = value_at(runs, self.step) if runs else None
        return found or ""

    def ref(self, k: int, default: str | None = None) -> str | None:
        runs = self.tracks.ref.get(k)
        found = value_at(runs, self.step) if runs else None
        return default if found is None else found

"""Per-step state of the page's dynamic elements, stored as runs so 10,000 steps stay small.

Every element whose visibility, text or state changes while the user steps gets a small integer
key ``k`` (the ``data-k`` attribute in the HTML). For each key we keep up to three tracks, each a
list of runs ``[first_step, last_step, value]`` (inclusive, sorted, non-overlapping):

* ``vis``: the element is shown during the run (value is always ``1``); hidden elsewhere;
* ``text``: its text content;
* ``state``: a space-separated list of state words for CSS (``bump``, ``changed``, ``freed`` …).

The server renders the page for one step with ``Frame``; ``static/explorer.js`` replays the runs to
switch steps without a request.

Two ways to record: ``show`` / ``set_text`` / ``set_state`` say what an element is *at* one step (a
caller that visits every element at every step), while ``change_vis`` / ``change_text`` /
``change_state`` say what it *becomes* from a step on, until its next change — the way a builder fed
by a delta replay works, in time proportional to the changes. ``close(count)`` ends the open runs at
the last step; call it once, after the last step.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Any

Run = list[Any]  # [first, last, value]


def append_run(runs: list[Run], step: int, value: Any) -> None:
    """Record ``value`` at ``step`` (steps come in order), extending the last run when it continues."""
    if runs and runs[-1][1] == step - 1 and runs[-1][2] == value:
        runs[-1][1] = step
    elif runs and runs[-1][1] >= step:  # set twice in one step: the last word wins
        runs[-1][2] = value
    else:
        runs.append([step, step, value])


def _change(runs: list[Run], step: int, value: Any) -> None:
    """The track takes ``value`` from ``step`` on (None: no value). Open runs have ``last = None``."""
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


def value_at(runs: list[Run], step: int) -> Any:
    """The value a track has at ``step``, or None outside every run (binary search)."""
    lo, hi = 0, len(runs) - 1
    while lo <= hi:
        mid = (lo + hi) // 2
        first, last, value = runs[mid]
        if step < first:
            hi = mid - 1
        elif step > last:
            lo = mid + 1
        else:
            return value
    return None


@dataclass
class Tracks:
    """Allocates keys for identities (any hashable) and records their per-step state."""

    keys: dict[Hashable, int] = field(default_factory=dict)
    vis: dict[int, list[Run]] = field(default_factory=dict)
    text: dict[int, list[Run]] = field(default_factory=dict)
    state: dict[int, list[Run]] = field(default_factory=dict)

    def key(self, identity: Hashable) -> int:
        found = self.keys.get(identity)
        if found is None:
            found = self.keys[identity] = len(self.keys)
        return found

    def show(self, k: int, step: int) -> None:
        append_run(self.vis.setdefault(k, []), step, 1)

    def set_text(self, k: int, step: int, text: str) -> None:
        append_run(self.text.setdefault(k, []), step, text)

    def set_state(self, k: int, step: int, state: str) -> None:
        if state:
            append_run(self.state.setdefault(k, []), step, state)

    def change_vis(self, k: int, step: int, shown: bool) -> None:
        """From ``step`` on (until its next change), the element is shown or hidden."""
        _change(self.vis.setdefault(k, []), step, 1 if shown else None)

    def change_text(self, k: int, step: int, text: str | None) -> None:
        """From ``step`` on, the element reads ``text`` (None: no text of its own)."""
        _change(self.text.setdefault(k, []), step, text)

    def change_state(self, k: int, step: int, state: str) -> None:
        """From ``step`` on, the element's state words are ``state`` ("" for none)."""
        _change(self.state.setdefault(k, []), step, state or None)

    def close(self, count: int) -> None:
        """End every run still open (recorded with ``change_*``) at the last step, ``count - 1``."""
        for track in (self.vis, self.text, self.state):
            for runs in track.values():
                if runs and runs[-1][1] is None:
                    runs[-1][1] = count - 1

    def first_shown(self, k: int) -> int | None:
        runs = self.vis.get(k)
        return runs[0][0] if runs else None

    def max_text(self, k: int) -> int:
        """Length of the longest text the element ever shows (to size boxes once for all steps)."""
        return max((len(run[2]) for run in self.text.get(k, [])), default=0)


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

"""Who belongs to a fold over the run: the list a folded chip or strip group expands into.

A fold (``losses[0…999]`` as one chip, a group of 1,000 alike strips showing a few) keeps on the page
only a few elements and a count; its members are listed when the reader expands it. ``Members``
records them as intervals ``[label, tensor, first, last]`` — a new interval only when a member joins,
leaves or reads differently — so the list costs what the run changed, not steps × members.
``static/explorer.js`` lists the intervals that contain the current step.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

Entry = list[Any]  # [label, tensor id or None, first step, last step]


class Members:
    def __init__(self) -> None:
        self.entries: list[Entry] = []
        self._open: dict[Hashable, int] = {}

    def set(self, member: Hashable, step: int, label: str, tensor: str | None) -> None:
        """``member`` belongs from ``step`` on, reading ``label`` (and standing for ``tensor``)."""
        index = self._open.get(member)
        if index is not None:
            entry = self.entries[index]
            if entry[0] == label and entry[1] == tensor:
                return
            if entry[2] == step:  # set twice in one step: the last word wins
                entry[0], entry[1] = label, tensor
                return
            entry[3] = step - 1
        self._open[member] = len(self.entries)
        self.entries.append([label, tensor, step, None])

    def leave(self, member: Hashable, step: int) -> None:
        index = self._open.pop(member, None)
        if index is not None:
            self.entries[index][3] = step - 1  # before its first step when it joined and left at once

    def close(self, count: int) -> list[Entry]:
        """The finished list: open intervals end at the last step; empty ones are dropped."""
        for index in self._open.values():
            self.entries[index][3] = count - 1
        self._open.clear()
        return [entry for entry in self.entries if entry[3] >= entry[2]]

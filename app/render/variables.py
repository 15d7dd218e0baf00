"""The variables bar: a chip per name the user can reach, names of one family folded into one chip.

Names that differ only in their subscripts form a family (``losses[…]``). A family of a few names
shows a chip for each; once it holds more than ``FOLD_AT``, its first chip reads ``losses[0…999]``
with the count and lists the names when clicked (``app.render.folds``), and the others hide. A chip
is a slot, not a tensor: it shows a name's tensor (its shape, its legend kind, its ``data-t``) and
follows the name when it is rebound. At most ``MAX_CHIPS`` families get chips; the names of the others
are counted in one "+N more" chip that lists them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from app.i18n import gettext as _
from app.i18n import number
from app.render.folds import Entry, Members
from app.render.names import family, family_label, subscript, tensor_kind
from app.render.steps import StepInput
from app.render.tracks import Tracks

MAX_CHIPS = 40  # families with chips
FOLD_AT = 3  # a family of more names than this is one chip


@dataclass(frozen=True)
class Chip:
    k: int  # vis; ref: its tensor when it shows one name; state: legend kind, or "fold"
    name_k: int  # "x", or "losses[0…999]"
    shape_k: int  # "2×3", or "×1000"
    fold_k: int  # its member list (when it ever folds)


@dataclass(frozen=True)
class VariablesView:
    empty_k: int
    chips: tuple[Chip, ...]  # in order: a family's slots side by side
    more_k: int  # vis + text "+12 more"; lists the names without a chip
    folds: dict[int, list[Entry]]


@dataclass
class _Family:
    index: int
    pattern: str
    chip: Chip | None  # its first slot (the folded chip); None: beyond MAX_CHIPS, counted in "+N more"
    slots: list[Chip] = field(default_factory=list)
    alive: dict[str, str] = field(default_factory=dict)  # name -> tensor, in order of binding
    low: int | None = None
    high: int | None = None
    folded: bool = False


def shape_text(shape: list[int]) -> str:
    return "×".join(map(str, shape)) or _("scalar")


class VariablesBuilder:
    def __init__(self, tracks: Tracks) -> None:
        self.tracks = tracks
        self.empty_k = tracks.key(("variables-empty",))
        self.more_k = tracks.key(("variables-more",))
        self.families: dict[str, _Family] = {}
        self.chips: list[tuple[int, int, Chip]] = []  # (family, slot, chip)
        self.members: dict[int, Members] = {}
        self.more_members = Members()
        self.more_count = 0
        self.with_chips = 0  # families that have chips

    def _family(self, name: str) -> _Family:
        pattern = family(name)
        fam = self.families.get(pattern)
        if fam is None:
            fam = self.families[pattern] = _Family(len(self.families), pattern, None)
            if self.with_chips < MAX_CHIPS:
                self.with_chips += 1
                fam.chip = self._slot(fam)
                self.members[fam.chip.fold_k] = Members()
        return fam

    def _slot(self, fam: _Family) -> Chip:
        j = len(fam.slots)
        key = ("var", fam.pattern, j)
        k = self.tracks.key
        chip = Chip(k(key), k((*key, "name")), k((*key, "shape")), k(("var", fam.pattern, "fold")))
        fam.slots.append(chip)
        self.chips.append((fam.index, j, chip))
        return chip

    def add_step(self, step: StepInput) -> None:
        state, changes, index = step.state, step.changes, step.index
        names = dict.fromkeys(changes.old_variables)  # in binding order: chips appear in it
        for tid in changes.old_tensors:  # its shape or kind may read differently now
            names.update(dict.fromkeys(step.holding.own.get(tid, ())))
        dirty: dict[str, _Family] = {}
        for name in names:
            fam = self._family(name)
            tid = state.variables.get(name)
            members = self.members[fam.chip.fold_k] if fam.chip is not None else self.more_members
            before = len(fam.alive)
            if tid is not None and tid in state.tensors:
                fam.alive[name] = tid
                members.set(name, index, name, tid)
            elif fam.alive.pop(name, None) is not None:
                members.leave(name, index)
            if fam.chip is None:
                self.more_count += len(fam.alive) - before
            self._bounds(fam, name)
            dirty[fam.pattern] = fam
        for fam in dirty.values():
            if fam.chip is not None:
                self._draw(fam, step)
        self.tracks.change_vis(self.more_k, index, self.more_count > 0)
        more = _("+{n} more").format(n=number(self.more_count)) if self.more_count else None
        self.tracks.change_text(self.more_k, index, more)
        self.tracks.change_vis(self.empty_k, index, not state.variables)

    @staticmethod
    def _bounds(fam: _Family, name: str) -> None:
        """Keep the lowest and highest integer subscript alive (for ``losses[0…999]``)."""
        index = subscript(name)
        if index is None:
            return
        if name in fam.alive:
            fam.low = index if fam.low is None else min(fam.low, index)
            fam.high = index if fam.high is None else max(fam.high, index)
        elif index in (fam.low, fam.high):  # the edge left: look again (rare: a pop at either end)
            found = [i for i in map(subscript, fam.alive) if i is not None]
            fam.low, fam.high = (min(found), max(found)) if found else (None, None)

    def _draw(self, fam: _Family, step: StepInput) -> None:
        tracks, index = self.tracks, step.index
        count = len(fam.alive)
        if count > FOLD_AT:
            fam.folded = True
            chip = fam.slots[0]
            tracks.change_vis(chip.k, index, True)
            tracks.change_text(chip.name_k, index, family_label(fam.pattern, fam.low, fam.high))
            tracks.change_text(chip.shape_k, index, f"×{count:,}")
            tracks.change_state(chip.k, index, "fold")
            tracks.change_ref(chip.k, index, None)
            shown = 1
        else:
            for j, (name, tid) in enumerate(fam.alive.items()):
                chip = fam.slots[j] if j < len(fam.slots) else self._slot(fam)
                fact = step.state.tensors[tid]
                tracks.change_vis(chip.k, index, True)
                tracks.change_text(chip.name_k, index, name)
                tracks.change_text(chip.shape_k, index, shape_text(fact.shape))
                tracks.change_state(chip.k, index, tensor_kind(fact))
                tracks.change_ref(chip.k, index, tid)
            shown = count
        for chip in fam.slots[shown:]:  # hidden, and standing for no tensor
            tracks.change_vis(chip.k, index, False)
            tracks.change_ref(chip.k, index, None)

    def finish(self, count: int) -> VariablesView:
        folds: dict[int, list[Entry]] = {}
        for fam in self.families.values():
            if fam.chip is not None and fam.folded:
                folds[fam.chip.fold_k] = self.members[fam.chip.fold_k].close(count)
        more = self.more_members.close(count)
        if more:
            folds[self.more_k] = more
        chips = tuple(chip for _, _, chip in sorted(self.chips, key=lambda c: (c[0], c[1])))
        return VariablesView(self.empty_k, chips, self.more_k, folds)

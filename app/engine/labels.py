"""The labels of a set's members: ``s{0}``, ``s{1}`` … in the order the members entered the set (as
the steps saw them), each member keeping its label while it stays in the set, a new member taking a
new one (never a label used before under that set).

A set has no order of its own a user chose: its iteration order follows its members' hashes (a
tensor's: its address), and one ``add`` can move every member after it, or all of them when the
table grows. Named by that order (``s{i}`` = ``list(s)[i]``), every ``kept.add(out)`` renamed about a
quarter of the set's members (204 names per add at 800): names that told the user nothing true about
their tensors changed at each step, and the trace grew with the square of the loop. By label, an add
binds one name and a ``discard`` drops one — what the code did.

What a step changed is found from the set's fingerprint (its members' addresses in iteration order,
``app.engine.fingerprints``): one member added or removed, the table otherwise as it was, is found by
where the two fingerprints first differ (one pass in C); anything else (the table grown and reordered,
several members at once) by the sets of addresses.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Any

from app.engine.pointers import POINTER

Identities = tuple[int, ...] | bytes  # a set's members by address, in its iteration order
Labelled = tuple[int, Any]  # (label, member)


def _addresses(identities: Identities) -> tuple[int, ...]:
    if type(identities) is bytes:
        return struct.unpack(f"{len(identities) // POINTER}P", identities)
    return identities


def _first_difference(a: bytes, b: bytes) -> int:
    """The index of the first member at which two fingerprints differ (that of the shorter one's end
    when one is the other's beginning): the highest bit of their XOR, read as big numbers."""
    length = min(len(a), len(b))
    differ = int.from_bytes(a[:length], "big") ^ int.from_bytes(b[:length], "big")
    return (length - (differ.bit_length() + 7) // 8) // POINTER if differ else length // POINTER


class SetLabels:
    """One set's labels (by member address), kept by the name walker's entry for that set. Holds no
    member: addresses only (a member's death is told by ``forget``).

    A set whose every member is a plain tuple of one length (``kept.add((loss, i))``) is also
    checked by what its tuples hold (``held``, in iteration order, ``width`` bytes each: a tuple at
    an address another one had is a new member when it holds other objects)."""

    __slots__ = ("held", "identities", "labels", "next", "stale", "width")

    def __init__(self) -> None:
        self.identities: Identities = b""  # the members' addresses when last read, in iteration order
        self.labels: dict[int, int] = {}  # member address -> label; in label order
        self.next = 0  # the label the next member takes
        self.width = 0  # bytes of ``held`` per member: 0, members that are no containers
        self.held = b""  # what its tuples hold, by address (``pointers.tuples_held``), in iteration order
        self.stale = False  # a label was forgotten since: compare every address at the next change

    def change(self, members: Sequence[Any], identities: Identities, held: bytes = b"") -> \
            tuple[list[int], list[Labelled]]:
        """The set now holds ``members`` (its iteration order; ``identities``: their addresses;
        ``held``: what its tuples hold, ``width`` bytes each): (labels of the members gone, (label,
        member) of the members new, in iteration order)."""
        before, self.identities = self.identities, identities
        held_before, self.held = self.held, held
        width = self.width
        if type(before) is bytes and type(identities) is bytes and before and not self.stale and \
                abs(len(identities) - len(before)) == POINTER:
            at = _first_difference(before, identities)
            start, cut = at * POINTER, at * width
            if held[:cut] == held_before[:cut]:
                if len(identities) > len(before) and identities[start + POINTER:] == before[start:] and \
                        held[cut + width:] == held_before[cut:]:
                    return [], self._new([members[at]], [struct.unpack_from("P", identities, start)[0]])
                if len(identities) < len(before) and before[start + POINTER:] == identities[start:] and \
                        held_before[cut + width:] == held[cut:]:
                    return [self.labels.pop(struct.unpack_from("P", before, start)[0])], []
        self.stale = False
        now = _addresses(identities)
        labels = self.labels
        renewed: set[int] = set()  # a tuple at a member's address that holds other objects: a new member
        if width and before and len(held_before) == len(before) // POINTER * width:
            old = {address: held_before[i * width:(i + 1) * width]
                   for i, address in enumerate(_addresses(before))}
            renewed = {address for i, address in enumerate(now)
                       if address in old and old[address] != held[i * width:(i + 1) * width]}
        present = set(now)
        gone = [labels.pop(address) for address in list(labels)
                if address not in present or address in renewed]
        fresh = [index for index, address in enumerate(now) if address not in labels]
        return gone, self._new([members[i] for i in fresh], [now[i] for i in fresh])

    def _new(self, members: list[Any], addresses: list[int]) -> list[Labelled]:
        found = []
        for member, address in zip(members, addresses, strict=True):
            self.labels[address] = self.next
            found.append((self.next, member))
            self.next += 1
        return found

    def ordered(self, members: Sequence[Any], identities: Identities) -> list[Labelled]:
        """(label, member) of every member, in label order (``change`` just told of ``identities``)."""
        by_address = dict(zip(_addresses(identities), members, strict=True))
        return [(label, by_address[address]) for address, label in self.labels.items()]

    def forget(self, address: int) -> int | None:
        """An object at ``address`` died: a former member, or what a former member tuple held (none
        can die while its member is in the set). The label that member had, if it still had one:
        the next member at its address is new to the set, whatever the fingerprints say."""
        label = self.labels.pop(address, None)
        if label is None and self.width:
            index = _holder(self.held, address, self.width)
            if index is not None and index * POINTER < len(self.identities):
                label = self.labels.pop(_addresses(self.identities)[index], None)
        if label is not None:
            self.stale = True
        return label


def _holder(held: bytes, address: int, width: int) -> int | None:
    """The index of the member whose tuple holds ``address``, by ``held``."""
    needle = struct.pack("P", address)
    at = held.find(needle)
    while at >= 0:
        if at % POINTER == 0:
            return at // width
        at = held.find(needle, at + 1)
    return None


def label_of(name: str, item: str) -> int:
    """The label in ``item``, a name under the set named ``name`` (``kept{3}[0]`` → 3)."""
    start = len(name) + 1
    return int(item[start:item.index("}", start)])

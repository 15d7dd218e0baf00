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
    member: addresses only (a member's death is told by ``forget``)."""

    __slots__ = ("identities", "labels", "next")

    def __init__(self) -> None:
        self.identities: Identities = b""  # the members' addresses when last read, in iteration order
        self.labels: dict[int, int] = {}  # member address -> label; in label order
        self.next = 0  # the label the next member takes

    def change(self, members: Sequence[Any], identities: Identities) -> tuple[list[int], list[Labelled]]:
        """The set now holds ``members`` (its iteration order; ``identities``: their addresses):
        (labels of the members gone, (label, member) of the members new, in iteration order)."""
        before, self.identities = self.identities, identities
        if type(before) is bytes and type(identities) is bytes and before and \
                abs(len(identities) - len(before)) == POINTER:
            at = _first_difference(before, identities)
            start = at * POINTER
            if len(identities) > len(before) and identities[start + POINTER:] == before[start:]:
                return [], self._new([members[at]], [struct.unpack_from("P", identities, start)[0]])
            if len(identities) < len(before) and before[start + POINTER:] == identities[start:]:
                return [self.labels.pop(struct.unpack_from("P", before, start)[0])], []
        now = _addresses(identities)
        present = set(now)
        gone = [address for address in self.labels if address not in present]
        labels = self.labels
        fresh = [index for index, address in enumerate(now) if address not in labels]
        return [labels.pop(address) for address in gone], \
            self._new([members[i] for i in fresh], [now[i] for i in fresh])

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
        """A member at ``address`` died (it left the set first): the label it had, if it had one. The
        next member at that address is new to the set, whatever the fingerprints say."""
        label = self.labels.pop(address, None)
        if label is not None:
            self.identities = b"" if type(self.identities) is bytes else ()  # (compare every address)
        return label

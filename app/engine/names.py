"""The names a user can reach tensors by, read step after step with a cache, so that a container that
did not change costs a comparison of object ids (done in C), not a walk in Python.

A name is what the user would type to get the tensor back:

* ``x``; ``f:x`` (a local of function ``f`` while it runs);
* ``losses[0]``, ``dq[0]`` (lists, tuples, deques), ``p.field`` (named tuples), ``d['k']`` (dicts;
  a key that is not a plain value is named by its type, ``d[<Key>]``), ``s{0}`` (a set's members,
  labelled in the order they entered it, each keeping its label while it stays: ``app.engine.labels``);
* ``model.0.weight`` (parameters and buffers, as ``named_parameters`` names them), ``model.scale``
  and ``model._hidden`` (other attributes of a module);
* ``cfg.scale`` (attributes of instances of the snippet's classes, ``__slots__`` too), ``Config.scale``
  (attributes of the snippet's classes), ``make.<closure>.t`` (what a snippet function closes over);
* ``opt.state[0]['exp_avg']`` (optimizer state, the index being the parameter's position in
  ``param_groups`` order, exactly as ``opt.state_dict()`` numbers it).

Observing never runs the snippet's code: what a value is and what lies one level below it are read
through the built-in types (``app.engine.members``), and whether that changed by the identity of what
it holds (``app.engine.fingerprints``).

``NameWalker.walk`` returns what changed since the previous step — names bound or rebound, names gone
— keeps every current name, and can say where a name comes in walk order (the order the whole
snapshot visits names in). The cache holds no user object: an entry is found by the container's id
(and the ids of the containers above it) and checked against the ids of what it holds; its nested
containers are fetched from it again at every step.

Limits keep a hostile or huge structure from costing more than a budget: ``MAX_CONTAINER_ITEMS``
per container, ``MAX_CONTAINER_DEPTH`` levels, ``MAX_NAMES`` names per step; a container is not
entered again below itself (cycles). What a limit cut is said in ``NameWalker.capped``.
"""

from __future__ import annotations

import itertools
import types
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from app.engine.fingerprints import (
    DICT,
    HELD_KINDS,
    TUPLE,
    Held,
    dict_count,
    dict_grew,
    fingerprint,
    grew,
    held_ids,
    held_of,
    identities,
    item_count,
)
from app.engine.ids import ObjectIds
from app.engine.labels import SetLabels, label_of
from app.engine.members import (
    MAX_CONTAINER_ITEMS,
    SNIPPET_MODULE,
    Member,
    dict_members,
    kind_of,
    members,
    set_members,
    type_dict,
)
from app.engine.pointers import dict_version, tuples_held

MAX_CONTAINER_DEPTH = 16
MAX_NAMES = 20_000  # names at one step, over everything
MAX_VISITS = 50_000  # members read at one step (a container met again unchanged counts once)
SWEEP_EVERY = 64  # steps between sweeps of cache entries no longer used

# Names the engine binds for the snippet; they are modules, not user data.
PRELUDE_NAMES = frozenset({"torch", "nn", "F", "math", "__builtins__", "__name__"})

Item = tuple[str, str]  # (name, tensor id)
Top = tuple[str, str]  # (scope prefix, top-level name)
Path = tuple[int, ...]  # ids of the containers above a value, outermost first


def _top_level(name: str, value: Any) -> bool:
    """A name of the snippet's own (not an import, not a dunder)."""
    if name.startswith("__"):
        return False
    cls = type(value)  # never isinstance(): it may ask the object for its __class__
    kind = _TOP_KINDS.get(cls)
    if kind is None:  # (by class, once: a union's issubclass is slow, and this runs per name per step)
        kind = ("imported" if issubclass(cls, (types.ModuleType, types.BuiltinFunctionType, types.MethodType))
                else "definition" if issubclass(cls, (type, types.FunctionType)) else "value")
        if type_dict(cls).get("__module__") != SNIPPET_MODULE:  # the cache must not keep those alive
            _TOP_KINDS[cls] = kind
    if kind == "definition":
        return kind_of(value) is not None  # the snippet's own classes and functions only
    return kind == "value"


_TOP_KINDS: dict[type, str] = {}  # a class (not the snippet's own) -> how _top_level takes its instances


@dataclass(eq=False)  # filed by identity under the tensors it names (``NameWalker._by_address``)
class _Entry:
    fingerprint: Any
    items: list[Item]  # every name under this value, in walk order
    nested: bool  # some member is a container: fetch members again to check those
    child_items: list[list[Item]]  # per nested member, what it contributed
    tensor_addresses: list[int]
    used: int
    key_texts: dict[str, int] | None = None  # a dict's: how many of its keys wrote as each text
    # Where every container among the members is a plain tuple or a plain dict read flat
    # (``history.append((loss, acc))``, an optimizer's state): per member, which of those it is, or
    # no container (``fingerprints.PLAIN``/``TUPLE``/``DICT``), and what those are now: the ids
    # their tuples hold, their dicts' version tags. Such a member's names change only with those:
    # while the container holds the same members, C-speed passes check them all, where reading each
    # again cost a few µs per member per step (a loop that kept 800 pairs: 2.7 times the per-line
    # cost of one that kept 200). None: some member is another container, read again each step.
    fixed: bytes | None = None
    held: Held = (b"", ())
    key: tuple[int, str, Path] = (0, "", ())  # where it is in the cache (moves with a rebuilt tuple)
    sequence: bool = False  # of a list, tuple or deque (whose names are ``name[i]``)
    labels: SetLabels | None = None  # of a set or frozenset: its members' labels (``name{label}``)


def _tuples_held(members: list[Any]) -> bytes | None:
    """What ``members``, every one a plain tuple of one length, hold, by address (None otherwise)."""
    return tuples_held(members, b"\x01" * len(members)) if tuples_held is not None else None


def is_array_id(ident: str) -> bool:
    return ident.startswith(ARRAY_PREFIX)


ARRAY_PREFIX = "a"  # ids of numpy arrays (``a1`` …); tensors are ``t1`` …


class NameWalker:
    """Names of tensors (``current``) and, beside them, of numpy arrays (``arrays``): both are
    found by the same cached walk; array names never reach the tensor side (``walk``'s answer)."""

    def __init__(self, tensor_ids: ObjectIds) -> None:
        self.tensor_ids = tensor_ids
        self.array_ids = ObjectIds(ARRAY_PREFIX)
        self.arrays: dict[str, str] = {}  # every array name now -> array id
        self.arrays_changed = False  # did this step bind, rebind or lose an array name?
        self._cache: dict[tuple[int, str, Path], _Entry] = {}
        self._by_address: dict[int, set[_Entry]] = {}
        # (name, path) -> the key of the last value read under that name: a tuple rebuilt with one
        # more item (``t = t + (x,)``) is a new object, its entry is the old tuple's, moved
        self._last: dict[tuple[str, Path], tuple[int, str, Path]] = {}
        self._step = 0
        self._tops: dict[Top, list[Item]] = {}  # what each top-level name contributed last
        self._top_rank: dict[Top, tuple[int, int]] = {}  # (scope index, index in scope) this step
        self._index: dict[Top, tuple[list[Item], dict[str, int]]] = {}
        self.current: dict[str, str] = {}  # every name now -> tensor id
        self._top_of: dict[str, Top] = {}
        self._left = MAX_VISITS  # members this step may still read
        self._grown: tuple[list[Item], list[Item]] | None = None  # the items a grown entry had, has now
        self.capped: dict[str, int] = {}  # this step: limit -> its value, for each limit that cut

    def walk(self, scopes: list[tuple[str, dict[str, Any]]]) -> tuple[dict[str, str], list[str]]:
        """(names bound or rebound -> tensor id, names gone), both in walk order."""
        self._step += 1
        self._left = MAX_VISITS
        self.capped = {}
        self.arrays_changed = False
        for address in (*self.tensor_ids.take_deaths(), *self.array_ids.take_deaths()):
            for entry in self._by_address.pop(address, ()):
                if self._cache.get(entry.key) is not entry:
                    continue
                if entry.labels is not None:  # a set's former member (a member cannot die)
                    self._member_died(entry, address)
                else:  # a tensor it named died: read it again
                    del self._cache[entry.key]
                    self._forget(entry)
        bound: dict[str, str] = {}
        gone: list[str] = []
        seen: set[Top] = set()
        self._top_rank = {}
        for scope_index, (prefix, namespace) in enumerate(scopes):
            for top_index, (name, value) in enumerate(list(dict.items(namespace))):
                if (not prefix and name in PRELUDE_NAMES) or not _top_level(name, value):
                    continue
                top = (prefix, name)
                if top in seen:  # a recursive call's frame: the innermost one's names win, as in v1
                    gone.extend(self._drop_top(top))
                seen.add(top)
                self._top_rank[top] = (scope_index, top_index)
                self._grown = None
                items = self._read(prefix + name, value, ())
                previous = self._tops.get(top)
                if items is previous:
                    continue
                grown = self._grown
                if grown is not None and grown[0] is previous and grown[1] is items:
                    # a flat list or dict that only grew (``_read`` says so): its head is as it was
                    self._tops[top] = items
                    self._diff(top, previous, items, bound, gone, grown=True)
                # (a tensor's name reads as a new one-item list at every step: equal, nothing to diff)
                elif items != previous:
                    self._tops[top] = items
                    self._diff(top, previous or [], items, bound, gone)
        for top in [t for t in self._tops if t not in seen]:
            gone.extend(self._drop_top(top))
        for name in gone:
            if name not in self.current:  # gone from one frame, maybe bound again by another
                bound.pop(name, None)
        if self._step % SWEEP_EVERY == 0:
            self._sweep()
        return bound, [name for name in dict.fromkeys(gone) if name not in self.current]

    def still(self) -> tuple[dict[str, str], list[str]]:
        """``walk``'s answer for a step in which no snippet code ran: nothing bound, nothing gone.
        Only after a walk that no limit cut (a cut's report belongs to every step it holds for)."""
        assert not self.capped, "a capped walk is walked again"
        self.arrays_changed = False
        return {}, []

    def position(self, name: str) -> tuple[int, int, int]:
        """Where ``name`` comes in walk order at the latest step."""
        top = self._top_of[name]
        items = self._tops[top]
        cached = self._index.get(top)
        if cached is None or cached[0] is not items:
            cached = self._index[top] = (items, {n: i for i, (n, _) in enumerate(items)})
        return (*self._top_rank[top], cached[1][name])

    def ordered(self) -> Iterator[Item]:
        """Every current name and its tensor, in walk order (for a whole snapshot)."""
        for top in sorted(self._top_rank, key=self._top_rank.__getitem__):
            for name, tid in self._tops.get(top, ()):
                # not past MAX_NAMES, not another frame's, not an array
                if self._top_of.get(name) == top and name in self.current:
                    yield name, tid

    def _drop_top(self, top: Top) -> list[str]:
        gone = []
        for name, _ in self._tops.pop(top, []):
            if self._top_of.get(name) == top:
                del self._top_of[name]
                if self._unbind(name):
                    gone.append(name)
        self._index.pop(top, None)
        return gone

    def _diff(self, top: Top, previous: list[Item], items: list[Item], bound: dict[str, str],
              gone: list[str], grown: bool = False) -> None:
        """``grown``: ``items`` is ``previous`` and more (not compared again: a thousand losses)."""
        start = 0
        if grown or (len(items) >= len(previous) and items[: len(previous)] == previous):
            start = len(previous)  # appended to: only the tail is new
            cached = self._index.get(top)
            if cached is not None and cached[0] is previous:  # extend the index instead of rebuilding it
                index = cached[1]
                index.update((n, i) for i, (n, _) in enumerate(items[start:], start))
                self._index[top] = (items, index)
        else:
            now = {name for name, _ in items}
            for name, _ in previous:
                if name not in now and self._top_of.get(name) == top:
                    del self._top_of[name]
                    if self._unbind(name):
                        gone.append(name)
        for name, tid in itertools.islice(items, start, None):
            if name not in self._top_of and len(self.current) + len(self.arrays) >= MAX_NAMES:
                self.capped["names"] = MAX_NAMES
                continue
            self._top_of[name] = top
            if is_array_id(tid):
                if self.arrays.get(name) != tid:
                    self.arrays[name] = tid
                    self.arrays_changed = True
                if self.current.pop(name, None) is not None:  # was a tensor's name
                    gone.append(name)
                continue
            if self.arrays.pop(name, None) is not None:  # was an array's name
                self.arrays_changed = True
            if self.current.get(name) != tid:
                self.current[name] = tid
                bound[name] = tid

    def _unbind(self, name: str) -> bool:
        """Forget a name; True if it named a tensor (an array's name is no tensor name gone)."""
        if self.arrays.pop(name, None) is not None:
            self.arrays_changed = True
            return False
        return self.current.pop(name, None) is not None

    # ---- one value, cached -----------------------------------------------------------------------
    def _read(self, name: str, value: Any, path: Path) -> list[Item]:
        kind = kind_of(value)
        if kind == "tensor":
            return [(name, self.tensor_ids.of(value))]
        if kind == "array":
            return [(name, self.array_ids.of(value))]
        if kind is None or id(value) in path:  # nothing to read, or a container inside itself
            return []
        if len(path) >= MAX_CONTAINER_DEPTH:
            self.capped["depth"] = MAX_CONTAINER_DEPTH
            return []
        if kind == "set":
            return self._read_set(name, value, path)
        print_ = fingerprint(value, kind)
        if kind in ("sequence", "set", "dict") and \
                (dict_count(print_) if kind == "dict" else item_count(print_)) >= MAX_CONTAINER_ITEMS:
            self.capped["items"] = MAX_CONTAINER_ITEMS
        key = (id(value), name, path)
        inner = (*path, id(value))
        entry = self._cache.get(key)
        if entry is None and kind == "sequence":
            entry = self._moved(key, kind)
        if entry is not None and entry.fingerprint == print_:
            entry.used = self._step
            self._left -= 1
            if not entry.nested:
                return entry.items
            if entry.fixed is not None and held_ids(value, kind, entry.fixed) == entry.held:
                return entry.items
            found = members(name, value, kind)
            items, parts = self._items(found, inner)
            if kind in HELD_KINDS:  # what its members are now, to check them by at the next step
                fixed = self._fixed(found, inner)
                entry.fixed = fixed
                entry.held = held_of(found, fixed) if fixed is not None else (b"", ())
            if all(a is b for a, b in zip(parts, entry.child_items, strict=True)):
                return entry.items
            entry.child_items, entry.items = parts, items
            return items
        if entry is not None and (not entry.nested or entry.fixed is not None):
            # a list or dict that only grew (losses.append(loss), history[epoch] = loss), flat or of
            # plain tuples: read its new members only
            # (counted in place: if the new members hold another container, the whole read below
            # starts over)
            key_texts = entry.key_texts
            if kind == "sequence" and grew(entry.fingerprint, print_):
                found = members(name, value, kind, item_count(entry.fingerprint))
            elif kind == "dict" and key_texts is not None and dict_grew(entry.fingerprint, print_):
                found = dict_members(name, value, dict_count(entry.fingerprint), key_texts)
            else:
                found = None
            if found is not None:
                tail, parts = self._items(found, inner)
                fixed = self._fixed(found, inner) if parts else b""
                if fixed is not None and (not parts or entry.fixed is not None):
                    self._grown = (entry.items, items := entry.items + tail)
                    entry.fingerprint, entry.items, entry.used = print_, items, self._step
                    if entry.fixed is not None:
                        fixed = fixed or bytes(len(found))
                        (tuples, versions), (more, newer) = entry.held, held_of(found, fixed)
                        entry.fixed, entry.held = entry.fixed + fixed, (tuples + more, versions + newer)
                        entry.child_items += parts
                    self._register(entry, found)
                    return entry.items
        key_texts = {} if kind == "dict" else None
        found = dict_members(name, value, 0, key_texts) if kind == "dict" else members(name, value, kind)
        items, parts = self._items(found, inner)
        if entry is not None:
            self._forget(entry)
        entry = self._cache[key] = _Entry(print_, items, bool(parts), parts, [], self._step, key_texts,
                                          key=key, sequence=kind == "sequence")
        self._last[key[1:]] = key
        if parts and kind in HELD_KINDS:
            fixed = self._fixed(found, inner)
            if fixed is not None:
                entry.fixed, entry.held = fixed, held_of(found, fixed)
        self._register(entry, found)
        return items

    def _fixed(self, found: list[Member], path: Path) -> bytes | None:
        """Per member just read: ``TUPLE`` for a plain tuple read flat, ``DICT`` for a plain dict
        read flat (where its version tag can be read), ``PLAIN`` for what is no container; None
        when another container is among them (or a limit cut this step's reading: a cut is said at
        every step it holds for, so what it cut is read again)."""
        if self.capped:
            return None
        mask = bytearray(len(found))
        for index, (child_name, child) in enumerate(found):
            cls = type(child)
            if cls is tuple or (cls is dict and dict_version is not None and dict_version(child) is not None):
                child_entry = self._cache.get((id(child), child_name, path))
                if child_entry is None or child_entry.nested:
                    return None
                mask[index] = TUPLE if cls is tuple else DICT
            elif kind_of(child) not in (None, "tensor", "array"):
                return None
        return bytes(mask)

    def _read_set(self, name: str, value: Any, path: Path) -> list[Item]:
        """A set's or frozenset's members, ``name{label}`` (``app.engine.labels``): each keeps its
        name while it stays in the set, so an add names one member and a removal drops one. While
        its members are no containers, or all plain tuples of one length that hold none (checked by
        what they hold, in one pass), only its new members are read; else every member is read
        again (by label) when anything may have changed."""
        found_members = set_members(value)
        print_ = identities(found_members)
        if len(found_members) >= MAX_CONTAINER_ITEMS:
            self.capped["items"] = MAX_CONTAINER_ITEMS
        key = (id(value), name, path)
        inner = (*path, id(value))
        entry = self._cache.get(key)
        if entry is None:
            entry = self._moved(key, "set")
        elif entry.labels is None:  # another kind of container had this address
            self._forget(self._cache.pop(key))
            entry = None
        labels = entry.labels if entry is not None and entry.labels is not None else SetLabels()
        held: bytes | None = b""
        if labels.width:
            held = _tuples_held(found_members)
            if held is None or len(held) != len(found_members) * labels.width:  # not all such tuples now
                labels.width, labels.held, held = 0, b"", b""
        changed = entry is None or entry.fingerprint != print_ or held != labels.held
        gone, new = labels.change(found_members, print_, held) if changed else ([], [])
        if entry is not None and (not entry.nested or labels.width):
            entry.used = self._step
            self._left -= 1
            if not changed:
                return entry.items
            found = [(f"{name}{{{label}}}", member) for label, member in new]
            tail, parts = self._items(found, inner)
            if (self._fixed(found, inner) == bytes([TUPLE]) * len(found)) if labels.width else not parts:
                # only its new members' names are added, its gone members' dropped
                entry.fingerprint = print_
                items = entry.items
                if gone:
                    dropped = set(gone)
                    items = [item for item in items if label_of(name, item[0]) not in dropped]
                entry.items = items + tail
                if not gone:
                    self._grown = (items, entry.items)
                self._register(entry, found if not labels.width else
                               [(child_name, x) for child_name, member in found for x in member])
                return entry.items
        found = [(f"{name}{{{label}}}", member) for label, member in labels.ordered(found_members, print_)]
        items, parts = self._items(found, inner)
        if entry is not None:
            if not changed and all(a is b for a, b in zip(parts, entry.child_items, strict=True)):
                entry.used = self._step
                return entry.items
            self._forget(entry)
        entry = self._cache[key] = _Entry(print_, items, bool(parts), parts, [], self._step, key=key,
                                          labels=labels)
        self._last[key[1:]] = key
        self._register(entry, found)
        labels.width, labels.held = 0, b""
        if parts and self._fixed(found, inner) == bytes([TUPLE]) * len(found):
            held = _tuples_held(found_members)
            if held:  # every member a plain tuple of one length that holds no container
                labels.width, labels.held = len(held) // len(found_members), held
                self._register(entry, [(child_name, x) for child_name, member in found for x in member])
        return items

    def _member_died(self, entry: _Entry, address: int) -> None:
        """A tensor or array that was a member of this entry's set (or what a member tuple held)
        died: a new object at its address is a new member (``SetLabels.forget``), and the set's
        names lose its label."""
        assert entry.labels is not None
        label = entry.labels.forget(address)
        if label is None:  # it left the set at an earlier step (its address stays in tensor_addresses)
            return
        entry.fingerprint = None  # read again at the next step
        if not entry.nested or entry.labels.width:
            name = entry.key[1]
            entry.items = [item for item in entry.items if label_of(name, item[0]) != label]

    def _moved(self, key: tuple[int, str, Path], kind: str) -> _Entry | None:
        """The flat entry of the sequence (or set) last read under this name and path, moved to
        ``key`` (a tuple rebuilt: ``t = t + (x,)`` is a new tuple at each iteration; ``s = s | {x}``
        a new set), for ``_read`` to check as its own: grown, only its new members are read (a
        set's members keep their labels). A nested one is not moved (its members' entries are filed
        under the old container's id), but for a set of plain tuples (its members are checked by
        what they hold, not by their entries)."""
        old_key = self._last.get(key[1:])
        entry = self._cache.get(old_key) if old_key is not None else None
        if entry is None or entry.key != old_key or \
                not (entry.labels is not None if kind == "set" else entry.sequence):
            return None
        if entry.nested and not (entry.labels is not None and entry.labels.width):
            return None  # (a set of plain tuples checks its members by what they hold: moved too)
        del self._cache[old_key]
        self._cache[key] = entry
        entry.key = self._last[key[1:]] = key
        return entry

    def _register(self, entry: _Entry, found: list[Member]) -> None:
        """File the entry under the tensors it names directly: one of them dying invalidates it."""
        for _, value in found:
            if kind_of(value) in ("tensor", "array"):
                entry.tensor_addresses.append(id(value))
                self._by_address.setdefault(id(value), set()).add(entry)

    def _forget(self, entry: _Entry) -> None:
        for address in entry.tensor_addresses:
            holders = self._by_address.get(address)
            if holders is not None:
                holders.discard(entry)
                if not holders:
                    del self._by_address[address]

    def _items(self, found: list[Member], path: Path) -> tuple[list[Item], list[list[Item]]]:
        """The names under these members, in order (ids are handed out in this order), and what
        each nested container among them contributed."""
        items: list[Item] = []
        parts: list[list[Item]] = []
        for child_name, child in found:
            self._left -= 1
            if self._left < 0:
                self.capped["members"] = MAX_VISITS
                break
            kind = kind_of(child)
            if kind == "tensor":
                items.append((child_name, self.tensor_ids.of(child)))
            elif kind == "array":
                items.append((child_name, self.array_ids.of(child)))
            elif kind is not None:
                part = self._read(child_name, child, path)
                parts.append(part)
                items.extend(part)
        return items, parts

    def _sweep(self) -> None:
        stale = [key for key, entry in self._cache.items() if entry.used < self._step - SWEEP_EVERY]
        for key in stale:
            self._forget(self._cache.pop(key))
        self._last = {place: key for place, key in self._last.items() if key in self._cache}

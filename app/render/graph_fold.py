"""Folding: the vertices of one repetition class (or one ``nn.Module``) drawn as one box, a *unit*.

A unit is shown while any of its members is; it reads like its *representative* — the member that
came on screen most recently and is still there — and counts its members on screen ("×57"). Its
edges join the units of their ends. Everything is merged from the members' histories of changes
(``graph_events``), so folding costs time linear in those changes, not steps × members.

Modes, each one drawing of the run:

* ``all`` — every vertex its own unit;
* ``repeats`` — a class with two or more members is one unit (a loop's iterations fold into one);
* ``modules`` — as ``repeats``, and the parameters of each module and the operations that apply
  them are one box named by the module's path.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from operator import itemgetter
from typing import Any

from app.i18n import N_
from app.render.graph_events import Events, History, Vertex, record

MODES = ("all", "repeats", "modules")
MODE_TITLES = {"all": N_("All nodes"), "repeats": N_("Fold repeats"), "modules": N_("Fold modules")}


@dataclass
class Unit:
    key: str
    kind: str  # a member's kind, or "module"
    title: str
    members: list[str]  # vertex keys, in order of appearance
    folded: bool  # stands for a class or a module (draws a count)
    klass: int | None = None
    vis: History = field(default_factory=list)
    text: History = field(default_factory=list)  # the representative's label
    state: History = field(default_factory=list)
    count: History = field(default_factory=list)  # "×k" while k ≥ 2 members are on screen
    rep: History = field(default_factory=list)  # the representative's node id (fn/acc units)
    chips: dict[str, dict[str, History]] = field(default_factory=dict)  # name -> vis/text/state
    label_len: int = 0
    chip_len: dict[str, int] = field(default_factory=dict)
    first: int = 0  # the step it first shows


@dataclass
class UnitEdge:
    src: str
    dst: str
    kind: str  # next | acc | out
    count: int  # multiplicity (c * c: MulBackward0 -> CloneBackward0 twice)
    vis: History = field(default_factory=list)
    # Joins one iteration to the next (an RNN's h feeding the next step): drawn, but not allowed to
    # push boxes down, so each folded iteration reads top to bottom.
    back: bool = False
    # A backward pass's marks (graph_backward): "grad" once a gradient went along; its text (the
    # edge of one member only: a folded edge does not say whose gradient it would be).
    state: History = field(default_factory=list)
    text: History = field(default_factory=list)


@dataclass
class Folding:
    mode: str
    units: dict[str, Unit]
    edges: dict[tuple[str, str], UnitEdge]


def unit_key(vertex: Vertex, mode: str, class_sizes: Counter) -> str:
    if mode == "modules" and vertex.module is not None:
        return f"m:{vertex.module}"
    if mode != "all" and class_sizes[vertex.klass] >= 2:
        return f"c:{vertex.klass}"
    return vertex.key


def edge_kind(src: str, dst: str) -> str:
    return "acc" if src.startswith("leaf:") else "out" if dst.startswith("out:") else "next"


def fold(events: Events, mode: str, class_sizes: Counter) -> Folding:
    members: dict[str, list[Vertex]] = {}
    for vertex in sorted(events.vertices.values(), key=lambda v: v.seq):
        members.setdefault(unit_key(vertex, mode, class_sizes), []).append(vertex)
    units = {key: _merge(key, group, events) for key, group in members.items()}
    of = {v.key: key for key, group in members.items() for v in group}
    nth = {v.key: n for group in members.values() for n, v in enumerate(group)}  # which iteration
    edges: dict[tuple[str, str], UnitEdge] = {}
    histories: dict[tuple[str, str], list[History]] = {}  # unit edge -> its members' histories
    for (src, dst), history in events.edges.items():
        pair = (of[src], of[dst])
        if pair[0] == pair[1] and pair[0].startswith("m:"):
            continue  # inside a module's box
        across = units[pair[0]].folded and units[pair[1]].folded and nth[src] != nth[dst]
        edge = edges.get(pair)
        if edge is None:
            edge = edges[pair] = UnitEdge(*pair, edge_kind(src, dst), 0, back=across)
        edge.back = edge.back and across
        edge.count = max(edge.count, max(map(itemgetter(1), history), default=0))
        histories.setdefault(pair, []).append(history)
    for pair, group in histories.items():
        edges[pair].vis = _shown(group[0]) if len(group) == 1 else \
            _any_of([(step, n, 1 if c else 0) for n, history in enumerate(group) for step, c in history])
    _fold_grads(events, of, edges)
    return Folding(mode, units, edges)


def _fold_grads(events: Events, of: dict[str, str], edges: dict[tuple[str, str], UnitEdge]) -> None:
    """Each unit edge's backward marks, from its members' (linear in the marks)."""
    members: dict[tuple[str, str], list[tuple[str, str]]] = {}
    for src, dst in events.edge_state:
        pair = (of.get(src), of.get(dst))
        if pair in edges:
            members.setdefault(pair, []).append((src, dst))  # type: ignore[arg-type]
    for pair, group in members.items():
        edge = edges[pair]
        if len(group) == 1:
            edge.state = events.edge_state[group[0]]
            edge.text = events.edge_text.get(group[0], [])
            continue
        stream = [(step, n, 1 if value else 0) for n, member in enumerate(group)
                  for step, value in events.edge_state[member]]
        edge.state = [(step, "grad" if on else None) for step, on in _any_of(stream)]


def _shown(history: History) -> History:
    """Shown while one member's count is not 0 (``_any_of`` of one member, without its sort)."""
    out: History = []
    for step, count in history:
        record(out, step, bool(count))
    return out


def _any_of(stream: list[tuple[int, int, int]]) -> History:
    """Shown while any member is: member histories (step, member, shown) merged in step order."""
    stream.sort()
    shown: dict[int, int] = {}
    out: History = []
    for step, member, on in stream:
        shown[member] = on
        if not on:
            del shown[member]
        record(out, step, bool(shown))
    return out


def _merge(key: str, group: list[Vertex], events: Events) -> Unit:
    first = group[0]
    folded = len(group) > 1
    if not folded and not key.startswith("m:"):  # the unit is its vertex: its histories as they are
        unit = Unit(key, first.kind, first.title, [first.key], False, first.klass,
                    events.vis.get(key, []), events.text.get(key, []), events.state.get(key, []),
                    label_len=first.label_len, chip_len=dict(first.chip_len), first=first.born)
        for name in first.chips:
            chip = (key, name)
            unit.chips[name] = {"vis": events.chip_vis.get(chip, []), "text": events.chip_text.get(chip, []),
                                "state": events.chip_state.get(chip, [])}
        return unit
    kind = "module" if key.startswith("m:") else first.kind
    title = key[2:] if kind == "module" else first.title
    unit = Unit(key, kind, title, [v.key for v in group], folded, None if kind == "module" else first.klass)
    unit.label_len = max(v.label_len for v in group)
    for v in group:
        for name, length in v.chip_len.items():
            unit.chip_len[name] = max(unit.chip_len.get(name, 0), length)
    unit.first = min(v.born for v in group)
    if not folded:  # the unit is its vertex: its histories as they are
        unit.vis = events.vis.get(first.key, [])
        unit.text = events.text.get(first.key, [])
        unit.state = events.state.get(first.key, [])
        for name in first.chips:
            chip = (first.key, name)
            unit.chips[name] = {"vis": events.chip_vis.get(chip, []), "text": events.chip_text.get(chip, []),
                                "state": events.chip_state.get(chip, [])}
        return unit
    if kind == "module":
        _merge_module(unit, group, events)
        return unit
    _merge_class(unit, group, events)
    return unit


def _merge_module(unit: Unit, group: list[Vertex], events: Events) -> None:
    stream = [(step, n, 1 if on else 0) for n, v in enumerate(group)
              for step, on in events.vis.get(v.key, [])]
    unit.vis = _any_of(stream)


def _merge_class(unit: Unit, group: list[Vertex], events: Events) -> None:
    """Sweep the members' changes in step order, keeping who is on screen and what each reads.
    What a member reads sits in slots: its text, its state, then vis/text/state of each chip."""
    chip_names = list(dict.fromkeys(name for v in group for name in v.chips))
    chip_slot = {name: 2 + 3 * i for i, name in enumerate(chip_names)}
    changes: list[tuple[int, int, int, Any]] = []  # (step, member, slot or -1 for its vis, value)
    for n, v in enumerate(group):
        key = v.key
        changes += [(s, n, -1, val) for s, val in events.vis.get(key, ())]
        changes += [(s, n, 0, val) for s, val in events.text.get(key, ())]
        changes += [(s, n, 1, val) for s, val in events.state.get(key, ())]
        for name in v.chips:
            chip, slot = (key, name), chip_slot[name]
            changes += [(s, n, slot, val) for s, val in events.chip_vis.get(chip, ())]
            changes += [(s, n, slot + 1, val) for s, val in events.chip_text.get(chip, ())]
            changes += [(s, n, slot + 2, val) for s, val in events.chip_state.get(chip, ())]
    changes.sort(key=itemgetter(0, 1))
    unit.chips = {name: {"vis": [], "text": [], "state": []} for name in chip_names}
    chip_runs = [(chip_slot[name], runs["vis"], runs["text"], runs["state"])
                 for name, runs in unit.chips.items()]
    width = 2 + 3 * len(chip_names)
    now = [[None] * width for _ in group]
    on_screen: dict[int, None] = {}  # members on screen, in the order they came
    vis, count, text, state, rep_runs = unit.vis, unit.count, unit.text, unit.state, unit.rep
    i, total = 0, len(changes)
    while i < total:
        step = changes[i][0]
        while i < total and changes[i][0] == step:
            _, n, slot, value = changes[i]
            if slot < 0:
                on_screen.pop(n, None)
                if value:
                    on_screen[n] = None
            else:
                now[n][slot] = value
            i += 1
        rep = next(reversed(on_screen)) if on_screen else None
        record(vis, step, rep is not None)
        record(count, step, f"×{len(on_screen)}" if len(on_screen) > 1 else None)
        if rep is None:
            continue
        facts = now[rep]
        record(text, step, facts[0])
        record(state, step, facts[1])
        record(rep_runs, step, group[rep].node)
        for slot, chip_vis, chip_text, chip_state in chip_runs:
            record(chip_vis, step, bool(facts[slot]))
            record(chip_text, step, facts[slot + 1])
            record(chip_state, step, facts[slot + 2])

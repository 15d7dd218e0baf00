"""The GPU memory model (app/trace/gpu.py): the caching allocator's rules on golden cases, worked out
by hand from c10/cuda/CUDACachingAllocator.cpp, and the model fed a real trace."""

from __future__ import annotations

import pytest

from app.engine import EngineLimits, trace_delta
from app.schema import DeltaTrace
from app.trace.gpu import (
    LARGE_BUFFER,
    SMALL_BUFFER,
    CachingAllocator,
    GpuMemory,
    round_size,
    segment_size,
    should_split,
)
from app.trace.replay import replay

MiB = 1 << 20


@pytest.mark.parametrize(("nbytes", "rounded"), [
    (1, 512), (4, 512), (511, 512), (512, 512), (513, 1024), (64_000, 64_000), (64_001, 64_512), (MiB, MiB),
    (MiB + 1, MiB + 512),
])
def test_round_size(nbytes: int, rounded: int) -> None:
    assert round_size(nbytes) == rounded


@pytest.mark.parametrize(("size", "segment"), [
    (512, 2 * MiB), (MiB, 2 * MiB), (MiB + 512, 20 * MiB), (10 * MiB - 512, 20 * MiB),
    (10 * MiB, 10 * MiB), (12 * MiB, 12 * MiB), (12 * MiB + 512, 14 * MiB), (19 * MiB + 512, 20 * MiB),
])
def test_segment_size(size: int, segment: int) -> None:
    assert segment_size(size) == segment


def test_split_rules() -> None:
    assert should_split(2 * MiB, 512)  # small pool: the rest of at least 512 B is kept apart
    assert not should_split(1024, 1024 - 256)  # (cannot happen: sizes are multiples of 512)
    assert should_split(20 * MiB, MiB + 512)  # large pool: the rest is more than 1 MiB
    assert not should_split(20 * MiB, 19 * MiB + 512)  # 512 KiB left: handed out whole
    assert not should_split(2 * MiB + MiB, 2 * MiB)  # exactly 1 MiB left: not more than kSmallSize


def test_a_four_byte_scalar() -> None:
    a = CachingAllocator()
    a.malloc("s1", 4)
    assert (a.allocated, a.reserved, a.segments) == (512, 2 * MiB, 1)


def test_one_mib_and_one_byte_takes_a_20_mib_segment() -> None:
    a = CachingAllocator()
    a.malloc("s1", MiB + 1)
    assert (a.allocated, a.reserved) == (MiB + 512, LARGE_BUFFER)
    a.malloc("s2", 2 * MiB)  # from the same segment's rest
    assert (a.allocated, a.reserved) == (3 * MiB + 512, LARGE_BUFFER)


def test_large_requests_round_to_2_mib_and_unsplit_blocks_count_whole() -> None:
    a = CachingAllocator()
    a.malloc("s1", 12 * MiB)
    assert (a.allocated, a.reserved) == (12 * MiB, 12 * MiB)
    a.malloc("s2", 19 * MiB + 1)  # 19.5 MiB asked: a 20 MiB segment, 0.5 MiB left is not split off
    assert (a.allocated, a.reserved) == (32 * MiB, 32 * MiB)
    assert a.block_size("s2") == 20 * MiB


def test_a_freed_block_stays_reserved_and_is_reused() -> None:
    a = CachingAllocator()
    a.malloc("s1", 4000)
    a.free("s1")
    assert (a.allocated, a.reserved) == (0, SMALL_BUFFER)
    a.malloc("s2", 4000)
    assert (a.allocated, a.reserved, a.segments) == (4096, SMALL_BUFFER, 1)


def test_small_blocks_pack_into_2_mib_segments() -> None:
    a = CachingAllocator()
    a.malloc("a", MiB)
    a.malloc("b", MiB)
    assert (a.allocated, a.reserved, a.segments) == (2 * MiB, 2 * MiB, 1)
    a.malloc("c", 4)
    assert (a.allocated, a.reserved, a.segments) == (2 * MiB + 512, 4 * MiB, 2)


def test_freed_neighbours_merge_and_best_fit_takes_the_lowest_address() -> None:
    a = CachingAllocator()
    for key in "abcd":
        a.malloc(key, 512)
    a.free("b")
    a.free("c")  # merges with b: one free 1024-byte block at b's address
    block = a.malloc("e", 1024)
    assert block is not None and block.address == 512 and block.size == 1024
    a.free("a")
    a.free("e")
    a.free("d")  # everything merged back: one free block, the whole segment
    assert a.allocated == 0
    # two 1 MiB blocks (the largest small requests) fit only in a segment that is whole again
    first, second = a.malloc("f", MiB), a.malloc("g", MiB)
    assert first is not None and second is not None
    assert (first.address, second.address, a.segments) == (0, MiB, 1)


def test_zero_bytes_ask_nothing() -> None:
    a = CachingAllocator()
    assert a.malloc("s1", 0) is None
    assert (a.allocated, a.reserved) == (0, 0)
    a.free("s1")


def _points(code: str) -> list:
    trace = DeltaTrace.model_validate(trace_delta(code, EngineLimits()))
    model = GpuMemory()
    for state, changes in replay(trace):
        model.add(state, changes)
    return model.points


def test_the_model_follows_a_trace() -> None:
    points = _points(
        "x = torch.zeros(1)\n"  # 4 bytes: one 512 B block of a new 2 MiB segment
        "y = torch.zeros(300_000)\n"  # 1.2 MB: a 20 MiB segment, split
        "del y\n"  # freed, kept reserved
        "z = torch.zeros(300_000)\n"  # the cached block again
        "w = torch.zeros(16)\n"
    )
    y = round_size(1_200_000)
    assert [(p.allocated, p.reserved) for p in points] == [
        (512, 2 * MiB),
        (512 + y, 22 * MiB),
        (512, 22 * MiB),
        (512 + y, 22 * MiB),
        (1024 + y, 22 * MiB),
    ]


def test_a_rebound_name_allocates_before_it_frees() -> None:
    # x = x * 2: the new x is made while the old one is alive, so two 6 MB blocks fit one 20 MiB
    # segment; the old block is then cached and the third x takes it again.
    points = _points("x = torch.zeros(1_500_000)\nx = x * 2\nx = x * 2\n")
    six = round_size(6_000_000)
    assert [(p.allocated, p.reserved) for p in points] == [
        (six, 20 * MiB), (six, 20 * MiB), (six, 20 * MiB)]


def test_its_lines_on_the_memory_chart_and_its_row_in_the_facts() -> None:
    """The page's memory chart draws the model's two lines on their own axis (its top: the reserved
    peak), the readout's data carries both figures per step, and a storage's facts name its block."""
    import json
    import re

    from app.render.notices import RunLimits
    from app.templating import render, run_context

    code = "x = torch.zeros(1)\ny = torch.zeros(300_000)\n"
    trace = DeltaTrace.model_validate(trace_delta(code, EngineLimits()))
    context = run_context(trace, code, None, RunLimits())
    html = render("_run.html", **context)
    chart = html[html.index('data-testid="memory-timeline"'):]
    assert 'data-testid="gpu-lines"' in chart and 'data-testid="gpu-legend"' in chart
    assert re.search(r'class="tl-y tl-y-gpu"[^>]*><span>22\.0 MiB</span>', chart)
    data = re.search(r'data-role="timeline-data">([^<]*)</script>', chart)
    assert data is not None
    points = json.loads(data.group(1))
    assert [p[4:] for p in points] == [[512, 2 * MiB], [512 + round_size(1_200_000), 22 * MiB]]
    reserved = re.search(r'class="tl-gpu-reserved" points="([^"]*)"', chart)
    assert reserved is not None
    ys = [float(xy.split(",")[1]) for xy in reserved.group(1).split()]
    assert ys[0] > ys[-1] and min(ys) == pytest.approx(1.0)  # rises to the top at the reserved peak
    facts = context["payload"]["pairs"]
    assert ["on a GPU", "a 512 B block (a model of the CUDA caching allocator)"] in facts
    assert ["on a GPU", f"a {round_size(1_200_000) / MiB:.1f} MiB block (a model of the CUDA caching "
            "allocator)"] in facts
    assert 'data-testid="legend-gpu"' in html


def test_a_measured_device_is_said_beside_the_model() -> None:
    """On a real CUDA device (the library entry), torch.cuda.memory_allocated() after each step
    travels beside the model's figures to the readout (no GPU here: the readings are given)."""
    from app.diagnostics import analysis
    from app.render.findings import timeline_view

    code = "x = torch.zeros(1)\ny = torch.zeros(300_000)\n"
    trace = DeltaTrace.model_validate(trace_delta(code, EngineLimits()))
    _, memory = analysis(trace, code)
    gpu = _points(code)
    view = timeline_view(memory, 0, gpu=gpu, measured=[512, 1_200_640])
    assert [p[4:] for p in view.points] == [[512, 2 * MiB, 512],
                                            [512 + round_size(1_200_000), 22 * MiB, 1_200_640]]
    assert timeline_view(memory, 0, gpu=gpu, measured=[1]).points[0][4:] == [512, 2 * MiB]  # not per step

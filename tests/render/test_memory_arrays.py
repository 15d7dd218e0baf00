"""numpy arrays in the memory view: a view of the storage they share, or a buffer of their own."""

from __future__ import annotations

from app.gallery import get_example
from app.render import frame_at
from tests.render.conftest import explore, strip_of, trace_v1

CODE = get_example("numpy-shares-or-copies").code  # a = t.numpy(); s = np.asarray(t); c = np.array(t)


def _line(code: str, text: str) -> int:
    """The step index after the line starting with ``text`` (one step per line here)."""
    return next(i for i, line in enumerate(code.splitlines()) if line.startswith(text))


def test_shared_arrays_are_views_of_the_tensors_strip_and_a_copy_is_its_own_buffer() -> None:
    view = explore(CODE)
    steps = trace_v1(CODE).steps
    t = steps[-1].variables["t"]
    at = _line(CODE, "c = ")
    _, strip = strip_of(view, t, at)
    frame = frame_at(view, at)
    views = frame.text(strip.numpy_k)
    assert "numpy a: (3,) · strides (4,) bytes · float32 · from byte 0" in views
    assert "numpy s:" in views and "numpy c" not in views  # np.array(t) copied
    buffers = view.memory.buffers
    shown = [frame.text(k) for k in buffers.slots if frame.shows(k)]
    assert frame.shows(buffers.k) and len(shown) == 1
    assert shown[0].startswith("numpy c: numpy's own buffer, 12 B · (3,) · strides (4,) bytes · float32")
    before = frame_at(view, at - 1)
    assert not before.shows(buffers.k) and "numpy s:" in before.text(strip.numpy_k)


def test_a_write_through_the_array_changes_the_tensors_cells_not_its_version() -> None:
    view = explore(CODE)
    t = trace_v1(CODE).steps[-1].variables["t"]
    write = _line(CODE, "a[0] = 5.")
    _, strip = strip_of(view, t, write)
    at, before = frame_at(view, write), frame_at(view, write - 1)
    assert before.text(strip.cells_k).split(" ") == ["0.", "0.", "0."]
    assert at.text(strip.cells_k).split(" ") == ["5.", "0.", "0."]
    assert at.state(strip.cells_k).split() == ["0"]
    assert at.text(strip.rows[0].version_k) == "v0"  # torch did not see numpy's write
    last = frame_at(view, view.step_count - 1)  # c[1] = 7: only the copy's text changes
    assert last.text(strip.cells_k).split(" ") == ["5.", "0.", "0."]
    assert any("[0., 7., 0.]" in last.text(k) for k in view.memory.buffers.slots)


def test_an_array_view_starts_at_numpys_byte_offset() -> None:
    code = "import numpy as np\nt = torch.arange(4.)\na = t.numpy()\nv = a[1:]\n"
    view = explore(code)
    t = trace_v1(code).steps[-1].variables["t"]
    _, strip = strip_of(view, t, 3)
    views = frame_at(view, 3).text(strip.numpy_k)
    assert "numpy v: (3,) · strides (4,) bytes · float32 · from byte 4" in views


def test_without_numpy_the_view_has_no_array_tracks() -> None:
    view = explore("x = torch.ones(2)\ny = x.detach()\n")
    frame = frame_at(view, 1)
    buffers = view.memory.buffers
    assert not buffers.slots  # the page draws no group of own buffers at all
    assert buffers.k not in frame.tracks.vis and buffers.more_k not in frame.tracks.text
    assert all(not frame.text(s.numpy_k) for _, s in view.memory.strips())

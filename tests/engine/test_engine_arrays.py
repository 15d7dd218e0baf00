"""numpy arrays in the trace: which storage they share, read from memory, with numpy and torch as the
oracle (``np.shares_memory``, data pointers, the plain run's own arrays and tensors)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch_oracle import run_plain, trace

SHARING = """\
import numpy as np
t = torch.arange(4.)
a = t.numpy()
d = np.asarray(t)
n = np.ones(3)
f = torch.from_numpy(n)
c = np.array(t)
k = t.numpy().copy()
v = a[1:]
r = a[::-2]
arrs = [t.numpy(), {'x': np.zeros(2)}]
"""


def _array_named(step: dict, name: str) -> tuple[str, dict]:
    found = [(aid, fact) for aid, fact in step["arrays"].items() if name in fact["names"]]
    assert len(found) == 1, (name, step["arrays"])
    return found[0]


def _pointer(array: np.ndarray) -> int:
    return array.__array_interface__["data"][0]


def _storage_start(tensor: torch.Tensor) -> int:
    return tensor.untyped_storage().data_ptr()


@pytest.fixture(scope="module")
def shared() -> tuple[dict, dict]:
    result = trace(SHARING)
    assert result["ok"], result["error"]
    return result["steps"][-1], run_plain(SHARING).namespace


@pytest.mark.parametrize("name", ["a", "d", "n", "c", "k", "v", "r", "arrs[0]", "arrs[1]['x']"])
def test_an_array_is_on_the_storage_numpy_says_it_shares(shared: tuple[dict, dict], name: str) -> None:
    step, plain = shared
    array = eval(name, plain)  # noqa: S307 - the test's own expression, in the plain run
    _, fact = _array_named(step, name)
    assert fact["shape"] == list(array.shape)
    assert fact["strides"] == list(array.strides)  # bytes, as numpy says
    assert fact["dtype"] == array.dtype.name and fact["itemsize"] == array.itemsize
    assert fact["values"] == array.tolist()
    sharers = [tname for tname in step["variables"] if np.shares_memory(array, plain[tname].numpy())]
    if sharers:  # one more view of that tensor's storage, at numpy's own byte offset
        tensor = plain[sharers[0]]
        assert fact["storage"] == step["tensors"][step["variables"][sharers[0]]]["storage"]
        assert fact["offset"] == _pointer(array) - _storage_start(tensor)
        assert fact["buffer_nbytes"] == tensor.untyped_storage().nbytes()
    else:  # a copy: a buffer of its own, numpy's, of the size numpy allocated
        assert fact["storage"] is None
        assert fact["owner"] == "numpy"
        root = array if array.base is None else array.base
        assert fact["buffer_nbytes"] == root.nbytes
        assert fact["offset"] == _pointer(array) - _pointer(root)


def test_numpy_calls_that_share_and_calls_that_copy(shared: tuple[dict, dict]) -> None:
    step, _ = shared
    storage_of_t = step["tensors"][step["variables"]["t"]]["storage"]
    for name in ("a", "d", "v", "r", "arrs[0]"):  # .numpy(), np.asarray(t), views of them
        assert _array_named(step, name)[1]["storage"] == storage_of_t, name
    assert _array_named(step, "n")[1]["storage"] == step["tensors"][step["variables"]["f"]]["storage"]
    for name in ("c", "k"):  # np.array(t), t.numpy().copy()
        assert _array_named(step, name)[1]["storage"] is None, name
    assert _array_named(step, "a")[1]["owner"] == "torch"
    assert _array_named(step, "n")[1]["owner"] == "numpy"  # torch.from_numpy: numpy's bytes, shared


def test_a_view_of_an_array_names_its_base(shared: tuple[dict, dict]) -> None:
    step, _ = shared
    a_id, _ = _array_named(step, "a")
    _, view = _array_named(step, "v")
    assert view["base"] == a_id and view["offset"] == 4  # a[1:] of float32: one element in


WRITES = """\
import numpy as np
t = torch.zeros(3)
a = t.numpy()
a[0] = 5
n = np.zeros(2)
f = torch.from_numpy(n)
n[1] = 7
"""


@pytest.mark.parametrize("full", [False, True], ids=["incremental", "whole"])
def test_writing_through_the_array_shows_in_the_tensor(full: bool) -> None:
    steps = trace(WRITES, full_snapshots=full)["steps"]
    plain = run_plain(WRITES).namespace
    after = steps[3]  # a[0] = 5
    tensor = after["tensors"][after["variables"]["t"]]
    assert tensor["values"] == [5.0, 0.0, 0.0]
    assert tensor["version"] == plain["t"]._version == 0  # torch does not see numpy's write
    assert after["storages"][tensor["storage"]]["values"] == [5.0, 0.0, 0.0]
    assert _array_named(after, "a")[1]["values"] == [5.0, 0.0, 0.0]
    last = steps[-1]  # n[1] = 7, seen through torch.from_numpy's tensor
    assert last["tensors"][last["variables"]["f"]]["values"] == plain["f"].tolist() == [0.0, 7.0]


def test_arrays_appear_change_and_go_as_deltas() -> None:
    from app.engine import EngineLimits, trace_delta

    source = "import numpy as np\nt = torch.ones(2)\na = t.numpy()\nx = 1\na[1] = 3\ndel a\n"
    steps = trace_delta(source, EngineLimits())["steps"]
    assert "arrays" not in steps[1]  # t = torch.ones(2): no array
    assert [fact["names"] for fact in steps[2]["arrays"].values()] == [["a"]]
    assert "arrays" not in steps[3]  # x = 1: nothing about the array changed
    (aid, fact), = steps[4]["arrays"].items()
    assert fact["values"] == [1.0, 3.0]
    assert steps[5]["dropped"]["arrays"] == [aid]


def test_observing_an_array_subclass_runs_none_of_its_code() -> None:
    source = """\
import numpy as np
class Sub(np.ndarray):
    def tolist(self):
        raise RuntimeError("ran tolist")
    def __getattribute__(self, name):
        raise RuntimeError("ran " + name)
s = np.arange(3.0).view(Sub)
"""
    result = trace(source)
    assert result["ok"], result["error"]
    (fact,) = result["steps"][-1]["arrays"].values()
    assert fact["names"] == ["s"] and fact["values"] == [0.0, 1.0, 2.0] and fact["shape"] == [3]


def test_a_snippet_without_numpy_has_no_arrays() -> None:
    steps = trace("x = torch.ones(2)\ny = x.detach()\n")["steps"]
    assert all(step["arrays"] == {} for step in steps)


KEPT = """\
import numpy as np
t = torch.arange(4.)
a = t.numpy()
del t
b = np.array(a)
f = torch.from_numpy(b)
f.add_(1)
del f
preds = []
for i in range(3):
    out = torch.randn(2)
    preds.append(out.numpy())
preds[0][0] = 9
"""


def test_incremental_array_facts_equal_the_whole_snapshots_at_every_step() -> None:
    incremental, whole = (trace(KEPT, full_snapshots=full)["steps"] for full in (False, True))
    assert len(incremental) == len(whole)
    for index, (a, b) in enumerate(zip(incremental, whole, strict=True)):
        assert a["arrays"] == b["arrays"], index


def test_an_array_outliving_its_tensors_name_reads_as_that_tensors_memory() -> None:
    steps = trace(KEPT)["steps"]
    plain = run_plain(KEPT).namespace
    _, after_del = _array_named(steps[3], "a")  # del t: nobody names the tensor, the array keeps it
    assert after_del["storage"] is None and after_del["owner"] == "torch"
    assert isinstance(plain["a"].base, torch.Tensor) and after_del["values"] == [0.0, 1.0, 2.0, 3.0]
    _, b = _array_named(steps[6], "b")  # f.add_(1) on torch.from_numpy(b): numpy's bytes, torch's write
    assert b["owner"] == "numpy" and b["storage"] is not None and b["values"] == [1.0, 2.0, 3.0, 4.0]
    _, b = _array_named(steps[7], "b")  # del f: its own buffer again
    assert b["storage"] is None and b["buffer_nbytes"] == plain["b"].nbytes
    last = steps[-1]
    shown = np.array(_array_named(last, "preds[0]")[1]["values"], dtype=np.float32)  # shortest float32 text
    assert np.array_equal(shown, plain["preds"][0])
    assert plain["preds"][0][0] == 9

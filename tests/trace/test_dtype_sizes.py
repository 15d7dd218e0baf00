"""One definition of a dtype's bytes per element (``app.dtypes``), held to torch's ``itemsize`` for
every dtype torch has, and what it decides: a tensor that views its storage as another dtype (a
float8 view of float32 memory) is consistent (``app.trace.consistency``: it was refused, and the
whole run with it), and the memory view's rows cover the bytes torch says they do."""

from __future__ import annotations

import pytest
import torch

from app.dtypes import dtype_itemsize
from app.render.memory_records import layout_of
from app.schema import DeltaTrace
from app.trace.consistency import problem
from app.trace.delta import expand

DTYPES = sorted({str(d).removeprefix("torch.") for d in vars(torch).values() if isinstance(d, torch.dtype)})


@pytest.mark.parametrize("name", DTYPES)
def test_every_dtype_has_torchs_itemsize(name: str) -> None:
    assert dtype_itemsize(name) == getattr(torch, name).itemsize


@pytest.mark.parametrize("name", ["", "x", "int0", "torch.float32", "tensor"])
def test_a_name_that_says_no_size_leaves_it_to_the_storage(name: str) -> None:
    assert dtype_itemsize(name) is None


# (base dtype, the dtype it is viewed as): wider to narrower, narrower to wider, float8 of each kind
VIEWS = [("float32", "float8_e4m3fn"), ("float32", "float8_e5m2"), ("int32", "float8_e4m3fnuz"),
         ("float32", "float8_e5m2fnuz"), ("float32", "uint8"), ("uint8", "float32"), ("float64", "complex64"),
         ("int64", "float8_e8m0fnu"), ("float32", "bfloat16")]


@pytest.mark.parametrize(("base", "view"), VIEWS)
def test_a_dtype_view_is_consistent_and_drawn_over_torchs_bytes(base: str, view: str) -> None:
    from app.engine import trace_delta

    code = f"x = torch.zeros(8, dtype=torch.{base})\ny = x.view(torch.{view})\n"
    trace = DeltaTrace.model_validate(trace_delta(code))
    assert trace.ok, trace.error
    assert problem(trace) is None
    last = expand(trace).steps[-1]
    y = last.tensors[last.variables["y"]]
    storage = last.storages[y.storage]
    plain = torch.zeros(8, dtype=getattr(torch, base)).view(getattr(torch, view))
    layout, _reads = layout_of(y, storage)
    assert layout.itemsize == plain.element_size()
    assert layout.shape == tuple(plain.shape) and layout.stride == plain.stride()
    # the row's last byte is the storage's last: torch's extent of the view, in bytes
    assert (plain.numel() - 1) * layout.itemsize + layout.itemsize == plain.untyped_storage().nbytes()

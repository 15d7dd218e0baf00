"""The consistency check's shortcuts (``app.trace.consistency``) find what the plain definitions find:
values nested as the shape, element sizes by dtype, and references counted across a fact set anew
with the same targets (the count skips its -1/+1, never the dangling it carries)."""

from __future__ import annotations

import random
from typing import Any

import pytest

from app.schema import DeltaTrace, StorageFact
from app.trace.consistency import problem
from app.trace.fact_checks import itemsize, nested

TENSOR = {
    "shape": [2], "dtype": "float32", "stride": [1], "storage_offset": 0, "storage": "s1",
    "requires_grad": False, "is_leaf": True, "grad_fn": None, "grad": None, "base": None,
    "version": 0, "values": [1.0, 2.0],
}
STORAGE = {"nbytes": 8, "element_size": 4, "dtype": "float32"}
NODE = {"name": "MulBackward0", "next": [], "variable": None, "saved": {}}


def _plain_nested(values: Any, shape: list[int]) -> bool:
    """The definition, one call per list: what the check's loops must agree with."""
    if not shape:
        return not isinstance(values, list)
    return (isinstance(values, list) and len(values) == shape[0]
            and all(_plain_nested(item, shape[1:]) for item in values))


class _Row(list):  # a list subclass: the type test must not take it for a scalar row
    pass


def _values(shape: list[int], rng: random.Random) -> Any:
    if not shape:
        return rng.choice([1.5, 2, True, "NaN", None])
    return [_values(shape[1:], rng) for _ in range(shape[0])]


def _spoil(values: Any, rng: random.Random) -> Any:
    """One random change to a nested value: a dropped or extra item, a list for a scalar or back."""
    if not isinstance(values, list) or not values or rng.random() < 0.3:
        return rng.choice([[values], 3.0, [], _Row([1.0]), [[1.0]]])
    values = list(values)
    i = rng.randrange(len(values))
    choice = rng.randrange(3)
    if choice == 0:
        values.pop(i)
    elif choice == 1:
        values.append(values[i])
    else:
        values[i] = _spoil(values[i], rng)
    return values


def test_values_nesting_agrees_with_the_definition() -> None:
    rng = random.Random(9)
    shapes = [[], [0], [1], [4], [2, 3], [3, 1], [1, 0], [2, 2, 2], [2, 1, 3, 1]]
    outcomes = set()
    for shape in shapes:
        for _ in range(200):
            values = _values(shape, rng)
            if rng.random() < 0.7:
                values = _spoil(values, rng)
            expected = _plain_nested(values, shape)
            assert nested(values, shape) is expected, (shape, values)
            outcomes.add(expected)
    assert outcomes == {True, False}
    assert not nested([_Row([1.0]), [2.0]], [2])  # a list subclass in a row of scalars
    assert not nested([[1.0, _Row([2.0])], [3.0, 4.0]], [2, 2])


# torch's itemsize (a packed or sub-byte dtype takes one byte: app.dtypes), else the storage's (3)
@pytest.mark.parametrize(("dtype", "size"), [("float32", 4), ("bool", 1), ("complex64", 8), ("int8", 1),
                                             ("bfloat16", 2), ("uint64", 8), ("quint4x2", 1), ("int4", 1),
                                             ("float8_e4m3fnuz", 1), ("no-such-dtype", 3)])
def test_element_size_by_dtype_else_the_storages(dtype: str, size: int) -> None:
    storage = StorageFact(nbytes=6, element_size=3)
    assert itemsize(dtype, storage) == size
    assert itemsize(dtype, storage) == size  # the second answer comes from the cache


def _trace(*steps: dict) -> DeltaTrace:
    return DeltaTrace.model_validate({"format": "delta", "ok": True, "steps": list(steps)})


FIRST = {"line": 1, "variables": {"x": "t1"}, "tensors": {"t1": TENSOR}, "storages": {"s1": STORAGE}}
RESET = {"line": 2, "tensors": {"t1": {**TENSOR, "version": 1, "values": [3.0, 4.0]}}}  # x.add_(2)


def test_a_fact_set_anew_with_the_same_references_is_still_counted() -> None:
    assert problem(_trace(FIRST, RESET, RESET)) is None
    found = problem(_trace(FIRST, RESET, {"line": 2, "dropped": {"storages": ["s1"]}}))
    assert found is not None and found.step == 2 and "refers to storage s1" in found.reason, found
    # the names of a re-bound variable, and a node set anew with the same edges, count the same way
    node = {"line": 2, "tensors": {"t1": {**TENSOR, "grad_fn": "n1"}}, "nodes": {"n1": NODE}}
    freed = {**NODE, "saved_errors": {"self": "freed"}}
    again = {"line": 2, "variables": {"x": "t1"}, "nodes": {"n1": freed}}
    assert problem(_trace(FIRST, node, again, again)) is None
    found = problem(_trace(FIRST, node, again, {"line": 2, "dropped": {"nodes": ["n1"]}}))
    assert found is not None and found.step == 3 and "refers to node n1" in found.reason, found


def test_a_dangling_reference_carried_past_a_cap_still_fails_when_set_anew() -> None:
    """Past the node cap t1 may name a node the step left out; set again with the same grad_fn in a
    step without the cap, it dangles there (its count was carried, not re-made)."""
    capped = {"line": 2, "capped": {"nodes": 1}, "tensors": {"t1": {**TENSOR, "grad_fn": "n9"}}}
    same = {"line": 2, "tensors": {"t1": {**TENSOR, "grad_fn": "n9", "version": 1}}}
    assert problem(_trace(FIRST, capped)) is None
    found = problem(_trace(FIRST, capped, same))
    assert found is not None and found.step == 2 and "refers to node n9" in found.reason, found


def test_a_tensor_set_anew_is_checked_against_its_storage_now() -> None:
    """A storage replaced by one with fewer bytes under a tensor set anew in the same step."""
    shrunk = {"line": 2, "storages": {"s1": {**STORAGE, "nbytes": 4}},
              "tensors": {"t1": {**TENSOR, "version": 1, "values": None}}}
    found = problem(_trace(FIRST, shrunk))
    assert found is not None and found.step == 1 and "reaches byte 8 of storage s1" in found.reason, found

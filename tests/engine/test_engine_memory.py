"""Storage, views and version counters, step by step, checked against torch."""

from __future__ import annotations

import torch
from torch_oracle import fact, node_of, step_after, trace


def test_clone_copies_memory_and_adds_a_graph_node() -> None:
    result = trace("x = torch.ones(3, requires_grad=True)\ny = x.clone()\n")
    step = step_after(result, 2)
    x, y = fact(step, "x"), fact(step, "y")
    assert y["storage"] != x["storage"]
    assert (y["is_leaf"], y["requires_grad"]) == (False, True)
    clone = node_of(step, "y")
    assert clone["name"] == "CloneBackward0"
    (accumulate,) = clone["next"]
    assert step["nodes"][accumulate]["name"] == "AccumulateGrad"
    assert step["nodes"][accumulate]["variable"] == step["variables"]["x"]


def test_detach_shares_memory_and_leaves_the_graph() -> None:
    result = trace("x = torch.ones(3, requires_grad=True)\nd = x.detach()\n")
    step = step_after(result, 2)
    x, d = fact(step, "x"), fact(step, "d")
    assert d["storage"] == x["storage"]
    assert (d["requires_grad"], d["is_leaf"], d["grad_fn"]) == (False, True, None)
    assert d["base"] is None  # detach() is not a view in torch's sense
    assert step["variables"]["x"] != step["variables"]["d"]


def test_clone_detach_and_detach_clone_both_own_fresh_memory() -> None:
    source = """\
x = torch.ones(3, requires_grad=True)
a = x.clone().detach()
b = x.detach().clone()
"""
    step = trace(source)["steps"][-1]
    storages = {fact(step, name)["storage"] for name in ("x", "a", "b")}
    assert len(storages) == 3
    for name in ("a", "b"):
        assert (fact(step, name)["requires_grad"], fact(step, name)["grad_fn"]) == (False, None)
    # Only x's AccumulateGrad could be left; clone().detach() leaves no node behind.
    assert step["nodes"] == {}


def test_inplace_through_detached_alias_changes_the_original_and_its_version() -> None:
    source = """\
x = torch.ones(3, requires_grad=True)
d = x.detach()
d.zero_()
"""
    result = trace(source)
    before, after = step_after(result, 2), step_after(result, 3)
    assert fact(before, "x")["values"] == [1.0, 1.0, 1.0]
    assert fact(after, "x")["values"] == [0.0, 0.0, 0.0]
    assert (fact(before, "x")["version"], fact(before, "d")["version"]) == (0, 0)
    assert (fact(after, "x")["version"], fact(after, "d")["version"]) == (1, 1)
    assert after["storages"][fact(after, "x")["storage"]]["values"] == [0.0, 0.0, 0.0]


def test_views_transpose_slice_expand() -> None:
    source = """\
m = torch.arange(6.0).reshape(2, 3)
t = m.t()
row = m[1]
e = torch.tensor([1.0, 2.0]).expand(3, 2)
"""
    step = trace(source)["steps"][-1]
    m = torch.arange(6.0).reshape(2, 3)
    assert fact(step, "t")["stride"] == list(m.t().stride()) == [1, 3]
    assert fact(step, "row")["storage_offset"] == 3
    assert fact(step, "e")["stride"] == [0, 1]
    assert fact(step, "e")["values"] == [[1.0, 2.0]] * 3
    shared = {fact(step, name)["storage"] for name in ("m", "t", "row")}
    assert len(shared) == 1
    # m is itself a view of the arange result, which only m keeps alive: it is listed as the base.
    base = fact(step, "m")["base"]
    assert base is not None and base not in step["variables"].values()
    assert fact(step, "t")["base"] == base == fact(step, "row")["base"]
    assert step["tensors"][base]["values"] == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]
    # The expanded tensor's storage holds two elements, however many the view shows.
    storage = step["storages"][fact(step, "e")["storage"]]
    assert (storage["nbytes"], storage["values"]) == (8, [1.0, 2.0])


def test_views_of_views_share_one_storage_and_one_version_counter() -> None:
    source = """\
m = torch.zeros(2, 3)
t = m.t()
tt = t[1:]
tt.add_(1)
"""
    result = trace(source)
    before, after = step_after(result, 3), step_after(result, 4)
    names = ("m", "t", "tt")
    assert len({fact(after, n)["storage"] for n in names}) == 1
    assert [fact(before, n)["version"] for n in names] == [0, 0, 0]
    assert [fact(after, n)["version"] for n in names] == [1, 1, 1]
    # torch flattens view chains: tt's base is m itself, not t.
    assert fact(after, "tt")["base"] == after["variables"]["m"]
    assert fact(after, "m")["values"] == [[0.0, 1.0, 1.0], [0.0, 1.0, 1.0]]


def test_reshape_views_when_it_can_and_copies_when_it_must() -> None:
    source = """\
a = torch.arange(6.0).reshape(2, 3)
v = a.reshape(3, 2)
c = a.t().reshape(6)
"""
    step = trace(source)["steps"][-1]
    a = torch.arange(6.0).reshape(2, 3)
    assert a.reshape(3, 2).data_ptr() == a.data_ptr() and a.t().reshape(6).data_ptr() != a.data_ptr()
    assert fact(step, "v")["storage"] == fact(step, "a")["storage"]
    assert fact(step, "c")["storage"] != fact(step, "a")["storage"]
    assert fact(step, "v")["is_view"] and not fact(step, "c")["is_view"]


def test_data_shares_memory_but_not_the_version_counter() -> None:
    source = """\
x = torch.ones(3, requires_grad=True)
d = x.data
d.add_(1)
"""
    step = trace(source)["steps"][-1]
    x, d = fact(step, "x"), fact(step, "d")
    assert d["storage"] == x["storage"]
    assert (x["version"], d["version"]) == (0, 1)
    assert x["values"] == [2.0, 2.0, 2.0]
    assert (d["requires_grad"], d["is_leaf"]) == (False, True)


def test_no_grad_keeps_versions_and_inference_mode_has_none() -> None:
    source = """\
x = torch.ones(2, requires_grad=True)
with torch.no_grad():
    y = x * 2
with torch.inference_mode():
    z = x * 2
"""
    step = trace(source)["steps"][-1]
    y, z = fact(step, "y"), fact(step, "z")
    assert (y["requires_grad"], y["grad_fn"], y["version"], y["is_inference"]) == (False, None, 0, False)
    assert (z["requires_grad"], z["version"], z["is_inference"]) == (False, None, True)
    assert fact(step, "x")["version"] == 0


def test_requires_grad_on_a_detached_tensor_makes_a_new_leaf_on_the_same_memory() -> None:
    source = """\
x = torch.tensor([1.0, 2.0], requires_grad=True)
d = x.detach().requires_grad_()
(d * d).sum().backward()
"""
    step = trace(source)["steps"][-1]
    d = fact(step, "d")
    assert (d["requires_grad"], d["is_leaf"]) == (True, True)
    assert d["storage"] == fact(step, "x")["storage"]
    assert step["tensors"][d["grad"]]["values"] == [2.0, 4.0]
    assert fact(step, "x")["grad"] is None


def test_ids_are_stable_across_steps() -> None:
    source = """\
x = torch.ones(2, requires_grad=True)
y = x * 2
z = y + 1
w = z.sum()
"""
    steps = trace(source)["steps"]
    assert len({s["variables"]["x"] for s in steps}) == 1
    assert len({fact(s, "x")["storage"] for s in steps}) == 1
    later = steps[1:]
    assert len({s["variables"]["y"] for s in later}) == 1
    assert len({fact(s, "y")["grad_fn"] for s in later}) == 1
    accumulate = {node_of(s, "y")["next"][0] for s in later}
    assert len(accumulate) == 1


def test_a_deleted_tensor_disappears_and_a_new_one_gets_a_new_id() -> None:
    source = """\
x = torch.ones(2)
old = x
del x
del old
x = torch.ones(2)
"""
    result = trace(source)
    first_id = step_after(result, 1)["variables"]["x"]
    assert first_id in step_after(result, 3)["tensors"]  # still named `old`
    assert first_id not in step_after(result, 4)["tensors"]
    assert step_after(result, 4)["variables"] == {}
    # The new tensor may even reuse the freed object's address: it still gets a fresh id.
    assert step_after(result, 5)["variables"]["x"] != first_id


def test_rebinding_frees_the_old_tensor() -> None:
    result = trace("x = torch.ones(2)\nx = torch.zeros(3)\n")
    first, second = result["steps"]
    assert first["variables"]["x"] not in second["tensors"]
    assert len(second["tensors"]) == 1 and len(second["storages"]) == 1

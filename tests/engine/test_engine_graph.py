"""The autograd graph in each snapshot: nodes, their order, saved tensors, what keeps graphs alive."""

from __future__ import annotations

import torch
from torch_oracle import fact, lines, node_of, run_plain, step_after, trace


def _names(step: dict, ids: list) -> list:
    return [None if nid is None else step["nodes"][nid]["name"] for nid in ids]


def test_next_lists_next_functions_in_order_with_nulls() -> None:
    source = """\
x = torch.ones(2, requires_grad=True)
w = torch.ones(2, requires_grad=True)
c = torch.ones(2)
z = x * c + w
"""
    step = trace(source)["steps"][-1]
    plain = run_plain(source).namespace
    add = node_of(step, "z")
    torch_add = plain["z"].grad_fn
    assert add["name"] == type(torch_add).__name__ == "AddBackward0"
    assert _names(step, add["next"]) == [type(fn).__name__ for fn, _ in torch_add.next_functions]
    mul = step["nodes"][add["next"][0]]
    assert _names(step, mul["next"]) == ["AccumulateGrad", None]  # c needs no grad: torch says None
    assert step["nodes"][mul["next"][0]]["variable"] == step["variables"]["x"]
    assert step["nodes"][add["next"][1]]["variable"] == step["variables"]["w"]


def test_saved_inputs_point_at_the_live_tensors() -> None:
    source = """\
a = torch.tensor([1.0, 2.0], requires_grad=True)
b = torch.tensor([3.0, 4.0], requires_grad=True)
y = (a * b).sum()
"""
    step = trace(source)["steps"][-1]
    mul = step["nodes"][node_of(step, "y")["next"][0]]
    assert mul["name"] == "MulBackward0"
    assert mul["saved"] == {"self": step["variables"]["a"], "other": step["variables"]["b"]}
    assert mul["saved_errors"] == {}


def test_a_tensor_only_the_graph_keeps_alive_is_still_listed() -> None:
    source = """\
a = torch.tensor([1.0, 2.0], requires_grad=True)
b = torch.tensor([3.0, 4.0], requires_grad=True)
y = (a * b).sum()
del a
"""
    result = trace(source)
    a_id = step_after(result, 3)["variables"]["a"]
    step = step_after(result, 4)
    assert "a" not in step["variables"]
    assert a_id in step["tensors"]  # same id as while it had a name
    assert step["tensors"][a_id]["values"] == [1.0, 2.0]
    mul = step["nodes"][node_of(step, "y")["next"][0]]
    assert mul["saved"]["self"] == a_id
    assert step["nodes"][mul["next"][0]]["variable"] == a_id  # and its AccumulateGrad


def test_an_intermediate_saved_for_backward_is_listed_after_its_name_is_gone() -> None:
    source = """\
x = torch.tensor([1.0, 2.0], requires_grad=True)
h = x * 3
y = (h * h).sum()
del h
"""
    result = trace(source)
    h_id = step_after(result, 3)["variables"]["h"]
    step = step_after(result, 4)
    square = step["nodes"][node_of(step, "y")["next"][0]]
    assert square["saved"] == {"self": h_id, "other": h_id}
    assert step["tensors"][h_id]["values"] == [3.0, 6.0]


def test_saved_outputs_map_to_the_live_output_tensor() -> None:
    source = """\
x = torch.tensor([0.0, 1.0], requires_grad=True)
s = x.sigmoid()
z = s.sum()
del s
"""
    result = trace(source)
    alive = step_after(result, 3)
    s_id = alive["variables"]["s"]
    assert node_of(alive, "s")["saved"] == {"result": s_id}
    # Once the name is gone, the saved output is still listed, on the same memory.
    gone = step_after(result, 4)
    sigmoid = gone["nodes"][node_of(gone, "z")["next"][0]]
    saved = sigmoid["saved"]["result"]
    assert saved in gone["tensors"]
    assert gone["tensors"][saved]["storage"] == fact(alive, "s")["storage"]
    expected = torch.tensor([0.0, 1.0]).sigmoid()
    assert torch.equal(torch.tensor(gone["tensors"][saved]["values"]), expected)
    # ...and keeps one id from step to step.
    again = trace(source + "k = 1\n")["steps"]
    ids = [s["nodes"][node_of(s, "z")["next"][0]]["saved"]["result"] for s in again[3:]]
    assert len(set(ids)) == 1


def test_saved_tensor_modified_in_place_is_reported_before_backward_fails() -> None:
    source = """\
a = torch.ones(3, requires_grad=True)
b = a.sigmoid()
b.mul_(2)
b.sum().backward()
"""
    result = trace(source)
    step = step_after(result, 3)
    mul = node_of(step, "b")
    assert mul["name"] == "MulBackward0"
    sigmoid = step["nodes"][mul["next"][0]]
    assert sigmoid["name"] == "SigmoidBackward0"
    assert sigmoid["saved"]["result"] is None
    assert "modified by an inplace operation" in sigmoid["saved_errors"]["result"]
    assert result["error"]["line"] == 4
    assert "modified by an inplace operation" in result["error"]["message"]


def test_backward_frees_saved_tensors() -> None:
    source = """\
x = torch.tensor([1.0, 2.0], requires_grad=True)
y = (x * x).sum()
y.backward()
"""
    result = trace(source)
    before = step_after(result, 2)["nodes"]
    after = step_after(result, 3)
    square = after["nodes"][node_of(after, "y")["next"][0]]
    assert set(square["saved"]) == {"self", "other"} == set(before[node_of(after, "y")["next"][0]]["saved"])
    assert square["saved"] == {"self": None, "other": None}
    assert all(m.startswith("Trying to backward through the graph a second time") for m in
               square["saved_errors"].values())
    assert after["tensors"][fact(after, "x")["grad"]]["values"] == [2.0, 4.0]


def test_retain_grad_gives_an_intermediate_its_grad() -> None:
    source = """\
x = torch.tensor([1.0, 2.0], requires_grad=True)
h = x * 3
h.retain_grad()
(h * h).sum().backward()
"""
    result = trace(source)
    assert fact(step_after(result, 2), "h")["retains_grad"] is False
    step = step_after(result, 4)
    h = fact(step, "h")
    assert h["retains_grad"] is True and h["is_leaf"] is False
    assert step["tensors"][h["grad"]]["values"] == [6.0, 12.0]


LOSSES = """\
w = torch.tensor([1.0, -1.0], requires_grad=True)
losses = []
for i in range(3):
    loss = (w * i).sum()
    losses.append(loss{item})
done = True
"""


def test_a_list_of_losses_keeps_every_graph_alive() -> None:
    result = trace(LOSSES.format(item=""))
    first = step_after(result, 4, occurrence=0)
    first_graph = fact(first, "loss")["grad_fn"]
    last = result["steps"][-1]
    assert first_graph in last["nodes"]
    assert fact(last, "losses[0]")["grad_fn"] == first_graph
    sums = [n for n in last["nodes"].values() if n["name"] == "SumBackward0"]
    assert len(sums) == 3


def test_item_lets_each_graph_go() -> None:
    result = trace(LOSSES.format(item=".item()"))
    first = step_after(result, 4, occurrence=0)
    first_graph = fact(first, "loss")["grad_fn"]
    last = result["steps"][-1]
    assert first_graph not in last["nodes"]
    assert set(last["variables"]) == {"w", "loss"}
    sums = [n for n in last["nodes"].values() if n["name"] == "SumBackward0"]
    assert len(sums) == 1  # only the last loss, still named


def test_module_parameters_are_named_by_their_path() -> None:
    source = """\
lin = nn.Linear(3, 2)
model = nn.Sequential(nn.Linear(2, 4), nn.ReLU(), nn.Linear(4, 1))
"""
    step = trace(source)["steps"][-1]
    plain = run_plain(source).namespace
    expected = {f"lin.{n}" for n, _ in plain["lin"].named_parameters()}
    expected |= {f"model.{n}" for n, _ in plain["model"].named_parameters()}
    assert set(step["variables"]) == expected
    assert "model.0.weight" in expected and "model.2.bias" in expected
    weight = fact(step, "model.0.weight")
    assert (weight["shape"], weight["is_leaf"], weight["requires_grad"]) == ([4, 2], True, True)
    assert torch.equal(torch.tensor(weight["values"]), plain["model"][0].weight.detach())


def test_an_optimizer_step_changes_parameters_and_bumps_their_version() -> None:
    source = """\
lin = nn.Linear(2, 1)
opt = torch.optim.SGD(lin.parameters(), lr=0.1)
loss = lin(torch.tensor([[1.0, 2.0]])).sum()
loss.backward()
opt.step()
"""
    result = trace(source)
    before, after = step_after(result, 4), step_after(result, 5)
    plain = run_plain(source).namespace["lin"]
    for name in ("weight", "bias"):
        old, new = fact(before, f"lin.{name}"), fact(after, f"lin.{name}")
        assert new["version"] == old["version"] + 1 == getattr(plain, name)._version
        assert new["values"] != old["values"]
        assert torch.equal(torch.tensor(new["values"]), getattr(plain, name).detach())
        assert before["variables"][f"lin.{name}"] == after["variables"][f"lin.{name}"]


def test_autograd_grad_with_create_graph_returns_a_differentiable_gradient() -> None:
    source = """\
x = torch.tensor(3.0, requires_grad=True)
y = x ** 3
(g,) = torch.autograd.grad(y, x, create_graph=True)
g2 = torch.autograd.grad(g, x)[0]
"""
    step = trace(source)["steps"][-1]
    g, g2 = fact(step, "g"), fact(step, "g2")
    assert (g["values"], g["requires_grad"]) == (27.0, True)
    assert g["grad_fn"] is not None
    assert (g2["values"], g2["requires_grad"], g2["grad_fn"]) == (18.0, False, None)
    assert fact(step, "x")["grad"] is None  # autograd.grad does not accumulate into .grad


def test_a_custom_function_shows_what_save_for_backward_kept() -> None:
    source = """\
class Square(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return 2 * x * grad

a = torch.tensor([1.0, 2.0], requires_grad=True)
out = Square.apply(a)
out.sum().backward()
"""
    result = trace(source)
    assert result["ok"], result["error"]
    step = step_after(result, 13)
    node = node_of(step, "out")
    assert node["name"] == "SquareBackward"
    assert node["saved"] == {"saved_tensors[0]": step["variables"]["a"]}
    # Its forward and backward lines are steps too; backward ran, so the saved tensors are gone.
    assert {4, 5, 9, 10} <= set(lines(result))
    done = step_after(result, 14)
    assert node_of(done, "out")["saved"] == {"saved_tensors": None}
    assert fact(done, "a")["grad"] is not None


def test_index_tensors_saved_in_a_list_are_listed_by_position() -> None:
    source = """\
x = torch.arange(5.0, requires_grad=True)
idx = torch.tensor([0, 2])
y = x[idx]
"""
    step = trace(source)["steps"][-1]
    node = node_of(step, "y")
    assert node["name"] == "IndexBackward0"
    assert node["saved"] == {"indices[0]": step["variables"]["idx"]}


def test_saved_attributes_without_a_raw_twin_never_hold_tensors() -> None:
    """``saved.saved_names`` reads only the ``_saved_*`` attributes that have a ``_raw_saved_*`` twin:
    torch's own nodes, asked directly, hold tensors in no other, and none of the others raises once
    backward freed what the node saved."""
    import torch
    import torch.nn.functional as F  # noqa: N812

    from app.engine.saved import saved_names

    torch.manual_seed(0)
    x = torch.randn(4, 3, requires_grad=True)
    w = torch.randn(3, 3, requires_grad=True)
    image = torch.randn(2, 1, 6, 6, requires_grad=True)
    conv, norm = torch.nn.Conv2d(1, 2, 3), torch.nn.BatchNorm2d(2)
    outputs = [
        x @ w, (x * 2).sin(), x * 3, x.relu(), x.tanh(), x.exp(), F.softmax(x, 0), x.log_softmax(0),
        x[[0, 1]], x[x > 0], torch.stack([x, x]), torch.cat([x, x]), x.sum(), x.mean(), x.max(), x.sort()[0],
        x.topk(2)[0], F.mse_loss(x, x.detach()), F.cross_entropy(x, torch.tensor([0, 1, 2, 0])),
        norm(conv(image)), F.max_pool2d(conv(image), 2), torch.nn.LSTM(3, 4)(x.unsqueeze(1))[0],
        torch.nn.GRU(3, 4)(x.unsqueeze(1))[0], torch.addmm(x, x, w), x.clamp(0, 1), x.where(x > 0, 0.0),
        F.embedding(torch.tensor([0, 1]), w), F.layer_norm(x, (3,)), x.pow(2), x / (x + 3), x.norm(),
        torch.einsum("ij,jk->ik", x, w), x.expand(2, 4, 3), x.t(),
        x.gather(0, torch.zeros(4, 3, dtype=torch.long)), F.gelu(x), torch.cumsum(x, 0), torch.prod(x),
    ]
    nodes: dict[int, object] = {}
    for output in outputs:
        stack = [output.grad_fn]
        while stack:
            node = stack.pop()
            if node is not None and id(node) not in nodes:
                nodes[id(node)] = node
                stack.extend(fn for fn, _ in node.next_functions)

    def others(node: object) -> list[str]:
        read = set(saved_names(node, {}))
        return [a for a in dir(node) if a.startswith("_saved_") and a not in read]

    def holds_tensors(value: object) -> bool:
        items = value if isinstance(value, list | tuple) else (value,)
        return any(isinstance(item, torch.Tensor) for item in items)

    skipped = [(type(node).__name__, a) for node in nodes.values() for a in others(node)]
    assert len(nodes) > 100 and len(skipped) > 50  # the check has something to check
    holding = [(type(n).__name__, a) for n in nodes.values() for a in others(n)
               if holds_tensors(getattr(n, a))]
    assert holding == []
    for output in outputs:
        output.sum().backward()
    for node in nodes.values():
        for attribute in others(node):
            getattr(node, attribute)  # raises if backward freed it

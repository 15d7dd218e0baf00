"""``torch.jit.trace`` runs the snippet's function or module once under torch's tracer, and the engine
reads a step at each of its lines: those reads must not be recorded. Recorded, they joined the traced
graph, made TracerWarnings of their own, and read sizes as 0-dim tensors (under tracing ``x.shape``
holds tensors): the sandbox's answer held a Tensor where a shape's int belongs, and the child could not
send it (the "jit-trace" tutorial: "The sandboxed process failed"). Torch, plain, is the oracle."""

from __future__ import annotations

import json

import pytest
from torch_oracle import assert_same_as_plain, trace

MODULE = """\
class Cell(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(4, 4)
    def forward(self, x, h):
        new_h = torch.tanh(self.linear(x) + h)
        size = x.shape[0]
        return new_h * size, new_h
cell = Cell()
x, h = torch.rand(3, 4), torch.rand(3, 4)
traced = torch.jit.trace(cell, (x, h))
print(traced.code)
a, b = traced(x, h)
a.sum().backward()
g = cell.linear.weight.grad
"""
FUNCTION = """\
def f(x, w):
    y = x @ w
    z = y.relu() + x.numel()
    return z.sum(dim=1)
w = torch.randn(3, 2, requires_grad=True)
traced = torch.jit.trace(f, (torch.ones(4, 3), w))
print(traced.graph.findNode("aten::size") is None, traced(torch.ones(2, 3), w).shape)
out = traced(torch.ones(2, 3), w)
out.sum().backward()
"""
NAMES = """\
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(3, 3)
    def forward(self, x):
        hidden = self.fc(x).relu()
        probs = F.softmax(hidden, dim=-1)
        scaled = probs * hidden
        summed = torch.add(scaled, probs)
        return summed - hidden.sigmoid() @ scaled.t()
def f(x, w):
    z = torch.mm(x, w)
    e = z.exp()
    return F.log_softmax(e + z, dim=1) * e
print(torch.jit.trace(Net(), torch.ones(2, 3)).code)
print(torch.jit.trace(f, (torch.ones(2, 2), torch.ones(2, 2))).code)
"""
BRANCH = """\
def g(x):
    if x.sum() > 0:
        return x * 2
    return x
traced = torch.jit.trace(g, torch.ones(2))
print(traced(-torch.ones(2)))
"""


@pytest.mark.parametrize("source", [MODULE, FUNCTION, NAMES, BRANCH],
                         ids=["module", "function", "names", "branch"])
def test_a_traced_function_is_traced_as_in_plain_torch(source: str) -> None:
    result = assert_same_as_plain(source)  # the traced code, its warnings and its results as plain
    json.dumps(result)  # every step is plain data: no size read as a tensor


def test_the_steps_inside_the_traced_function_read_int_shapes() -> None:
    steps = trace(FUNCTION)["steps"]
    inside = [s for s in steps if s["line"] in (2, 3, 4)]
    assert inside, "the traced function's lines have steps"
    for step in inside:
        for fact in step["tensors"].values():
            assert all(type(n) is int for n in fact["shape"]), fact["shape"]

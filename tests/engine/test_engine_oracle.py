"""Every scenario of issue 2, traced and run plainly: the final snapshot must say what torch says.

Each snippet's last step is compared, tensor by tensor, with the live objects of a plain run of the
same code (values, grads, versions, storage sharing, leaf-ness, graph nodes, saved tensors), and
errors and printed output must match too. The focused files next to this one check the steps in
between.
"""

from __future__ import annotations

import pytest
from torch_oracle import assert_same_as_plain

SCENARIOS: dict[str, tuple[str, set[str] | None]] = {
    "clone": (
        """\
x = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
y = x.clone()
y.sum().backward()
""",
        {"x", "y"},
    ),
    "detach": (
        """\
x = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
d = x.detach()
""",
        {"x", "d"},
    ),
    "clone_detach_vs_detach_clone": (
        """\
x = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
a = x.clone().detach()
b = x.detach().clone()
a.add_(1)
b.mul_(3)
""",
        {"x", "a", "b"},
    ),
    "inplace_through_detached_alias": (
        """\
x = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
d = x.detach()
d.zero_()
d += 5
""",
        {"x", "d"},
    ),
    "views_transpose_slice_expand": (
        """\
m = torch.arange(6.0).reshape(2, 3)
t = m.t()
row = m[1]
col = m[:, 2]
v = torch.tensor([1.0, 2.0])
e = v.expand(3, 2)
""",
        {"m", "t", "row", "col", "v", "e"},
    ),
    "views_of_views_share_version": (
        """\
m = torch.zeros(2, 3)
t = m.t()
tt = t[1:]
tt.add_(1)
m[0, 0] = 7
""",
        {"m", "t", "tt"},
    ),
    "reshape_view_vs_copy": (
        """\
a = torch.arange(6.0).reshape(2, 3)
v = a.reshape(3, 2)
c = a.t().reshape(6)
v.add_(10)
""",
        {"a", "v", "c"},
    ),
    "data_alias": (
        """\
x = torch.ones(3, requires_grad=True)
d = x.data
d.add_(1)
y = (x * 2).sum()
""",
        {"x", "d", "y"},
    ),
    "no_grad": (
        """\
x = torch.ones(3, requires_grad=True)
with torch.no_grad():
    y = x * 2
    x.add_(1)
z = x * 3
""",
        {"x", "y", "z"},
    ),
    "inference_mode": (
        """\
x = torch.ones(3, requires_grad=True)
with torch.inference_mode():
    y = x * 2
    w = torch.zeros(2)
z = x + 1
""",
        {"x", "y", "w", "z"},
    ),
    "requires_grad_on_detached": (
        """\
x = torch.tensor([1.0, 2.0], requires_grad=True)
d = x.detach().requires_grad_()
(d * d).sum().backward()
""",
        {"x", "d"},
    ),
    "retain_grad": (
        """\
x = torch.tensor([1.0, 2.0], requires_grad=True)
h = x * 3
h.retain_grad()
y = (h * h).sum()
y.backward()
""",
        {"x", "h", "y"},
    ),
    "list_of_losses_keeps_graphs": (
        """\
w = torch.tensor([1.0, -1.0], requires_grad=True)
losses = []
for i in range(3):
    loss = (w * i).pow(2).sum()
    losses.append(loss)
""",
        {"w", "losses[0]", "losses[1]", "losses[2]", "loss"},
    ),
    "item_drops_graphs": (
        """\
w = torch.tensor([1.0, -1.0], requires_grad=True)
losses = []
for i in range(3):
    loss = (w * i).pow(2).sum()
    losses.append(loss.item())
""",
        {"w", "loss"},
    ),
    "containers": (
        """\
d = {'k': torch.ones(2), 'n': 3}
pair = (torch.zeros(1), [torch.full((2,), 2.0)])
""",
        {"d['k']", "pair[0]", "pair[1][0]"},
    ),
    "linear_and_sequential": (
        """\
lin = nn.Linear(3, 2)
model = nn.Sequential(nn.Linear(2, 4), nn.ReLU(), nn.Linear(4, 1))
bn = nn.BatchNorm1d(2)
out = model(lin(torch.ones(5, 3)))
""",
        {
            "lin.weight", "lin.bias", "model.0.weight", "model.0.bias", "model.2.weight",
            "model.2.bias", "bn.weight", "bn.bias", "bn.running_mean", "bn.running_var",
            "bn.num_batches_tracked", "out",
        },
    ),
    "optimizer_step": (
        """\
lin = nn.Linear(2, 1)
opt = torch.optim.SGD(lin.parameters(), lr=0.1)
x = torch.tensor([[1.0, 2.0], [3.0, 4.0]])
loss = F.mse_loss(lin(x), torch.zeros(2, 1))
loss.backward()
opt.step()
""",
        {"lin.weight", "lin.bias", "x", "loss"},
    ),
    "autograd_grad_create_graph": (
        """\
x = torch.tensor(3.0, requires_grad=True)
y = x ** 3
(g,) = torch.autograd.grad(y, x, create_graph=True)
g2 = torch.autograd.grad(g, x)[0]
""",
        {"x", "y", "g", "g2"},
    ),
    "saved_tensor_only_the_graph_keeps": (
        """\
a = torch.tensor([1.0, 2.0], requires_grad=True)
b = torch.tensor([3.0, 4.0], requires_grad=True)
h = a * b
y = (h * h).sum()
del a, h
""",
        {"b", "y"},
    ),
    "saved_output": (
        """\
x = torch.tensor([0.0, 1.0, -2.0], requires_grad=True)
s = x.sigmoid()
t = s.tanh()
z = (s * t).sum()
""",
        {"x", "s", "t", "z"},
    ),
    "function_and_loop": (
        """\
def step(w, lr):
    loss = (w * w).sum()
    loss.backward()
    with torch.no_grad():
        w -= lr * w.grad
    w.grad = None
    return loss.item()

w = torch.tensor([1.0, -2.0], requires_grad=True)
history = [step(w, 0.1) for _ in range(3)]
print(history)
""",
        {"w"},
    ),
    "non_finite_values": (
        """\
x = torch.tensor([float('nan'), float('inf'), -float('inf'), 1.5])
y = torch.tensor([float('nan'), 2.0], dtype=torch.float64)
z = torch.log(torch.zeros(2))
""",
        {"x", "y", "z"},
    ),
    "dtypes": (
        """\
i = torch.arange(5)
b = i > 2
h = torch.tensor([0.1, 65504.0], dtype=torch.float16)
bf = torch.tensor([0.1, 3.0], dtype=torch.bfloat16)
big = torch.randn(10, 10)
empty = torch.empty(0, 3)
scalar = torch.tensor(2.5)
""",
        {"i", "b", "h", "bf", "big", "empty", "scalar"},
    ),
    "detach_in_place": (
        """\
x = torch.ones(2, requires_grad=True)
y = x * 2
y.detach_()
""",
        {"x", "y"},
    ),
    "grad_accumulates_and_aliases": (
        """\
x = torch.ones(2, requires_grad=True)
(x * 3).sum().backward()
g = x.grad
x.grad.zero_()
(x * 5).sum().backward()
""",
        {"x", "g"},
    ),
    "assigning_data": (
        """\
x = torch.ones(2, requires_grad=True)
old = x.data
x.data = torch.zeros(3)
""",
        {"x", "old"},
    ),
    "inplace_on_a_view_of_a_non_leaf": (
        """\
a = torch.ones(2, 2, requires_grad=True)
b = a * 1
v = b[0]
v.mul_(3)
c = b.sum()
""",
        {"a", "b", "v", "c"},
    ),
    "split_and_unbind": (
        """\
x = torch.arange(6.0, requires_grad=True)
p, q = x.split(3)
parts = x.view(2, 3).unbind(0)
s = p.sum() + parts[1].sum()
""",
        {"x", "p", "q", "parts[0]", "parts[1]", "s"},
    ),
    "error_inplace_on_leaf": (
        """\
x = torch.ones(3, requires_grad=True)
y = x * 2
x.add_(1)
""",
        None,
    ),
    "error_backward_twice": (
        """\
x = torch.ones(3, requires_grad=True)
y = (x * x).sum()
y.backward()
y.backward()
""",
        None,
    ),
    "error_saved_tensor_modified": (
        """\
a = torch.ones(3, requires_grad=True)
b = a.sigmoid()
b.mul_(2)
b.sum().backward()
""",
        None,
    ),
    "error_inside_function": (
        """\
def f(t):
    print('in f')
    return t.view(7)

f(torch.ones(3))
""",
        None,
    ),
}


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_final_state_matches_plain_run(name: str) -> None:
    source, labels = SCENARIOS[name]
    assert_same_as_plain(source, labels)


def test_a_modules_plain_tensor_attributes_are_named_too() -> None:
    source = """\
class Scaled(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(2, 1)
        self.scale = torch.tensor(2.0)
        self.register_buffer('offset', torch.zeros(1))

    def forward(self, x):
        self.last = self.fc(x) * self.scale
        return self.last + self.offset

net = Scaled()
out = net(torch.ones(3, 2))
"""
    result = assert_same_as_plain(
        source, {"net.fc.weight", "net.fc.bias", "net.offset", "net.scale", "net.last", "out"}
    )
    step = result["steps"][-1]
    # The output cached on the module keeps its graph alive: the graph is drawn from it.
    assert step["tensors"][step["variables"]["net.last"]]["grad_fn"] is not None

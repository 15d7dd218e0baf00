"""Every tensor a user can reach is reached, under the name the user would type — and reading them
runs none of the snippet's code. Torch is the oracle: each name is evaluated in a plain run and the
fact the engine gives for it must describe that very tensor."""

from __future__ import annotations

import pytest
from torch_oracle import assert_tensor, run_plain, trace

import app.engine.names as names

# (snippet, {name in the trace: expression giving the same tensor in a plain run})
REACHED = {
    "class attribute": (
        "class Config:\n    scale = torch.tensor(2.0)\ny = Config.scale * 2\n",
        {"Config.scale": "Config.scale", "y": "y"},
    ),
    "deque and set": (
        "import collections\ndq = collections.deque([torch.ones(1), torch.zeros(2)])\ns = {torch.ones(3)}\n",
        {"dq[0]": "dq[0]", "dq[1]": "dq[1]", "s{0}": "next(iter(s))"},
    ),
    "set members by the order they entered": (  # (not the set's iteration order: app.engine.labels)
        "s = {torch.ones(3)}\ns.add(torch.zeros(2))\ns.add(torch.ones(1))\n"
        "s.discard(next(t for t in s if t.shape == (2,)))\ns.add(torch.zeros(4))\n",
        {"s{0}": "next(t for t in s if t.shape == (3,))", "s{2}": "next(t for t in s if t.shape == (1,))",
         "s{3}": "next(t for t in s if t.shape == (4,))"},
    ),
    "closure": (
        "def make():\n    t = torch.ones(2)\n    def inner():\n        return t * 2\n    return inner\n"
        "f = make()\n",
        {"f.<closure>.t": "f.__closure__[0].cell_contents"},
    ),
    "named tuple": (
        "import collections\nPair = collections.namedtuple('Pair', 'weight bias')\n"
        "p = Pair(torch.ones(2), torch.zeros(1))\n",
        {"p.weight": "p.weight", "p.bias": "p.bias"},
    ),
    "slots": (
        "class Box:\n    __slots__ = ('t', 'unset')\n"
        "    def __init__(self):\n        self.t = torch.ones(2)\n"
        "b = Box()\n",
        {"b.t": "b.t"},
    ),
    "module private attribute": (
        "class Net(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
        "        self.fc = nn.Linear(2, 1)\n        self._hidden = torch.zeros(3)\nnet = Net()\n",
        {"net.fc.weight": "net.fc.weight", "net._hidden": "net._hidden"},
    ),
    "dict keys that are not plain values": (
        "import enum\nclass Color(enum.Enum):\n    RED = 1\nclass Key:\n    pass\n"
        "d = {Color.RED: torch.ones(1), Key(): torch.zeros(1), (1, 'a'): torch.ones(2)}\n",
        {"d[Color.RED]": "d[Color.RED]", "d[<Key>]": "list(d.values())[1]", "d[(1, 'a')]": "d[(1, 'a')]"},
    ),
    "nested deeper than 3": (
        "d = [[[[[[[[[[torch.ones(1)]]]]]]]]]]\n",
        {"d" + "[0]" * 10: "d" + "[0]" * 10},
    ),
    "a non-leaf's assigned grad": (
        "a = torch.ones(2, requires_grad=True)\nb = a * 2\nb.grad = torch.full((2,), 3.0)\n",
        {"b": "b"},
    ),
}


@pytest.mark.parametrize("case", REACHED, ids=list(REACHED))
def test_a_reachable_tensor_has_the_name_a_user_would_type(case: str) -> None:
    source, expected = REACHED[case]
    step = trace(source)["steps"][-1]
    plain = run_plain(source)
    for name, expression in expected.items():
        assert name in step["variables"], (name, sorted(step["variables"]))
        tensor = eval(expression, {}, plain.namespace)  # noqa: S307 - the test's own expressions
        assert_tensor(step, step["variables"][name], tensor)


def test_optimizer_state_is_numbered_as_state_dict_numbers_it() -> None:
    source = """\
w = torch.randn(3, requires_grad=True)
b = torch.zeros(1, requires_grad=True)
v = torch.ones(2, requires_grad=True)
opt = torch.optim.Adam([{"params": [w]}, {"params": [v, b], "lr": 0.01}], lr=0.1)
sgd = torch.optim.SGD([w], lr=0.1, momentum=0.9)
(w.sum() + b.sum() + v.sum()).backward()
opt.step()
sgd.step()
"""
    step = trace(source)["steps"][-1]
    plain = run_plain(source)
    expected = {}
    for optimizer in ("opt", "sgd"):
        for index, state in plain.namespace[optimizer].state_dict()["state"].items():
            for key, value in state.items():
                expected[f"{optimizer}.state[{index}][{key!r}]"] = value
    assert len(expected) == 3 * 3 + 1  # exp_avg, exp_avg_sq and step per Adam parameter; one buffer
    for name, tensor in expected.items():
        assert name in step["variables"], (name, sorted(step["variables"]))
        assert_tensor(step, step["variables"][name], tensor, deep=False)


def test_every_item_of_a_long_list_is_named() -> None:
    source = "losses = []\nfor i in range(300):\n    losses.append(torch.full((1,), float(i)))\n"
    step = trace(source, max_steps=2000)["steps"][-1]
    plain = run_plain(source)
    for i, tensor in enumerate(plain.namespace["losses"]):
        assert_tensor(step, step["variables"][f"losses[{i}]"], tensor)


def test_what_a_limit_cuts_is_said_and_a_container_inside_itself_is_read_once() -> None:
    depth = names.MAX_CONTAINER_DEPTH + 4
    source = f"a = [torch.ones(1)]\na.append(a)\nd = {'[' * depth}torch.ones(1){']' * depth}\n"
    steps = trace(source)["steps"]
    assert sorted(steps[1]["variables"]) == ["a[0]"] and not steps[1]["capped"]
    assert steps[2]["capped"] == {"depth": names.MAX_CONTAINER_DEPTH}
    assert sorted(steps[2]["variables"]) == ["a[0]"]  # d's tensor is past the depth limit


def test_ctx_attributes_of_a_custom_function_are_saved_entries() -> None:
    source = """\
class Scale(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        ctx.doubled = x * 2
        ctx.factor = 3
        return x * 3
    @staticmethod
    def backward(ctx, g):
        return g * ctx.factor
a = torch.ones(2, requires_grad=True)
out = Scale.apply(a)
"""
    step = trace(source)["steps"][-1]
    plain = run_plain(source)
    node = step["nodes"][step["tensors"][step["variables"]["out"]]["grad_fn"]]
    assert set(node["saved"]) == {"saved_tensors[0]", "ctx.doubled"}
    assert node["saved"]["saved_tensors[0]"] == step["variables"]["a"]
    assert_tensor(step, node["saved"]["ctx.doubled"], plain.namespace["out"].grad_fn.doubled, deep=False)


def test_save_on_cpu_shows_what_torchs_own_accessor_returns() -> None:
    source = (
        "a = torch.ones(2, requires_grad=True)\n"
        "with torch.autograd.graph.save_on_cpu():\n    b = a.exp()\n"
    )
    step = trace(source)["steps"][-1]
    plain = run_plain(source)
    node = step["nodes"][step["tensors"][step["variables"]["b"]]["grad_fn"]]
    assert list(node["saved"]) == ["result"]
    assert_tensor(step, node["saved"]["result"], plain.namespace["b"].grad_fn._saved_result, deep=False)


OBSERVED = """\
calls = []
class Key:
    def __repr__(self):
        calls.append('repr')
        return 'Key()'
    def __hash__(self):
        calls.append('hash')
        return 1
class Items(list):
    def __iter__(self):
        calls.append('list iter')
        return list.__iter__(self)
    def __getitem__(self, i):
        calls.append('list getitem')
        return list.__getitem__(self, i)
    def __len__(self):
        calls.append('len')
        return list.__len__(self)
class Table(dict):
    def items(self):
        calls.append('items')
        return dict.items(self)
    def keys(self):
        calls.append('keys')
        return dict.keys(self)
    def values(self):
        calls.append('values')
        return dict.values(self)
class Sneaky:
    def __getattribute__(self, name):
        calls.append('getattribute ' + name)
        return object.__getattribute__(self, name)
    @property
    def __class__(self):
        calls.append('__class__')
        return Sneaky
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(2, 1)
    def named_parameters(self, *args, **kwargs):
        calls.append('named_parameters')
        return super().named_parameters(*args, **kwargs)
    def __getattribute__(self, name):
        if not name.startswith('_'):
            calls.append('module getattribute ' + name)
        return object.__getattribute__(self, name)
d = {Key(): torch.ones(1)}
xs = Items([torch.ones(2)])
t = Table(k=torch.zeros(1))
s = Sneaky()
s.__dict__['t'] = torch.ones(3)
net = Net()
print(calls)
"""


def test_reading_runs_no_code_of_the_snippet() -> None:
    result = trace(OBSERVED)
    plain = run_plain(OBSERVED)
    last = result["steps"][-1]
    assert last["stdout"] == plain.stdout  # the snippet's own calls only (building d hashed its key)
    for name in ("d[<Key>]", "xs[0]", "t['k']", "s.t", "net.fc.weight", "net.fc.bias"):
        assert name in last["variables"], (name, sorted(last["variables"]))
